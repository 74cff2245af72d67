"""`easydata validate`: check that an output directory is complete and consistent with its manifest.

Checks: the manifest exists and parses; every listed shard exists and reads to the end; its schema has
the manifest's columns with int32 token lists; row and token counts (real tokens: packed rows' padding,
`segment_ids == 0`, is not counted) equal the manifest's, per shard,
per dataset and in total; token ids are in `[0, vocab_size)`; token-aligned columns have the same
length as `input_ids` in every row; the document counters add up; no stray shard files are present
that the manifest does not list; a `loss_mask` holds only 0/1 (and 0 on padding). Packed outputs also
get the packed invariants (exact row length, segment ids 1..k with 0 only as trailing padding,
positions restarting per segment).

Shards are read one record batch at a time, so validating never holds a whole shard in memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import posixpath
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from easydata.errors import EasyDataError, ValidationFailed
from easydata.figures import count
from easydata.io.filesystems import get_fs, join
from easydata.io.formats import TOKEN_COLUMNS, ShardUnreadable, iter_shard_batches
from easydata.run.progress import CountProgress
from easydata.run.manifest import MANIFEST_NAME, PARTIAL_INPUTS, member_path, read_manifest
from easydata.ops.mixing import MIXED_NAME

__all__ = ["ValidationReport", "validate_output"]

_MAX_PROBLEMS_PER_SHARD = 5


@dataclasses.dataclass
class ValidationReport:
    """The outcome of `validate_output`."""

    output_dir: str
    problems: list[str] = dataclasses.field(default_factory=list)
    shards: int = 0
    rows: int = 0
    tokens: int = 0
    datasets: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: What holds but a user should know: inputs read only in part, outputs with no rows.
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        lines = [f"{'OK' if self.ok else 'FAILED'}: {self.output_dir}: {count(self.shards, 'shard')},"
                 f" {count(self.rows, 'row')}, {count(self.tokens, 'token')}"]
        for name, info in sorted(self.datasets.items()):
            lines.append(f"  {name}: {count(info['shards'], 'shard')}, {count(info['rows'], 'row')},"
                         f" {count(info['tokens'], 'token')}")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        lines.extend(f"  problem: {p}" for p in self.problems)
        return "\n".join(lines)


def _structure_problems(batch: pa.RecordBatch, columns: list[str]) -> list[str]:
    """Missing columns and token columns that are not `list<int32>` (value checks need both)."""
    problems = []
    missing = [c for c in columns if c not in batch.schema.names]
    if missing:
        problems.append(f"missing columns {missing}")
    for col in TOKEN_COLUMNS:
        if col in batch.schema.names:
            dtype = batch.schema.field(col).type
            if not (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) or dtype.value_type != pa.int32():
                problems.append(f"column '{col}' is {dtype}, expected list<int32>")
    return problems


def _out_of_vocab(batch: pa.RecordBatch, vocab_size: int | None) -> int:
    values = batch.column("input_ids").flatten().to_numpy(zero_copy_only=False)
    if vocab_size is None or not len(values):
        return 0
    return int(np.count_nonzero((values < 0) | (values >= vocab_size)))


def _value_problems(batch: pa.RecordBatch, schema: dict[str, Any]) -> list[str]:
    """Aligned token columns and, for packed rows, the packing invariants."""
    problems = []
    ids = batch.column("input_ids")
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    values = ids.flatten().to_numpy(zero_copy_only=False)
    aligned = True
    for name in TOKEN_COLUMNS[1:]:
        if name in batch.schema.names:
            other = pc.list_value_length(batch.column(name)).to_numpy(zero_copy_only=False)
            if not np.array_equal(other, lengths):
                problems.append(f"column '{name}' length differs from input_ids in some rows")
                aligned = False
    if "loss_mask" in batch.schema.names and aligned:
        mask = batch.column("loss_mask").flatten().to_numpy(zero_copy_only=False)
        if np.any((mask != 0) & (mask != 1)):
            problems.append("loss_mask holds values other than 0 and 1")
        elif "segment_ids" in batch.schema.names and np.any(
                mask[batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False) == 0] != 0):
            problems.append("loss_mask is 1 on padding")
    seq_length = schema.get("seq_length")
    if not (schema.get("packed") and seq_length and aligned):
        return problems
    if np.any(lengths != seq_length):
        problems.append(f"packed rows must all be {seq_length} tokens long")
        return problems
    if "segment_ids" not in batch.schema.names or not len(values):
        return problems
    seg = batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False).reshape(-1, seq_length)
    pad = seg == 0
    real = ~pad
    # Padding only at the tail: once 0 appears, the rest of the row is 0.
    if np.any(np.maximum.accumulate(pad, axis=1) & real):
        problems.append("segment id 0 (padding) is followed by real tokens")
    if np.any(np.diff(seg, axis=1)[real[:, 1:]] < 0):
        problems.append("segment ids decrease within a row")
    # SPEC §5: segments are numbered 1..k in every row
    if np.any(real[:, 0] & (seg[:, 0] != 1)) or np.any((np.diff(seg, axis=1) > 1) & real[:, 1:] & real[:, :-1]):
        problems.append("segment ids do not count 1, 2, ..., k from the start of the row")
    if "positions" in batch.schema.names:
        pos = batch.column("positions").flatten().to_numpy(zero_copy_only=False).reshape(-1, seq_length)
        starts = np.ones_like(pad)
        starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
        index = np.arange(seq_length)[None, :]
        expected = index - np.maximum.accumulate(np.where(starts, index, 0), axis=1)
        if np.any((pos != expected) & real):
            problems.append("positions do not restart at 0 for every segment")
    if "segment_sources" in batch.schema.names:  # provenance: one entry per segment of the row
        entries = pc.list_value_length(batch.column("segment_sources")).to_numpy(zero_copy_only=False)
        if np.any(entries != seg.max(axis=1, initial=0)):
            problems.append("segment_sources does not hold one entry per segment of its row")
    return problems


def _real_tokens(batch: pa.RecordBatch) -> tuple[int, int]:
    """(real tokens, padding tokens) of a batch: padding is `segment_ids == 0` in packed rows."""
    total = len(batch.column("input_ids").flatten())
    if "segment_ids" in batch.schema.names:
        real = int(np.count_nonzero(batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False)))
        return real, total - real
    return total, 0


def _check_shard(path: str, fmt: str, columns: list[str], vocab: int | None, schema: dict[str, Any],
                 progress: Optional[CountProgress] = None) -> tuple[Optional[tuple[int, int, int]], list[str]]:
    """Reads a shard to the end: `((rows, tokens, padding), problems)`, or `(None, problems)` when its
    structure is wrong (then counts would only repeat that problem)."""
    rows = tokens = padding = bad_ids = 0
    problems: dict[str, None] = {}  # ordered, each message once per shard
    for batch in iter_shard_batches(path, fmt):
        structure = _structure_problems(batch, columns)
        if structure:
            return None, structure
        rows += batch.num_rows
        if progress is not None:
            progress.update(batch.num_rows)
        real, pad = _real_tokens(batch)
        tokens, padding = tokens + real, padding + pad
        bad_ids += _out_of_vocab(batch, vocab)
        if len(problems) < _MAX_PROBLEMS_PER_SHARD:
            problems.update(dict.fromkeys(_value_problems(batch, schema)))
            problems = dict.fromkeys(list(problems)[:_MAX_PROBLEMS_PER_SHARD])
    found = list(problems)
    if bad_ids:
        found.insert(0, f"{bad_ids} token ids outside [0, {vocab})")
    return (rows, tokens, padding), found


_COUNTS = ("rows", "tokens", "padding_tokens")


def _listed_rows(datasets: dict[str, Any]) -> int:
    """The rows the manifest lists in every shard (what the progress counts to; a wrong count is a problem the
    check reports, so anything unusable counts as 0 here)."""
    rows = [shard.get("rows") for info in datasets.values() if isinstance(info, dict)
            for shard in info.get("shards", []) if isinstance(shard, dict)]
    return sum(r for r in rows if isinstance(r, int) and not isinstance(r, bool) and r > 0)


def _check_sums(where: str, entry: dict[str, Any], parts: list[dict[str, Any]], of: str) -> list[str]:
    """An entry's counts must equal the sums of its parts' (each level against the one below it, so a
    wrong number is reported once, where it is wrong)."""
    problems = []
    for key in _COUNTS:
        expected = sum(int(part.get(key) or 0) for part in parts)
        if entry.get(key, 0) != expected:
            problems.append(f"{where}: manifest says {entry.get(key)} {key.replace('_', ' ')}, its {of} add up"
                            f" to {expected}")
    return problems


def validate_output(output_dir: str, progress: bool = False) -> ValidationReport:
    """Validates an output directory (see module docstring); never raises for a bad output.

    Every shard file is checked against its manifest entry, every dataset entry against the sum of
    its shard entries, and the totals against the sum of the dataset entries. With `progress`, the rows
    read so far are shown on stderr (`easydata.run.progress.CountProgress`: a large output reads for minutes).

    Raises:
      ValidationFailed: only when there is no manifest at all (a manifest that is there but unreadable,
        or malformed, is a problem of the report).
    """
    try:
        manifest = read_manifest(output_dir)
    except ValidationFailed as e:
        fs, root = get_fs(output_dir)
        if not fs.exists(join(root, MANIFEST_NAME)):
            raise
        return ValidationReport(output_dir=output_dir, problems=[str(e)])
    report = ValidationReport(output_dir=output_dir)
    problems = report.problems
    fmt = manifest.get("format", "parquet")
    vocab = (manifest.get("tokenizer") or {}).get("vocab_size")
    schema = manifest.get("schema") or {}
    columns = list((schema.get("columns") or {"input_ids": None}).keys())
    fs, root = get_fs(output_dir)
    datasets = manifest.get("datasets") or {}
    shown = CountProgress(_listed_rows(datasets), "validating", unit="rows") if progress else None
    with shown or contextlib.nullcontext():
        for name, info in sorted(datasets.items()):
            ds_rows = ds_tokens = 0
            listed = set()
            for shard in info.get("shards", []):
                try:
                    path = member_path(output_dir, shard.get("path"), "shard path")
                except ValidationFailed as e:
                    problems.append(str(e))
                    continue
                listed.update(posixpath.basename(shard[key]) for key in shard if key == "path" or key.endswith("_path"))
                try:
                    counts, found = _check_shard(path, fmt, list(info.get("columns") or columns), vocab, schema, shown)
                except ShardUnreadable as e:
                    problems.append(f"{shard['path']}: unreadable ({e.detail})")
                    continue
                except EasyDataError as e:
                    problems.append(f"{shard['path']}: {e}")
                    continue
                except Exception as e:  # a truncated or corrupt file: report, keep checking the rest
                    problems.append(f"{shard['path']}: unreadable ({type(e).__name__}: {str(e).splitlines()[0]})")
                    continue
                problems.extend(f"{shard['path']}: {p}" for p in found)
                if counts is None:  # wrong structure: counting would only repeat that
                    continue
                for key, value in zip(_COUNTS, counts):
                    if value != shard.get(key, 0):
                        problems.append(f"{shard['path']}: {value} {key.replace('_', ' ')}, manifest says"
                                        f" {shard.get(key, 0)}")
                ds_rows += counts[0]
                ds_tokens += counts[1]
            problems.extend(_check_sums(f"dataset '{name}'", info, info.get("shards", []), "shards"))
            docs = (info.get("documents_in"), info.get("documents_written"), info.get("documents_rejected"))
            if None in docs or docs[0] != docs[1] + docs[2]:
                problems.append(f"dataset '{name}': documents_in {docs[0]} != documents_written {docs[1]} +"
                                f" documents_rejected {docs[2]}")
            folder = join(root, name)
            if fs.exists(folder):
                present = {posixpath.basename(p) for p in fs.ls(folder, detail=False)}
                for stray in sorted(present - listed):
                    problems.append(f"{name}/{stray}: file not listed in the manifest")
            report.datasets[name] = {"shards": len(info.get("shards", [])), "rows": ds_rows, "tokens": ds_tokens}
            report.shards += len(info.get("shards", []))
            report.rows += ds_rows
            report.tokens += ds_tokens
    problems.extend(_check_sums("totals", manifest.get("totals") or {}, list(datasets.values()), "datasets"))
    for name, entries in sorted((manifest.get(PARTIAL_INPUTS) or {}).items()):
        for entry in entries:
            unread = entry.get("unread_bytes")
            report.warnings.append(f"dataset '{name}': input '{entry.get('path')}' was read only in part"
                                   f" ({entry.get('read_bytes')} bytes read, "
                                   f"{'an unknown part' if unread is None else f'{unread} bytes'} not):"
                                   f" {entry.get('reason')}")
    for name, info in sorted(datasets.items()):
        if not info.get("documents_written"):
            report.warnings.append(f"dataset '{name}' holds no documents ({info.get('documents_rejected', 0)}"
                                   " rejected)")
    for name, engine in sorted((manifest.get("tokenizer_engines") or {}).items()):
        running = (engine or {}).get("while_running") or {} if isinstance(engine, dict) else {}
        if running.get("mismatches"):
            problems.append(f"dataset '{name}': tokenizer engine {engine.get('name')} gave other ids than hf on"
                            f" {running['mismatches']} of {running.get('verified')} documents checked while running;"
                            " documents not checked may hold other ids than hf's: rerun with --tokenizer-engine hf")
    if manifest.get("mix"):
        problems.extend(_mix_problems(manifest["mix"], datasets.get(MIXED_NAME)))
    return report


def _mix_problems(mix: dict[str, Any], mixed: dict[str, Any] | None) -> list[str]:
    """A mix's sources add up to the mixed output, and its shares are consistent."""
    if mixed is None:
        return [f"the manifest describes a mix but has no '{MIXED_NAME}' output"]
    sources = mix.get("sources") or {}
    found = []
    tokens_out = sum(s.get("tokens_out", 0) for s in sources.values())
    if tokens_out != mixed.get("tokens"):
        found.append(f"mix: sources give {tokens_out} tokens, '{MIXED_NAME}' holds {mixed.get('tokens')}")
    for name, source in sorted(sources.items()):
        share = source.get("tokens_out", 0) / tokens_out if tokens_out else 0.0
        if abs(share - source.get("realized_token_share", -1)) > 1e-5:
            found.append(f"mix: '{name}' realized_token_share {source.get('realized_token_share')} but its tokens"
                         f" are {share:.6f} of the mix")
    read = mixed.get("documents_read", mixed.get("documents_in"))
    if sum(s.get("documents_in", 0) for s in sources.values()) != read:
        found.append(f"mix: sources' documents_in do not add up to the documents '{MIXED_NAME}' read")
    if "documents_read" in mixed and read != mixed.get("documents_in"):
        found.append(f"mix: '{MIXED_NAME}' documents_read {read} != documents_in {mixed.get('documents_in')}")
    if mixed.get("documents_written") != mixed.get("documents_selected", 0) + mixed.get("documents_unused", 0):
        found.append(f"mix: '{MIXED_NAME}' documents_written {mixed.get('documents_written')} != documents_selected"
                     f" {mixed.get('documents_selected')} + documents_unused {mixed.get('documents_unused')}")
    return found
