"""The last step of a run: check the counters, move staged files into place, write the manifest.

Runs once, after every shard is staged. It refuses to commit output whose counters do not add up
(`documents_in == documents_written + documents_rejected` for every dataset), fails the run when
the rejected fraction passes `max_rejected_fraction`, and otherwise commits through
`easydata.run.output.commit_output` and writes `manifest.json` last.
"""

from __future__ import annotations

import collections
import json
import time
from typing import Any, Iterable, Optional

from easydata.text.chat import template_hash
from easydata.config import PipelineConfig
from easydata.errors import EasyDataError, RunInconsistent
from easydata.figures import count, percent
from easydata.io.filesystems import open_file
from easydata.io.formats import TOKEN_COLUMNS
from easydata.run.checkpoint import recorded_input_versions
from easydata.run.counters import RunCounters
from easydata.run.manifest import build_manifest
from easydata.ops.mixing import MIXED_NAME, MixPlan
from easydata.io.sources import check_all_unchanged
from easydata.io.staging import Staging
from easydata.run.lock import check_owner, release_lock
from easydata.run.output import check_not_replaced, commit_output
from easydata.run.run_plan import RunPlan
from easydata.run.staged_units import iter_units
from easydata.ops.sharding import ShardInfo
from easydata.ops.splits import split_output_name

__all__ = ["finalize_output", "output_schema"]


def output_schema(shards: Iterable[ShardInfo], config: PipelineConfig) -> dict[str, Any]:
    """The manifest's `schema` entry: every column with its Arrow type as written, and packing."""
    columns: dict[str, str] = {}
    for shard in shards:
        for name, dtype in shard.columns:
            columns.setdefault(name, dtype)
    packed = config.pack.enabled
    schema = {"columns": columns, "token_columns": [c for c in TOKEN_COLUMNS if c in columns],
              "packed": packed, "seq_length": config.pack.seq_length if packed else None,
              "strategy": config.pack.strategy if packed else None}
    if config.save.format in ("bin", "megatron"):  # raw files: the dtypes np.memmap needs (easydata.io.token_files)
        schema.update(token_dtype=columns.get("input_ids"), index_dtype="int64")
    return schema


def _shard_documents(infos: list[ShardInfo]) -> int:
    """Documents an unpacked output's shards hold (a windowed document's rows count once)."""
    return sum(s.rows if s.documents is None else s.documents for s in infos)


def _shard_entry(s: ShardInfo) -> dict[str, Any]:
    entry = {"path": s.relative_path, "rows": s.rows, "tokens": s.tokens, "padding_tokens": s.padding_tokens,
             "bytes": s.bytes}
    entry.update({f"{role}_path": relative for role, _, relative in s.companions})  # bin: index_path, ...
    return entry


def _truncation(config: PipelineConfig, dataset: str) -> str:
    """The truncation in force for `dataset` (its tokenizer settings may override the stage's)."""
    for ds in config.datasets:
        if ds.name == dataset:
            return config.tokenize_for(ds).truncation_mode
    return config.tokenize.truncation_mode


def _cut_entry(truncation: str, infos: list[ShardInfo], c: collections.Counter, packed: bool) -> dict[str, Any]:
    """How many documents `tokenize.truncation` cut (and the tokens that dropped, where the counters hold
    them: a dataset's own output; for windows, the extra rows they made)."""
    if truncation == "none":
        return {}
    cut = c["packed_cut_documents"] if packed else sum(s.cut_documents for s in infos)
    if truncation == "truncate":
        return {"truncated_documents": cut, **({"truncated_tokens": c["truncated_tokens"]}
                                               if c["truncated_tokens"] else {})}
    if packed:
        extra = c["packed_pieces"] - c["packed_documents"]
    else:
        extra = sum(s.rows for s in infos) - _shard_documents(infos)
    return {"windowed_documents": cut, "extra_windows": extra}


