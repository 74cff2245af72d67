"""`easydata validate`: check that an output directory is complete and consistent with its manifest.

Checks: the manifest exists and parses; every listed shard exists and reads to the end; its schema has
the manifest's columns with int32 token lists; row and token counts (real tokens: packed rows' padding,
`segment_ids == 0`, is not counted) equal the manifest's, per shard,
per dataset and in total; token ids are in `[0, vocab_size)`; token-aligned columns have the same
length as `input_ids` in every row; the document counters add up; no stray shard files are present
that the manifest does not list. Packed outputs also get the packed invariants (exact row length,
segment ids 1..k with 0 only as trailing padding, positions restarting per segment).

Shards are read one record batch at a time, so validating never holds a whole shard in memory.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from easydata.errors import EasyDataError
from easydata.filesystems import get_fs, join
from easydata.formats import TOKEN_COLUMNS, iter_shard_batches
from easydata.manifest import read_manifest

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

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        lines = [f"{'OK' if self.ok else 'FAILED'}: {self.output_dir}: {self.shards} shards, {self.rows:,} rows,"
                 f" {self.tokens:,} tokens"]
        for name, info in sorted(self.datasets.items()):
            lines.append(f"  {name}: {info['shards']} shards, {info['rows']:,} rows, {info['tokens']:,} tokens")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return "\n".join(lines)


def _check_batch(batch: pa.RecordBatch, where: str, vocab_size: int | None, schema: dict[str, Any],
                 problems: list[str]) -> int:
    """Checks one record batch; returns its real (non-padding) token count."""
    ids = batch.column("input_ids")
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    values = ids.flatten().to_numpy(zero_copy_only=False)
    if vocab_size is not None and len(values):
        bad = int(np.count_nonzero((values < 0) | (values >= vocab_size)))
        if bad:
            problems.append(f"{where}: {bad} token ids outside [0, {vocab_size})")
    for name in TOKEN_COLUMNS[1:]:
        if name in batch.schema.names:
            other = pc.list_value_length(batch.column(name)).to_numpy(zero_copy_only=False)
            if not np.array_equal(other, lengths):
                problems.append(f"{where}: column '{name}' length differs from input_ids in some rows")
    seq_length = schema.get("seq_length")
    if schema.get("packed") and seq_length:
        if np.any(lengths != seq_length):
            problems.append(f"{where}: packed rows must all be {seq_length} tokens long")
        elif "segment_ids" in batch.schema.names and len(values):
            seg = batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False).reshape(-1, seq_length)
            pad = seg == 0
            # Padding only at the tail: once 0 appears, the rest of the row is 0.
            if np.any(np.maximum.accumulate(pad, axis=1) & ~pad):
                problems.append(f"{where}: segment id 0 (padding) is followed by real tokens")
            if np.any(np.diff(seg, axis=1)[~pad[:, 1:]] < 0):
                problems.append(f"{where}: segment ids decrease within a row")
            real = ~pad  # SPEC §5: segments are numbered 1..k in every row
            if np.any(real[:, 0] & (seg[:, 0] != 1)) or np.any((np.diff(seg, axis=1) > 1) & real[:, 1:] & real[:, :-1]):
                problems.append(f"{where}: segment ids do not count 1, 2, ..., k from the start of the row")
            if "positions" in batch.schema.names:
                pos = batch.column("positions").flatten().to_numpy(zero_copy_only=False).reshape(-1, seq_length)
                starts = np.ones_like(pad)
                starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
                expected = np.arange(seq_length)[None, :] - np.maximum.accumulate(
                    np.where(starts, np.arange(seq_length)[None, :], 0), axis=1)
                if np.any((pos != expected) & ~pad):
                    problems.append(f"{where}: positions do not restart at 0 for every segment")
    if "segment_ids" in batch.schema.names:
        return int(np.count_nonzero(batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False)))
    return int(len(values))


def validate_output(output_dir: str) -> ValidationReport:
    """Validates an output directory (see module docstring); never raises for a bad output.

    Raises:
      ValidationFailed: only when there is no readable manifest at all.
    """
    manifest = read_manifest(output_dir)
    report = ValidationReport(output_dir=output_dir)
    problems = report.problems
    fmt = manifest.get("format", "parquet")
    vocab = (manifest.get("tokenizer") or {}).get("vocab_size")
    schema = manifest.get("schema") or {}
    columns = list((schema.get("columns") or {"input_ids": None}).keys())
    fs, root = get_fs(output_dir)
    for name, info in sorted((manifest.get("datasets") or {}).items()):
        ds_rows = ds_tokens = 0
        listed = set()
        for shard in info.get("shards", []):
            path = join(output_dir, shard["path"])
            listed.add(posixpath.basename(shard["path"]))
            rows = tokens = 0
            before = len(problems)
            try:
                for batch in iter_shard_batches(path, fmt):
                    missing = [c for c in columns if c not in batch.schema.names]
                    if missing:
                        problems.append(f"{shard['path']}: missing columns {missing}")
                        break
                    for col in TOKEN_COLUMNS:
                        if col in batch.schema.names and batch.schema.field(col).type.value_type != pa.int32():
                            problems.append(f"{shard['path']}: column '{col}' is"
                                            f" {batch.schema.field(col).type}, expected list<int32>")
                    rows += batch.num_rows
                    tokens += _check_batch(batch, shard["path"], vocab, schema, problems)
                    if len(problems) - before >= _MAX_PROBLEMS_PER_SHARD:
                        break
            except EasyDataError as e:
                problems.append(f"{shard['path']}: {e}")
                continue
            except Exception as e:  # a truncated or corrupt file: report, keep checking the rest
                problems.append(f"{shard['path']}: unreadable ({type(e).__name__}: {str(e).splitlines()[0]})")
                continue
            if rows != shard["rows"]:
                problems.append(f"{shard['path']}: {rows} rows, manifest says {shard['rows']}")
            if tokens != shard["tokens"]:
                problems.append(f"{shard['path']}: {tokens} tokens, manifest says {shard['tokens']}")
            ds_rows += rows
            ds_tokens += tokens
        if ds_rows != info.get("rows") or ds_tokens != info.get("tokens"):
            problems.append(f"dataset '{name}': shards hold {ds_rows} rows / {ds_tokens} tokens, manifest says"
                            f" {info.get('rows')} / {info.get('tokens')}")
        counts = (info.get("documents_in"), info.get("documents_written"), info.get("documents_rejected"))
        if None in counts or counts[0] != counts[1] + counts[2]:
            problems.append(f"dataset '{name}': documents_in {counts[0]} != documents_written {counts[1]} +"
                            f" documents_rejected {counts[2]}")
        folder = join(root, name)
        if fs.exists(folder):
            present = {posixpath.basename(p) for p in fs.ls(folder, detail=False)}
            for stray in sorted(present - listed):
                problems.append(f"{name}/{stray}: file not listed in the manifest")
        report.datasets[name] = {"shards": len(info.get("shards", [])), "rows": ds_rows, "tokens": ds_tokens}
        report.shards += len(info.get("shards", []))
        report.rows += ds_rows
        report.tokens += ds_tokens
    totals = manifest.get("totals") or {}
    if totals.get("rows") != report.rows or totals.get("tokens") != report.tokens:
        problems.append(f"totals: manifest says {totals.get('rows')} rows / {totals.get('tokens')} tokens,"
                        f" shards hold {report.rows} / {report.tokens}")
    return report
