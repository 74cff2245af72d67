"""`problems(config)`: every semantic problem of a `PipelineConfig` at once (what `PipelineConfig.validate`
returns and `PipelineConfig.from_dict` raises as one `ConfigError`). Type problems are found earlier, while
the dict is converted (`easydata.config.convert`)."""

from __future__ import annotations

from typing import Any

from easydata.config.models import (MAX_BATCH_SIZE, MAX_NAME_LENGTH, MAX_POOL_SIZE, MAX_ROW_GROUP_SIZE, MAX_SEQ_LENGTH,
                                    MAX_SHARDS, RESERVED_NAMES, TOKEN_FILE_FORMATS, DatasetConfig,
                                    TEMPLATE_ARGUMENTS, TokenizerConfig, FORMAT_COMPRESSIONS, safe_name)
from easydata.config.schedule import schedule_problems

__all__ = ["problems", "warnings"]

#: `pack` settings that mean nothing unless `pack.enabled` is true.
_PACK_SETTINGS = ("seq_length", "strategy", "max_segments_per_row", "pool_size", "block_size")


def warnings(data: Any) -> list[str]:
    """What a config mapping asks for that it will not get, though it is valid (warned about, not refused):
    `pack` settings without `pack.enabled`, which is false unless set (as in EasyData), so a `pack: {seq_length:
    4096}` wrote one row per document without a word."""
    pack = data.get("pack") if isinstance(data, dict) else None
    if isinstance(pack, dict) and "enabled" not in pack:
        given = [key for key in _PACK_SETTINGS if key in pack]
        if given:
            return [f"pack.{given[0]} is set but pack.enabled is not (it defaults to false): each row is one"
                    " document; set pack.enabled: true to pack"]
    return []


