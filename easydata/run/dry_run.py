"""`easydata run --dry-run` and `Pipeline(...).plan()`: what a job would do, without doing it.

`plan_report(config)` validates the config, lists each dataset's input files and the splits the
workers would share, loads each tokenizer, and describes the output (outputs, format, codec,
shards, packing) and whether the output directory is in the way. Nothing is written: no output
directory, no lock, no staging. Apache Beam is not imported.

Tokens are estimated by reading a slice of up to `_SAMPLE_SPLITS` of each dataset's splits (chat
records rendered with the run's template, documents tokenized with the run's BOS/EOS and truncation)
and scaling what the sample gave by what the sample covered: per row for Parquet and Arrow files
(their row counts are in their footers), per byte of decompressed text for line, CSV and JSON files
(a compressed file's decompressed size is estimated from its first megabytes). The time is the
sample's own measured tokens per CPU-second, times the cores, plus the pipeline's start-up.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from easydata.figures import count, size
from easydata.run.machine import usable_cores
from easydata.config import PipelineConfig

__all__ = ["DatasetReport", "DryRunReport", "plan_report", "PIPELINE_SHARE_OF_TOKENIZER", "STARTUP_SECONDS"]

#: The whole local pipeline's share of its tokenizer's own speed (benchmarks/bench_pipeline.py: 0.84-1.04
#: of one single-threaded encoding process per core, packed), and its fixed start-up in seconds.
PIPELINE_SHARE_OF_TOKENIZER = 0.85
STARTUP_SECONDS = 3.5
_SAMPLE_SPLITS = 8
_SAMPLE_RECORDS = 2000  # per dataset, over the sampled splits
#: Bytes of a stored row per token: int32 ids and mask (unpacked), ids, segments, positions (packed).
_ROW_BYTES_PER_TOKEN = {False: 8, True: 12}


@dataclasses.dataclass
class DatasetReport:
    name: str
    files: list[str]
    input_bytes: int
    splits: int
    tokenizer: dict[str, Any]
    estimated_tokens: Optional[int]
    sampled_records: int = 0  # records the estimate read (documents and rejects)
    tokens_per_cpu_second: Optional[float] = None  # the tokenizer's speed on the sample, per core
    text_bytes: Optional[int] = None  # the bytes its readers will consume (`sources.text_bytes`): compressed files
    # decompressed, a table's columns read uncompressed (estimated)


@dataclasses.dataclass
class DryRunReport:
    """What `plan_report` found; `to_text()` is what `--dry-run` prints."""

    datasets: list[DatasetReport]
    output_dir: str
    output_exists: bool
    overwrite: bool
    format: str
    codec: str
    packed: bool
    seq_length: Optional[int]
    outputs: dict[str, int]
    mix: Optional[dict[str, float]]
    cores: int
    #: A mix's estimate from the datasets' estimated tokens: `budget`, per source `tokens_out` and
    #: `repeat_factor`, and the sources that set the budget (`budget_set_by`).
    mix_estimate: Optional[dict[str, Any]] = None
    foreign: Optional[str] = None  # a path `overwrite` would refuse to delete (`easydata.run.output.foreign_file`)
    not_a_directory: bool = False  # the output path is a file (or a FIFO, a device): the run would stop

    @property
    def estimated_tokens(self) -> Optional[int]:
        known = [d.estimated_tokens for d in self.datasets]
        return None if any(t is None for t in known) else sum(known)  # type: ignore[misc]

    @property
    def estimated_seconds(self) -> Optional[float]:
        """Start-up plus each dataset's tokens at its sample's measured speed on this machine's cores."""
        if self.estimated_tokens is None or any(not d.tokens_per_cpu_second for d in self.datasets if d.estimated_tokens):
            return None
        rate = PIPELINE_SHARE_OF_TOKENIZER * max(self.cores, 1)
        return STARTUP_SECONDS + sum(d.estimated_tokens / (d.tokens_per_cpu_second * rate)  # type: ignore[operator]
                                     for d in self.datasets if d.estimated_tokens)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(estimated_tokens=self.estimated_tokens, estimated_seconds=self.estimated_seconds)
        return data

    def to_text(self) -> str:
        lines = ["easydata dry run: nothing was read beyond a sample, nothing was written"]
        for d in self.datasets:
            tok = d.tokenizer
            shown = ", ".join(d.files[:3]) + (f", ... ({len(d.files)} files)" if len(d.files) > 3 else "")
            text = f" (about {size(d.text_bytes)} to read, uncompressed)" \
                if d.text_bytes is not None and d.text_bytes != d.input_bytes else ""
            lines.append(f"dataset '{d.name}': {count(len(d.files), 'file')}, {size(d.input_bytes)}{text},"
                         f" {count(d.splits, 'split')} for the workers: {shown}")
            lines.append(f"  tokenizer {tok['name_or_path']} (vocab {tok['vocab_size']:,}, bos {tok['bos_token_id']},"
                         f" eos {tok['eos_token_id']}, pad {tok['pad_token_id']})")
            if d.estimated_tokens is not None:
                lines.append(f"  about {d.estimated_tokens:,} tokens (from {d.sampled_records:,} records sampled across"
                             f" its splits)")
        if self.mix:
            lines.append("mix (shares of output tokens): " + ", ".join(f"{k} {v:g}" for k, v in self.mix.items()))
            est = self.mix_estimate
            if est:
                for name, source in est["sources"].items():
                    lines.append(f"  {name}: about {source['tokens_out']:,} tokens out of its"
                                 f" {source['tokens']:,} (x{source['repeat_factor']:.3g})")
                if est["budget_set_by"]:
                    lines.append(f"  about {est['budget']:,} tokens in all, a budget set by"
                                 f" {', '.join(est['budget_set_by'])} ({est['stop_strategy']})")
        layout = f"packed rows of {self.seq_length} tokens" if self.packed else "one row per document"
        lines.append(f"output {self.output_dir}: {self.format} ({self.codec}), {layout}")
        for name, shards in self.outputs.items():
            lines.append(f"  {name}/: about {count(shards, 'shard')}")
        if self.not_a_directory:
            lines.append("  the output path exists and is not a directory: the run would stop")
        elif self.output_exists:
            lines.append("  the output directory exists: " + (
                f"the run would stop: '{self.foreign}' in it was not written by an easydata run" if self.overwrite
                and self.foreign else "it would be replaced (overwrite)" if self.overwrite else
                "the run would stop (set save.overwrite or --overwrite)"))
        if self.estimated_seconds is not None:
            lines.append(f"estimate: about {self.estimated_tokens:,} tokens, about {_duration(self.estimated_seconds)} on"
                         f" {count(self.cores, 'core')} here (the sample's tokenizing speed, {STARTUP_SECONDS:g} s of"
                         " start-up)")
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Sample:
    """What reading and tokenizing part of a dataset gave: tokens, and the rows (table splits) or
    decompressed bytes (line, CSV and JSON splits) they came from."""

    def __init__(self) -> None:
        self.records = 0
        self.tokens = 0
        self.covered = 0
        self.cpu_seconds = 0.0