def _dataset_entry(name: str, infos: list[ShardInfo], c: collections.Counter, packed: bool,
                   written: int, truncation: str = "none") -> dict[str, Any]:
    """One output's manifest entry; checks that its counters add up."""
    rows = sum(s.rows for s in infos)
    if c["documents_in"] != written + c["documents_rejected"]:
        raise RunInconsistent(f"dataset '{name}': documents_in={c['documents_in']} but written={written} +"
                           f" rejected={c['documents_rejected']}; refusing to commit")
    if packed and (rows != c["packed_rows"] or sum(s.tokens for s in infos) != c["packed_tokens"]):
        raise RunInconsistent(f"dataset '{name}': shards hold {rows} rows, the packer made {c['packed_rows']};"
                           " refusing to commit")
    columns: dict[str, str] = {}
    for shard in infos:
        columns.update({column: dtype for column, dtype in shard.columns if column not in columns})
    entry = {
        "columns": columns,  # this output's own columns (the schema lists those of every output)
        "shards": [_shard_entry(s) for s in infos],
        "documents_in": c["documents_in"],
        "documents_written": written,
        "documents_rejected": c["documents_rejected"],
        "input_bytes": c["input_bytes"],
        "padding_tokens": sum(s.padding_tokens for s in infos),
        **_cut_entry(truncation, infos, c, packed),
    }
    if any(name == "loss_mask" for s in infos for name, _ in s.columns):
        entry["trained_tokens"] = sum(s.trained_tokens for s in infos)
    if packed:
        slots = sum(s.tokens + s.padding_tokens for s in infos)
        entry["segments"] = c["packed_segments"]
        entry["segments_per_row"] = round(c["packed_segments"] / rows, 4) if rows else 0.0
        entry["padding_fraction"] = round(entry["padding_tokens"] / slots, 6) if slots else 0.0
    return entry


def _mix_entry(mix_plan: MixPlan, counters: dict[str, collections.Counter], plan: RunPlan,
               shards: list[ShardInfo], packed: bool) -> dict[str, Any]:
    """The manifest's `mix` entry: targets, what was realized per source, and the bug guards.

    Raises:
      RunInconsistent: when the selection did not yield what the plan promised, or the output does not
        hold every selected copy (a bug: nothing is committed).
    """
    sources: dict[str, dict[str, Any]] = {}
    for d in plan.datasets:
        c, p = counters[d.name], mix_plan.sources[d.name]
        if c["mix_tokens_out"] != p.planned_tokens:
            raise RunInconsistent(f"mix: dataset '{d.name}' gave {c['mix_tokens_out']} tokens, the plan"
                               f" {p.planned_tokens}; refusing to commit")
        sources[d.name] = {
            "documents_in": c["documents_in"], "documents_rejected": c["documents_rejected"],
            "documents_mixed": c["mix_documents"], "documents_selected": c["mix_selected"],
            "document_copies": c["mix_copies"], "tokens": p.tokens, "target_tokens": round(p.target_tokens),
            "tokens_out": c["mix_tokens_out"], "repeat_factor": round(p.repeat_factor, 6),
        }
    copies = sum(s["document_copies"] for s in sources.values())
    tokens_out = sum(s["tokens_out"] for s in sources.values())
    mixed = counters[MIXED_NAME]
    written_copies = mixed["packed_pieces"] if packed else sum(s.rows for s in shards)
    written_tokens = mixed["packed_tokens"] if packed else sum(s.tokens for s in shards)
    if (written_copies, written_tokens) != (copies, tokens_out):
        raise RunInconsistent(f"mix: selected {copies} documents / {tokens_out} tokens but the output holds"
                           f" {written_copies} / {written_tokens}; refusing to commit")
    for entry in sources.values():
        entry["realized_token_share"] = round(entry["tokens_out"] / tokens_out, 6) if tokens_out else 0.0
    return {**mix_plan.as_dict(), "realized_token_share": {n: s["realized_token_share"] for n, s in sources.items()},
            "tokens_out": tokens_out, "sources": sources}