def problems(config: Any) -> list[str]:
    """Every semantic problem of `config` (a `PipelineConfig`); empty when it is usable."""
    problems: list[str] = []
    if not config.datasets:
        problems.append("`datasets` is empty: add at least one dataset")
    for i, ds in enumerate(config.datasets):
        if not isinstance(ds, DatasetConfig):
            problems.append(f"datasets[{i}] must be a DatasetConfig (or a mapping of its fields), got {ds!r}")
    if problems and config.datasets:
        return problems
    names = [d.name for d in config.datasets]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"dataset name '{name}' is used more than once")
    by_case: dict[str, list[str]] = {}
    for name in dict.fromkeys(n for n in names if isinstance(n, str)):
        by_case.setdefault(name.lower(), []).append(name)
    for same in (found for found in by_case.values() if len(found) > 1):
        problems.append(f"dataset names {' and '.join(map(repr, same))} differ only in case: on macOS and Windows"
                        " file systems their output directories are one, and one dataset's shards would replace"
                        " the other's; rename one")
    for i, ds in enumerate(config.datasets):
        where = f"datasets[{i}] ('{str(ds.name)[:40]}')"
        if not safe_name(ds.name):
            shown = repr(ds.name) if len(str(ds.name)) <= 40 else f"{str(ds.name)[:30]!r}... ({len(ds.name)} characters)"
            problems.append(f"{where}: `name` {shown} must be letters, digits, '_', '-', '.', start with a letter or"
                            f" digit, and not be {', '.join(map(repr, RESERVED_NAMES))} in any case (it names a directory of the"
                            f" output: at most {MAX_NAME_LENGTH} characters)")
        if not ds.data_file_list and not ds.pubsub_subscription:
            problems.append(f"{where}: set `data_files` (or `pubsub_subscription` for streaming)")
        spec = config.tokenizer_spec(ds)
        if spec is None:
            problems.append(f"{where}: no tokenizer: set `default_tokenizer` or the dataset's `tokenizer`")
        elif isinstance(spec, TokenizerConfig) and spec.max_length is not None and spec.max_length <= 0:
            problems.append(f"{where}: tokenizer max_length must be positive, got {spec.max_length}")
        problems.extend(f"{where}: {p}" for p in _dataset_source_problems(ds))
        if ds.num_rows is not None and ds.num_rows < 1:  # 0 read nothing and failed as an input without records
            problems.append(f"{where}: `num_rows` must be >= 1 (null: every record), got {ds.num_rows}")
        if ds.content_field in ds.additional_fields:
            problems.append(f"{where}: `additional_fields` must not repeat `content_field` '{ds.content_field}'")
        reserved = {"input_ids", "attention_mask", "loss_mask", "segment_ids", "positions"}
        for field in sorted(reserved.intersection(ds.additional_fields)):
            problems.append(f"{where}: additional field '{field}' collides with an output column")
    tok = config.tokenize
    if not 0 < tok.batch_size <= MAX_BATCH_SIZE:
        problems.append(f"tokenize.batch_size must be in [1, {MAX_BATCH_SIZE:,}], got {tok.batch_size}")
    if tok.max_length is not None and tok.max_length <= 0:
        problems.append(f"tokenize.max_length must be positive, got {tok.max_length}")
    if tok.truncation_mode != "none" and tok.max_length is None:
        problems.append(f"tokenize.truncation '{tok.truncation_mode}' needs tokenize.max_length")
    if tok.max_length is not None and tok.truncation == "none":
        problems.append("tokenize.max_length is set but tokenize.truncation is 'none': set truncation to"
                        " 'truncate' (or remove max_length)")
    if tok.num_workers is not None and tok.num_workers <= 0:
        problems.append(f"tokenize.num_workers must be positive, got {tok.num_workers}")
    if config.ray is not None and config.ray.num_workers is not None and config.ray.num_workers <= 0:
        problems.append(f"ray.num_workers must be positive, got {config.ray.num_workers}")
    if tok.stride is not None and tok.truncation_mode != "window":
        problems.append("tokenize.stride only applies to truncation 'window'")
    elif tok.stride is not None and tok.max_length is not None and not 0 <= tok.stride < tok.max_length:
        problems.append(f"tokenize.stride (the overlap of consecutive windows) must be in [0, max_length ="
                        f" {tok.max_length}), got {tok.stride}")
    try:
        tok.max_document_byte_limit
    except ValueError as e:
        problems.append(f"tokenize.max_document_bytes: {e}")
    if config.max_rejected_fraction is not None and not 0 <= config.max_rejected_fraction <= 1:
        problems.append(f"max_rejected_fraction must be within [0, 1], got {config.max_rejected_fraction}")
    if not 0 < config.pack.seq_length <= MAX_SEQ_LENGTH:
        problems.append(f"pack.seq_length must be in [1, {MAX_SEQ_LENGTH:,}], got {config.pack.seq_length}")
    if config.pack.max_segments_per_row is not None and config.pack.max_segments_per_row <= 0:
        problems.append(f"pack.max_segments_per_row must be positive, got {config.pack.max_segments_per_row}")
    if not 0 < config.pack.pool_size <= MAX_POOL_SIZE:
        problems.append(f"pack.pool_size must be in [1, {MAX_POOL_SIZE}], got {config.pack.pool_size}")
    if config.pack.pad_token_id is not None and config.pack.pad_token_id < 0:
        problems.append(f"pack.pad_token_id must be >= 0, got {config.pack.pad_token_id}")
    if config.pack.eos_token_id is not None and config.pack.eos_token_id < 0:
        problems.append(f"pack.eos_token_id must be >= 0, got {config.pack.eos_token_id}")
    if config.pack.num_packers is not None and not 0 < config.pack.num_packers <= MAX_POOL_SIZE:
        problems.append(f"pack.num_packers must be in [1, {MAX_POOL_SIZE}], got {config.pack.num_packers}")
    reserved = sorted(TEMPLATE_ARGUMENTS.intersection(config.chat.template_kwargs))
    if reserved:
        problems.append(f"chat.template_kwargs must not set {', '.join(reserved)}: the pipeline passes"
                        f" {', '.join(sorted(TEMPLATE_ARGUMENTS))} itself")
    load = config.load
    if load.batch_size <= 0:
        problems.append(f"load.batch_size must be positive, got {load.batch_size}")
    if load.prefetch_buffer_size < 0:
        problems.append(f"load.prefetch_buffer_size must be >= 0, got {load.prefetch_buffer_size}")
    if config.mix is not None:
        problems.extend(config.mix.problems(names))
        if config.mix.weight_schedule:
            problems.extend(schedule_problems("mix.weight_schedule", config.mix.weight_schedule, names))
    if config.schedule:
        problems.extend(schedule_problems("schedule", config.schedule, names))
    stream = config.streaming
    if stream.window_seconds <= 0:
        problems.append(f"streaming.window_seconds must be positive, got {stream.window_seconds}")
    if stream.allowed_lateness_seconds < 0:
        problems.append(f"streaming.allowed_lateness_seconds must be >= 0, got {stream.allowed_lateness_seconds}")
    if stream.early_firing_seconds is not None and stream.early_firing_seconds <= 0:
        problems.append(f"streaming.early_firing_seconds must be positive, got {stream.early_firing_seconds}")
    save = config.save
    if not save.output_dir:
        problems.append("save.output_dir is empty")
    if save.codec not in FORMAT_COMPRESSIONS[save.format]:
        problems.append(f"save.compression '{save.codec}' is not supported by format"
                        f" '{save.format}' (choose from {', '.join(FORMAT_COMPRESSIONS[save.format])})")
    if save.num_shards is not None and not 0 < save.num_shards <= MAX_SHARDS:
        problems.append(f"save.num_shards must be in [1, {MAX_SHARDS:,}], got {save.num_shards}")
    try:
        save.max_shard_bytes
    except ValueError as e:
        problems.append(f"save.max_shard_size: {e}")
    if not 0 < save.row_group_size <= MAX_ROW_GROUP_SIZE:
        problems.append(f"save.row_group_size must be in [1, {MAX_ROW_GROUP_SIZE:,}], got {save.row_group_size}")
    if save.format in TOKEN_FILE_FORMATS:
        problems.extend(_token_file_problems(config))
    problems.extend(save.split_problems())
    if save.split_fractions() is not None and any(ds.pubsub_subscription for ds in config.datasets):
        problems.append("save.validation_fraction / save.splits are for batch runs; the streaming pipeline does"
                        " not split yet")
    if save.push_to_hub and not save.hub_repo_id:
        problems.append("save.push_to_hub needs save.hub_repo_id (e.g. 'username/dataset')")
    if save.push_to_hub and any(ds.pubsub_subscription for ds in config.datasets):
        problems.append("save.push_to_hub is for batch runs; the streaming pipeline commits windows as they close")
    if config.static_mix is not None and save.split_fractions() is not None:
        problems.append("save.validation_fraction / save.splits with a `mix` section is not supported yet: split"
                        " each dataset in its own run and mix at read time (MixedReader)")
    return problems