def _sample_split(config: PipelineConfig, ds: Any, split: Any, stages: Any, limit: int, sample: _Sample,
                  by_rows: bool) -> None:
    """Reads up to `limit` records at the start of `split` and runs the run's own stages on them (chat, then
    tokenize: `easydata.text.stages.DocumentStages`); adds to `sample` the tokens they wrote and what they
    came from (rows, or bytes read)."""
    import time

    from easydata.io.sources import read_split

    rejects: list[Any] = []
    records = 0
    for batch in read_split(split, ds, batch_size=limit, limit=limit, rejects=rejects,
                            messages_field=config.chat.messages_field):
        if not by_rows:
            sample.covered += batch.input_bytes
        records += len(batch)
        rendered, _ = stages.render(batch)
        began = time.process_time()  # the tokenizer's own time: the speed the time estimate scales
        encoded = stages.encode(rendered)
        sample.cpu_seconds += time.process_time() - began
        sample.tokens += stages.rows(rendered, encoded)[1].tokens
    records += sum(r.records for r in rejects)
    sample.records += records
    if by_rows:
        sample.covered += records


def _estimate(config: PipelineConfig, ds: Any, splits: list[Any], handle: Any, template: Optional[str]
              ) -> tuple[Optional[int], int, Optional[float]]:
    """`(estimated tokens, records sampled, tokens per CPU-second)` of one dataset."""
    from easydata.io.filesystems import decompressed_size
    from easydata.io.sampling import split_rows, spread
    from easydata.text.stages import DocumentStages

    if not splits:
        return None, 0, None
    stages = DocumentStages.for_dataset(config, ds, handle, template)
    rows = {id(s): split_rows(s) for s in splits}
    chosen = splits[::max(1, len(splits) // _SAMPLE_SPLITS)][:_SAMPLE_SPLITS]
    own: dict[int, _Sample] = {id(split): _Sample() for split in chosen}  # each one's tokens per row or byte
    places = {id(split): spread(split, max(1, _SAMPLE_SPLITS // len(chosen))) for split in chosen}
    sampled = [split for split in chosen if places[id(split)]]  # not a compressed file's later parts
    for split in sampled:
        for part in places[id(split)]:
            _sample_split(config, ds, part, stages, max(16, _SAMPLE_RECORDS // len(sampled) // len(places[id(split)])),
                          own[id(split)], rows[id(split)] is not None)
    by_rows, by_bytes = _Sample(), _Sample()  # pooled, for the splits not sampled
    for split in chosen:
        pool = by_rows if rows[id(split)] is not None else by_bytes
        for key in ("records", "tokens", "covered", "cpu_seconds"):
            setattr(pool, key, getattr(pool, key) + getattr(own[id(split)], key))
    tokens = by_rows.tokens + by_bytes.tokens
    if not tokens:
        return None, by_rows.records + by_bytes.records, None
    total = 0.0
    for split in splits:
        counted = rows[id(split)] is not None
        sample = own.get(id(split)) or _Sample()
        if not sample.covered:  # not sampled (or nothing read there): what the other splits of its kind gave
            sample = by_rows if counted else by_bytes
        if counted and sample.covered:
            total += rows[id(split)] * sample.tokens / sample.covered
        elif not counted and sample.covered:  # bytes of text: a file, a byte range, a part of a compressed file
            total += decompressed_size(split.path, split.size) \
                * sample.tokens / sample.covered
        else:  # no sample of this kind: as many tokens per input byte as the sampled files gave
            total += split.size * tokens / max(sum(s.size for s in chosen), 1)
    if ds.num_rows is not None:
        total = min(total, ds.num_rows * tokens / max(by_rows.records + by_bytes.records, 1))
    cpu = by_rows.cpu_seconds + by_bytes.cpu_seconds
    return int(total), by_rows.records + by_bytes.records, (tokens / cpu if cpu > 0 else None)


def plan_report(config: PipelineConfig) -> DryRunReport:
    """Everything `easydata run` would decide for `config`, without running it.

    Raises:
      ConfigError / InputError / TokenizerError: what the run itself would stop with first.
    """
    from easydata.io.filesystems import get_fs, join
    from easydata.run.manifest import MANIFEST_NAME
    from easydata.io.sources import total_input_bytes
    from easydata.run.run_plan import plan_datasets

    # The run's own checks and per-dataset plan, from the one place that owns them (easydata.run.run_plan).
    plans, handles = plan_datasets(config)
    reports = []
    for ds, plan in zip(config.datasets, plans):
        handle = handles[plan.tokenizer]
        files = sorted({s.path for s in plan.splits})
        tokens, sampled, speed = _estimate(config, ds, plan.splits, handle, plan.chat_template)
        reports.append(DatasetReport(ds.name, files, total_input_bytes(plan.splits), len(plan.splits),
                                     handle.info.to_manifest(), tokens, sampled, speed, text_bytes=plan.input_bytes))
    mix = config.static_mix
    mix_estimate = _mix_estimate(mix, reports) if mix is not None else None
    packed = config.pack.enabled
    names = ["mixed"] if mix is not None else [d.name for d in config.datasets]
    fractions = config.save.split_fractions()
    outputs: dict[str, int] = {}
    total = sum(r.estimated_tokens or 0 for r in reports)
    for name in names:
        tokens = ((mix_estimate["budget"] if mix_estimate else total) if mix is not None
                  else next(r.estimated_tokens or 0 for r in reports if r.name == name))
        for split, fraction in (fractions or {"": 1.0}).items():
            out = f"{name}/{split}" if split else name
            if config.save.num_shards is not None:
                outputs[out] = config.save.num_shards
            else:
                row_bytes = tokens * fraction * _ROW_BYTES_PER_TOKEN[packed]
                outputs[out] = max(1, math.ceil(row_bytes / config.save.max_shard_bytes))
    fs, root = get_fs(config.save.output_dir)
    try:
        exists = fs.exists(join(root, MANIFEST_NAME)) or (fs.isdir(root) and bool(fs.ls(root)))
        not_a_directory = not exists and fs.exists(root) and not fs.isdir(root)
    except Exception:  # an unreachable URL: the run itself will say so
        exists = not_a_directory = False
    foreign = None
    if exists and config.save.overwrite:
        from easydata.run.output import foreign_file

        try:
            foreign = foreign_file(config.save.output_dir)
        except Exception:  # noqa: BLE001 - the run itself reports an unreadable output
            foreign = None
    return DryRunReport(datasets=reports, output_dir=config.save.output_dir, output_exists=exists,
                        overwrite=config.save.overwrite, format=config.save.format, codec=config.save.codec,
                        packed=packed, seq_length=config.pack.seq_length if packed else None, outputs=outputs,
                        mix=dict(mix.weights) if mix is not None else None, cores=usable_cores(), foreign=foreign,
                        mix_estimate=mix_estimate, not_a_directory=not_a_directory)


def _mix_estimate(mix: Any, reports: list[DatasetReport]) -> Optional[dict[str, Any]]:
    """What the mix would take from each source, planned as the run plans it (`easydata.ops.mixing`) from
    the sources' estimated tokens; None when a source has no estimate."""
    from easydata.ops.mixing import budget_setters, mix_budget, normalise_weights

    tokens = {r.name: r.estimated_tokens for r in reports if r.name in mix.weights}
    if any(t is None for t in tokens.values()):
        return None
    weights = normalise_weights(mix.weights)
    try:
        budget = mix_budget(tokens, weights, mix.stop_strategy, mix.total_tokens)
    except Exception:  # noqa: BLE001 - a source with no tokens: the run itself says so, in its own words
        return None
    sources = {name: {"tokens": tokens[name], "tokens_out": round(w * budget),
                      "repeat_factor": (w * budget / tokens[name]) if tokens[name] else 0.0}
               for name, w in weights.items()}
    return {"stop_strategy": mix.stop_strategy if mix.total_tokens is None else "total_tokens",
            "budget": round(budget), "sources": sources,
            "budget_set_by": budget_setters(tokens, weights, mix.stop_strategy, mix.total_tokens)}
