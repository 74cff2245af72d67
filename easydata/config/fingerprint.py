"""What a config's fingerprint hashes: the fields that shape a batch run's output, an allow-list
(`SHAPING_FIELDS`), every field of every config class classified (`NOT_SHAPING` holds the others; a test
checks), so that editing anything else does not block `--resume`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from easydata.config.callables import callable_identity

__all__ = ["SHAPING_FIELDS", "NOT_SHAPING", "fingerprint_of"]


#: Per config class, the fields that shape a batch run's output (its rows, shards and manifest counts): what
#: `PipelineConfig.fingerprint` hashes. Every field of every config class is either here or in `NOT_SHAPING`
#: (a test checks), so a new field must be classified.
SHAPING_FIELDS: dict[str, tuple[str, ...]] = {
    "PipelineConfig": ("seed", "default_tokenizer", "datasets", "tokenize", "chat", "mix", "pack", "save"),
    "DatasetConfig": ("name", "data_files", "type", "split", "content_field", "additional_fields", "tokenizer",
                      "num_rows", "sample_by", "pubsub_subscription", "format_fields", "format_callback"),
    "TokenizerConfig": ("name_or_path", "bos_token", "eos_token", "pad_token", "eos_token_id", "max_length",
                        "truncation", "add_special_tokens"),
    "TokenizeStageConfig": ("max_length", "truncation", "stride", "add_bos", "add_eos", "batch_size",
                            "max_document_bytes", "default_tokenizer", "remove_columns", "engine"),
    "ChatStageConfig": ("template", "messages_field", "assistant_only_loss", "template_kwargs"),
    "MixStageConfig": ("weights", "stop_strategy", "total_tokens", "weight_schedule", "seed"),
    "PackStageConfig": ("enabled", "seq_length", "strategy", "pad_token_id", "max_segments_per_row", "pool_size",
                        "num_packers", "eos_token_id"),
    "SaveStageConfig": ("format", "compression", "num_shards", "max_shard_size", "row_group_size",
                        "validation_fraction", "splits", "split_seed"),
    "WeightSchedulePoint": ("step", "weights"),
}
#: The fields that do not: where the output goes and whether it may be replaced or uploaded, what only
#: readers (`load`, `schedule`, `include_segment_ids`, `padding`), the run's checks, the streaming windows or
#: the Python API's cache use, and EasyData knobs accepted and ignored.
NOT_SHAPING: dict[str, tuple[str, ...]] = {
    "PipelineConfig": ("max_rejected_fraction", "allow_empty_datasets", "load", "streaming", "schedule", "ray"),
    "DatasetConfig": ("tokenizer_kwargs", "cache_path", "cache_enabled", "save_path", "save_format"),
    "TokenizerConfig": ("padding", "return_attention_mask", "trust_remote_code"),
    "TokenizeStageConfig": ("num_workers", "cache_tokenized"),
    "ChatStageConfig": (),
    "MixStageConfig": ("weight_schedule_type", "block_size"),
    "PackStageConfig": ("include_segment_ids", "shuffle_packed", "shuffle_buffer_factor"),
    "SaveStageConfig": ("output_dir", "overwrite", "enabled", "push_to_hub", "hub_repo_id", "hub_private", "hub_token"),
    "WeightSchedulePoint": (),
}


def _shaping(value: Any) -> Any:
    """`value` (a config, or anything inside one) as plain data with only its `SHAPING_FIELDS`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kept = SHAPING_FIELDS.get(type(value).__name__)
        names = kept if kept is not None else tuple(f.name for f in dataclasses.fields(value))
        return {name: _shaping(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_shaping(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _shaping(v) for k, v in value.items()}
    return value


def fingerprint_of(config: Any) -> str:
    """The hash of a config's shaping fields (`PipelineConfig.fingerprint`); a function in it counts with its
    code."""
    return hashlib.sha256(json.dumps(_shaping(config), sort_keys=True, default=callable_identity
                                     ).encode()).hexdigest()[:16]
