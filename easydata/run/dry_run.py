"""`easydata run --dry-run` and `Pipeline(...).plan()`: what a job would do, without doing it.

`plan_report(config)` validates the config, lists each dataset's input files and the splits the
workers would share, loads each tokenizer, and describes the output (outputs, format, codec,
shards, packing) and whether the output directory is in the way. It estimates tokens by tokenizing
the first records of each dataset (bytes per token times input bytes) and time from
`TOKENS_PER_SECOND_PER_CORE`. Nothing is written: no output directory, no lock, no staging.
Apache Beam is not imported.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from easydata.run.machine import splits_per_dataset, usable_cores
from easydata.config import PipelineConfig
from easydata.errors import ConfigError

__all__ = ["DatasetReport", "DryRunReport", "plan_report", "TOKENS_PER_SECOND_PER_CORE"]

#: Tokens per second per core of the whole local pipeline (read, tokenize, shuffle, write) on the
#: 48 MB benchmark (benchmarks/bench_pipeline.py, Mistral tokenizer): a rough planning figure only.
TOKENS_PER_SECOND_PER_CORE = 500_000
_SAMPLE_DOCUMENTS = 200
#: Bytes of a stored row per token: int32 ids and mask (unpacked), ids, segments, positions (packed).
_ROW_BYTES_PER_TOKEN = {False: 8, True: 12}


@dataclasses.dataclass
class DatasetReport:
    name: str
    files: list[str]
    input_bytes: int
    splits: int
    tokenizer: dict[str, Any]
    bytes_per_token: Optional[float]

    @property
    def estimated_tokens(self) -> Optional[int]:
        return None if not self.bytes_per_token else int(self.input_bytes / self.bytes_per_token)


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

    @property
    def estimated_tokens(self) -> Optional[int]:
        known = [d.estimated_tokens for d in self.datasets]
        return None if any(t is None for t in known) else sum(known)  # type: ignore[misc]

    @property
    def estimated_seconds(self) -> Optional[float]:
        tokens = self.estimated_tokens
        return None if tokens is None else tokens / (TOKENS_PER_SECOND_PER_CORE * max(self.cores, 1))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(estimated_tokens=self.estimated_tokens, estimated_seconds=self.estimated_seconds)
        for ds, report in zip(data["datasets"], self.datasets):
            ds["estimated_tokens"] = report.estimated_tokens
        return data

    def to_text(self) -> str:
        lines = ["easydata dry run: nothing was read beyond a sample, nothing was written"]
        for d in self.datasets:
            tok = d.tokenizer
            shown = ", ".join(d.files[:3]) + (f", ... ({len(d.files)} files)" if len(d.files) > 3 else "")
            lines.append(f"dataset '{d.name}': {len(d.files)} file(s), {d.input_bytes / 1e6:,.1f} MB, {d.splits}"
                         f" split(s) for the workers: {shown}")
            lines.append(f"  tokenizer {tok['name_or_path']} (vocab {tok['vocab_size']:,}, bos {tok['bos_token_id']},"
                         f" eos {tok['eos_token_id']}, pad {tok['pad_token_id']})")
            if d.estimated_tokens is not None:
                lines.append(f"  about {d.estimated_tokens:,} tokens ({d.bytes_per_token:.2f} bytes per token in a"
                             f" sample of its first documents)")
        if self.mix:
            lines.append("mix (shares of output tokens): " + ", ".join(f"{k} {v:g}" for k, v in self.mix.items()))
        layout = f"packed rows of {self.seq_length} tokens" if self.packed else "one row per document"
        lines.append(f"output {self.output_dir}: {self.format} ({self.codec}), {layout}")
        for name, shards in self.outputs.items():
            lines.append(f"  {name}/: about {shards} shard(s)")
        if self.output_exists:
            lines.append("  the output directory exists: " + ("it would be replaced (overwrite)" if self.overwrite else
                                                             "the run would stop (set save.overwrite or --overwrite)"))
        if self.estimated_seconds is not None:
            lines.append(f"estimate: about {self.estimated_tokens:,} tokens, about {_duration(self.estimated_seconds)} on"
                         f" {self.cores} core(s) here (rough: {TOKENS_PER_SECOND_PER_CORE:,} tokens/s per core)")
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bytes_per_token(config: PipelineConfig, ds: Any, split: Any, handle: Any) -> Optional[float]:
    """Text bytes per token over the first documents of `split` (None when it holds no document)."""
    from easydata.io.sources import read_split

    texts: list[str] = []
    for batch in read_split(split, ds, batch_size=_SAMPLE_DOCUMENTS, limit=_SAMPLE_DOCUMENTS, rejects=[]):
        texts.extend(t for t in batch.texts if t)
        if len(texts) >= _SAMPLE_DOCUMENTS:
            break
    if not texts:
        return None
    tok = config.tokenize_for(ds)
    flat, _ = handle.encode_batch(texts, add_bos=tok.add_bos, add_eos=tok.add_eos)
    return sum(len(t.encode("utf-8")) for t in texts) / max(len(flat), 1)


def plan_report(config: PipelineConfig) -> DryRunReport:
    """Everything `easydata run` would decide for `config`, without running it.

    Raises:
      ConfigError / InputError / TokenizerError: what the run itself would stop with first.
    """
    from easydata.io.filesystems import get_fs, join
    from easydata.run.manifest import MANIFEST_NAME
    from easydata.io.sources import plan_input
    from easydata.text.tokenizer import load_tokenizer

    problems = config.validate()
    if problems:
        raise ConfigError(problems)
    reports, handles = [], {}
    for ds in config.datasets:
        plan = plan_input(ds, splits_wanted=splits_per_dataset())
        key = config.tokenizer_for(ds)
        if key not in handles:
            handles[key] = load_tokenizer(key)
        handle = handles[key]
        files = sorted({s.path for s in plan.splits})
        input_bytes = sum(s.size for s in plan.splits)
        per_token = _bytes_per_token(config, ds, plan.splits[0], handle) if plan.splits else None
        reports.append(DatasetReport(ds.name, files, input_bytes, len(plan.splits), handle.info.to_manifest(), per_token))
    mix = config.static_mix
    packed = config.pack.enabled
    names = ["mixed"] if mix is not None else [d.name for d in config.datasets]
    fractions = config.save.split_fractions()
    outputs: dict[str, int] = {}
    total = sum(r.estimated_tokens or 0 for r in reports)
    for name in names:
        tokens = total if mix is not None else next(r.estimated_tokens or 0 for r in reports if r.name == name)
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
    except Exception:  # an unreachable URL: the run itself will say so
        exists = False
    return DryRunReport(datasets=reports, output_dir=config.save.output_dir, output_exists=exists,
                        overwrite=config.save.overwrite, format=config.save.format, codec=config.save.codec,
                        packed=packed, seq_length=config.pack.seq_length if packed else None, outputs=outputs,
                        mix=dict(mix.weights) if mix is not None else None, cores=usable_cores())