def _split_entries(config: PipelineConfig, plan: RunPlan, by_output: dict[str, list[ShardInfo]],
                   counters: dict[str, collections.Counter], fractions: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Manifest entries of split outputs `<dataset>/<split>`. Rejected records have no split: they are
    counted in each dataset's first split, so `documents_in == written + rejected` holds per entry.

    Raises:
      RunInconsistent: when a dataset's splits do not add up to the documents it read (a bug).
    """
    packed, entries = config.pack.enabled, {}
    for d in plan.datasets:
        source, written_total = counters[d.name], 0
        for index, (split, fraction) in enumerate(fractions.items()):
            name = split_output_name(d.name, split)
            infos, c = by_output[name], collections.Counter(counters[name])
            written = c["packed_documents"] if packed else _shard_documents(infos)
            if index == 0:
                c.update(documents_rejected=source["documents_rejected"], input_bytes=source["input_bytes"])
            c["documents_in"] = written + c["documents_rejected"]
            entries[name] = _dataset_entry(name, infos, c, packed, written, _truncation(config, d.name))
            entries[name]["split"] = {"dataset": d.name, "name": split, "fraction": round(fraction, 9)}
            written_total += written
        if written_total + source["documents_rejected"] != source["documents_in"]:
            raise RunInconsistent(f"dataset '{d.name}': splits hold {written_total} documents +"
                               f" {source['documents_rejected']} rejected, but {source['documents_in']} were read;"
                               " refusing to commit")
    return entries


def _refuse_empty_datasets(plan: RunPlan, counters: dict[str, collections.Counter],
                           rejected_files: Iterable[str]) -> None:
    """A dataset of which no document survived fails the run (a wrong `content_field`, chat records
    without a template...), naming the most common reason, instead of a run that looks successful.

    Raises:
      EasyDataError: one line; nothing is committed.
    """
    for d in plan.datasets:
        c = counters[d.name]
        if c["documents_in"] - c["documents_rejected"] > 0:
            continue
        reasons: collections.Counter = collections.Counter()
        for rel in rejected_files:
            if rel.startswith(f"rejected/{d.name}/"):
                with open_file(Staging(plan.staging).file(rel), "rb", decompress=False) as f:
                    for line in f:
                        reject = json.loads(line)
                        reasons[reject["reason"]] += int(reject.get("records", 1))
        if not reasons:
            raise EasyDataError(f"dataset '{d.name}' wrote no documents: its input holds no records; set"
                                " allow_empty_datasets: true to accept an empty dataset")
        reason, times = reasons.most_common(1)[0]
        raise EasyDataError(f"dataset '{d.name}' wrote no documents: all {c['documents_rejected']:,} records were"
                            f" rejected, {times:,} of them for: {reason[:200]} (dead letters in"
                            f" {Staging(plan.staging).rejected(d.name)}; set allow_empty_datasets: true to accept)")


def _refuse_empty_splits(config: PipelineConfig, datasets: dict[str, dict[str, Any]]) -> None:
    """A split that no document fell into fails the run, as an empty dataset does: a `validation_fraction` of
    0.01 over 50 documents leaves the validation split empty more often than not, and the run looked successful
    until the training script found an output of 0 rows.

    Raises:
      EasyDataError: one line; nothing is committed.
    """
    for name, entry in datasets.items():
        split = entry.get("split")
        if split is None or entry["documents_written"]:
            continue
        dataset = split["dataset"]
        kept = sum(e["documents_written"] for e in datasets.values() if e.get("split", {}).get("dataset") == dataset)
        setting = (f"save.validation_fraction {config.save.validation_fraction}"
                   if config.save.validation_fraction is not None else "save.splits")
        raise EasyDataError(f"split '{name}' holds no document: the {count(kept, 'document')} of dataset '{dataset}'"
                            f" went to its other splits ({setting}); give it a larger fraction or more data, or set"
                            " allow_empty_datasets: true to accept an empty split")


def engine_entry(choice: Optional[dict[str, Any]], counts: Optional[collections.Counter]) -> dict[str, Any]:
    """What encoded a dataset's plain documents: the engine chosen at planning and why, and while running
    the documents it encoded, how many were re-encoded with `hf` to check it, the mismatches (whose `hf`
    ids were kept) and the documents a worker encoded with `hf` after too many mismatches."""
    entry = dict(choice or {"name": "hf"})
    c = counts or collections.Counter()
    if entry.get("name") != "hf":
        entry["while_running"] = {"documents": c["documents"], "verified": c["verified"],
                                  "mismatches": c["mismatches"], "switched_to_hf_documents": c["hf_documents"]}
    return entry


def shuffle_entry(shuffled: dict[str, int], tokens: int) -> dict[str, Any]:
    """The manifest's `shuffle`: bytes of token data each stage sent through the shuffle, as its coder
    encodes them (what a remote runner's shuffle carries and bills), in all and per token written."""
    def per_token(n: int) -> float:
        return round(n / tokens, 4) if tokens else 0.0

    total = sum(shuffled.values())
    return {"bytes": total, "bytes_per_token": per_token(total),
            "stages": {stage: {"bytes": n, "bytes_per_token": per_token(n)} for stage, n in sorted(shuffled.items())}}


def finalize_output(config: PipelineConfig, plan: RunPlan, shards: Iterable[ShardInfo], run_counters: RunCounters,
                    rejected_files: Iterable[str], started_at: float, mix_plan: Optional[MixPlan] = None
                    ) -> dict[str, Any]:
    """Commits the staged output and returns the manifest written.

    Args:
      run_counters: every step's counters, summed (`transforms.counters.SumCounters`).
      mix_plan: the plan of a mixed run (its datasets' rows went to the single output `mixed`).

    Raises:
      EasyDataError: when too many documents were rejected.
      RunInconsistent: when counters do not add up (a bug: nothing is committed).
    """
    counters: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    counters.update({name: run_counters.count(name) for name in run_counters.counts})
    partial = run_counters.partial_inputs
    engines = {name: collections.Counter(values) for name, values in run_counters.engines.items()}
    shuffled = run_counters.shuffled_bytes
    names = [MIXED_NAME] if mix_plan is not None else [d.name for d in plan.datasets]
    fractions = config.save.split_fractions()
    if fractions is not None:
        names = [split_output_name(name, split) for name in names for split in fractions]
    by_dataset: dict[str, list[ShardInfo]] = {name: [] for name in names}
    for shard in shards:
        by_dataset[shard.dataset].append(shard)
    datasets: dict[str, dict[str, Any]] = {}
    for infos in by_dataset.values():
        infos.sort(key=lambda s: s.shard)
    packed = config.pack.enabled
    mix = None
    if fractions is not None:
        datasets = _split_entries(config, plan, by_dataset, counters, fractions)
    elif mix_plan is None:
        for name, infos in by_dataset.items():
            written = counters[name]["packed_documents"] if packed else _shard_documents(infos)
            datasets[name] = _dataset_entry(name, infos, counters[name], packed, written, _truncation(config, name))
    else:
        mix = _mix_entry(mix_plan, counters, plan, by_dataset.get(MIXED_NAME, []), packed)
        combined = collections.Counter(counters.get(MIXED_NAME, {}))
        for d in plan.datasets:
            combined.update({k: counters[d.name][k] for k in ("documents_in", "documents_rejected", "input_bytes")})
        # `documents_in` counts every document read, `documents_written` those that reached the mix (so
        # `documents_in == documents_written + documents_rejected`), of which `documents_selected` are in
        # the output (once or more: `document_copies` rows) and `documents_unused` were left out by it.
        written = sum(counters[d.name]["mix_documents"] for d in plan.datasets)
        selected = sum(counters[d.name]["mix_selected"] for d in plan.datasets)
        datasets[MIXED_NAME] = _dataset_entry(MIXED_NAME, by_dataset.get(MIXED_NAME, []), combined, packed, written,
                                              config.tokenize.truncation_mode)
        datasets[MIXED_NAME]["documents_read"] = combined["documents_in"]
        datasets[MIXED_NAME]["documents_selected"] = selected
        datasets[MIXED_NAME]["documents_unused"] = written - selected
        datasets[MIXED_NAME]["document_copies"] = sum(counters[d.name]["mix_copies"] for d in plan.datasets)
        if not selected and written and not config.allow_empty_datasets:
            raise EasyDataError(f"the mix selected none of the {written:,} documents that reached it (budget"
                                f" {mix['budget_tokens']:,} tokens): nothing would be written; raise mix.total_tokens or"
                                " set allow_empty_datasets: true to accept an empty output")
    if not config.allow_empty_datasets:
        _refuse_empty_datasets(plan, counters, rejected_files)
        _refuse_empty_splits(config, datasets)
    total_in = sum(d["documents_in"] for d in datasets.values())
    total_rejected = sum(d["documents_rejected"] for d in datasets.values())
    limit = config.max_rejected_fraction
    if limit is not None and total_in and total_rejected / total_in > limit:
        share = percent(total_rejected, total_in, 2)
        raise EasyDataError(f"{total_rejected:,} of {total_in:,} documents rejected ({share}), more than"
                            f" max_rejected_fraction {limit} allows; see {Staging(plan.staging).rejected()}")
    rejected_files = sorted(rejected_files)
    moves = [(s.temp_path, s.relative_path) for infos in by_dataset.values() for s in infos]
    moves += [(temp, rel) for infos in by_dataset.values() for s in infos for _, temp, rel in s.companions]
    moves += [(Staging(plan.staging).file(rel), rel) for rel in rejected_files]
    tokenizer, per_dataset = plan.tokenizer_manifest()
    has_loss_mask = any("trained_tokens" in entry for entry in datasets.values())
    chat = {d.name: {"template_hash": template_hash(d.chat_template, d.tokenizer_info.tool_template(d.chat_template))
                     if d.chat_template else None,
                     "assistant_only_loss": config.chat.assistant_only_loss}
            for d in plan.datasets if any("trained_tokens" in entry for name, entry in datasets.items()
                                          if name == d.name or name.startswith(f"{d.name}/"))
            or mix_plan is not None and has_loss_mask and d.chat_template}
    if config.pack.enabled:
        tokenizer = {**tokenizer, "pad_token_id_used": plan.datasets[0].pad_id if plan.datasets else None}
    elapsed = time.time() - started_at
    written = [s for infos in by_dataset.values() for s in infos]
    manifest = build_manifest(
        config=config.to_dict(), fingerprint=config.fingerprint(), tokenizer=tokenizer,
        schema=output_schema(written, config), datasets=datasets, output_format=config.save.format,
        compression=config.save.codec, rejected_files=rejected_files, tokenizers=per_dataset,
        run={"run_id": plan.run_id, "elapsed_seconds": round(elapsed, 3),
             **({"resumed_units": plan.resumed_unit_count, "units": plan.unit_count} if plan.resumed else {})}, chat=chat, mix=mix,
        partial_inputs={name: sorted(entries, key=lambda e: (e["path"], e["offset"])) for name, entries in partial.items()})
    manifest["shuffle"] = shuffle_entry(shuffled, manifest["totals"]["tokens"])
    if plan.shuffle_dictionary is not None:  # its elements were compressed with the run's dictionary
        manifest["shuffle"]["dictionary_bytes"] = len(plan.shuffle_dictionary)
    manifest["tokenizer_engines"] = {d.name: engine_entry(d.engine_choice, engines.get(d.name)) for d in plan.datasets}
    if fractions is not None:
        manifest["splits"] = {"fractions": {k: round(v, 9) for k, v in fractions.items()},
                              "split_seed": config.save.split_seed, "assigned_by": "document key hash",
                              "rejected_counted_in": next(iter(fractions))}
    check_owner(plan.output_dir, plan.lock_id)  # a run whose lock was taken over never commits
    inputs = recorded_input_versions(plan.staging)
    if inputs is None:  # (a run started by a version that did not record them)
        inputs = {s.path: s.version for d in plan.datasets for unit in iter_units(plan.staging, d.name) for s in unit}
    check_all_unchanged(inputs)  # an input changed after its splits were read: nothing is committed
    check_not_replaced(plan.output_dir, plan.run_id, config.save.overwrite)  # another job committed meanwhile
    commit_output(plan.output_dir, plan.staging, moves, manifest)  # journaled: a retry completes it
    release_lock(plan.output_dir, plan.lock_id, detached_only=True)  # a submitted job's hold ends with its commit
    return manifest
