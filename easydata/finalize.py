"""The last step of a run: check the counters, move staged files into place, write the manifest.

Runs once, after every shard is staged. It refuses to commit output whose counters do not add up
(`documents_in == documents_written + documents_rejected` for every dataset), fails the run when
the rejected fraction passes `max_rejected_fraction`, and otherwise commits through
`easydata.output.commit_output` and writes `manifest.json` last.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterable

from easydata.chat import template_hash
from easydata.config import PipelineConfig
from easydata.errors import EasyDataError
from easydata.filesystems import join
from easydata.formats import TOKEN_COLUMNS
from easydata.manifest import build_manifest, write_manifest
from easydata.output import commit_output
from easydata.run_plan import RunPlan
from easydata.sharding import ShardInfo

__all__ = ["finalize_output", "output_schema"]


def output_schema(shards: Iterable[ShardInfo], config: PipelineConfig) -> dict[str, Any]:
    """The manifest's `schema` entry: every column with its Arrow type as written, and packing."""
    columns: dict[str, str] = {}
    for shard in shards:
        for name, dtype in shard.columns:
            columns.setdefault(name, dtype)
    packed = config.pack.enabled
    return {"columns": columns, "token_columns": [c for c in TOKEN_COLUMNS if c in columns],
            "packed": packed, "seq_length": config.pack.seq_length if packed else None,
            "strategy": config.pack.strategy if packed else None}


def _dataset_entry(name: str, infos: list[ShardInfo], c: collections.Counter, packed: bool) -> dict[str, Any]:
    """One dataset's manifest entry; checks that its counters add up."""
    rows = sum(s.rows for s in infos)
    written = c["packed_documents"] if packed else rows
    if c["documents_in"] != written + c["documents_rejected"]:
        raise RuntimeError(f"dataset '{name}': documents_in={c['documents_in']} but written={written} +"
                           f" rejected={c['documents_rejected']}; refusing to commit")
    if packed and (rows != c["packed_rows"] or sum(s.tokens for s in infos) != c["packed_tokens"]):
        raise RuntimeError(f"dataset '{name}': shards hold {rows} rows, the packer made {c['packed_rows']};"
                           " refusing to commit")
    entry = {
        "shards": [{"path": s.relative_path, "rows": s.rows, "tokens": s.tokens, "padding_tokens": s.padding_tokens,
                    "bytes": s.bytes} for s in infos],
        "documents_in": c["documents_in"],
        "documents_written": written,
        "documents_rejected": c["documents_rejected"],
        "input_bytes": c["input_bytes"],
        "padding_tokens": sum(s.padding_tokens for s in infos),
    }
    if any(name == "loss_mask" for s in infos for name, _ in s.columns):
        entry["trained_tokens"] = sum(s.trained_tokens for s in infos)
    if packed:
        slots = sum(s.tokens + s.padding_tokens for s in infos)
        entry["segments"] = c["packed_segments"]
        entry["segments_per_row"] = round(c["packed_segments"] / rows, 4) if rows else 0.0
        entry["padding_fraction"] = round(entry["padding_tokens"] / slots, 6) if slots else 0.0
    return entry


def finalize_output(config: PipelineConfig, plan: RunPlan, shards: Iterable[ShardInfo],
                    stats: Iterable[tuple[str, dict[str, int]]], rejected_files: Iterable[str],
                    started_at: float) -> dict[str, Any]:
    """Commits the staged output and returns the manifest written.

    Raises:
      EasyDataError: when too many documents were rejected.
      RuntimeError: when counters do not add up (a bug: nothing is committed).
    """
    counters: dict[str, collections.Counter] = {d.name: collections.Counter() for d in plan.datasets}
    for name, values in stats:
        counters[name].update(values)
    by_dataset: dict[str, list[ShardInfo]] = {d.name: [] for d in plan.datasets}
    for shard in shards:
        by_dataset[shard.dataset].append(shard)
    datasets: dict[str, dict[str, Any]] = {}
    for name, infos in by_dataset.items():
        infos.sort(key=lambda s: s.shard)
        datasets[name] = _dataset_entry(name, infos, counters[name], config.pack.enabled)
    total_in = sum(d["documents_in"] for d in datasets.values())
    total_rejected = sum(d["documents_rejected"] for d in datasets.values())
    limit = config.max_rejected_fraction
    if limit is not None and total_in and total_rejected / total_in > limit:
        raise EasyDataError(f"{total_rejected} of {total_in} documents rejected"
                            f" ({100 * total_rejected / total_in:.2f}% > max_rejected_fraction {limit}); see"
                            f" {join(plan.staging, 'rejected')}")
    rejected_files = sorted(rejected_files)
    moves = [(s.temp_path, s.relative_path) for infos in by_dataset.values() for s in infos]
    moves += [(join(plan.staging, rel), rel) for rel in rejected_files]
    commit_output(plan.output_dir, plan.staging, moves)
    tokenizer, per_dataset = plan.tokenizer_manifest()
    chat = {d.name: {"template_hash": template_hash(d.chat_template) if d.chat_template else None,
                     "assistant_only_loss": config.chat.assistant_only_loss}
            for d in plan.datasets if "trained_tokens" in datasets[d.name]}
    if config.pack.enabled:
        tokenizer = {**tokenizer, "pad_token_id_used": plan.datasets[0].pad_id if plan.datasets else None}
    elapsed = time.time() - started_at
    written = [s for infos in by_dataset.values() for s in infos]
    manifest = build_manifest(
        config=config.to_dict(), fingerprint=config.fingerprint(), tokenizer=tokenizer,
        schema=output_schema(written, config), datasets=datasets, output_format=config.save.format,
        compression=config.save.compression, rejected_files=rejected_files, tokenizers=per_dataset,
        run={"run_id": plan.run_id, "elapsed_seconds": round(elapsed, 3)}, chat=chat)
    write_manifest(plan.output_dir, manifest)
    return manifest