def _token_file_problems(config: Any) -> list[str]:
    """`bin` and `npz` hold token arrays only; `bin` is a stream readers cut windows from."""
    found = []
    fmt = config.save.format
    if fmt == "megatron" and config.pack.enabled:
        found.append("save.format 'megatron' holds documents (Megatron-LM, NeMo and MaxText build their own"
                     " samples from them): set pack.enabled to false")
    if fmt == "bin" and config.pack.enabled:
        found.append("save.format 'bin' writes a flat token stream (readers cut windows from it): set"
                     " pack.enabled to false, or use a row format (parquet, arrow, npz) for packed rows")
    for i, ds in enumerate(config.datasets):
        if ds.additional_fields:
            found.append(f"datasets[{i}] ('{ds.name}'): save.format '{fmt}' stores token arrays only; remove"
                         " `additional_fields` or use parquet, arrow or jsonl")
        if ds.pubsub_subscription:
            found.append(f"datasets[{i}] ('{ds.name}'): save.format '{fmt}' is for batch runs; the streaming"
                         " pipeline writes parquet, arrow or jsonl")
    return found


def _dataset_source_problems(ds: DatasetConfig) -> list[str]:
    """What is wrong with a dataset's EasyData-style source options."""
    found = []
    if not ds.pubsub_subscription and any(not isinstance(f, str) or not f.strip() for f in ds.data_file_list):
        found.append(f"`data_files` {ds.data_files!r} names no file (an empty path would read the current directory;"
                     " an unset ${VARIABLE} in a templated config?)")
    if ds.type == "huggingface" and (not isinstance(ds.data_files, str) or ds.data_files.count("/") != 1):
        found.append(f"type 'huggingface' takes the hub dataset id as `data_files` ('owner/name'), got {ds.data_files!r}")
    if ds.split is not None and (not isinstance(ds.split, str) or not ds.split.strip()):
        found.append(f"`split` names a split (train, validation, test, ...), got {ds.split!r}")
    callback = ds.format_callback
    if isinstance(callback, str):
        from easydata.config.callables import resolve_callable

        try:
            resolve_callable(callback)
        except (ImportError, AttributeError, ValueError) as e:
            found.append(f"format_callback {callback!r}: {e}")
    elif callback is not None and not callable(callback):
        found.append(f"format_callback must be a function or 'module:function', got {type(callback).__name__}")
    return found
