"""Pipeline configuration, by job: the models (`models`: one frozen dataclass per stage, the enumerations
and limits; `pipeline`: `PipelineConfig`, the whole job, and how it is loaded), their semantic checks
(`validation`), plain data into dataclasses with every problem reported (`convert`), config files and
`key=value` overrides (`files`), what the fingerprint hashes (`fingerprint`), functions in a config (`callables`)
and what a secret reads as where a config is shown (`secrets`). Everything is importable
from `easydata.config` as before the split.
"""

from __future__ import annotations

from easydata.config.models import (  # noqa: F401
    InputType, OutputFormat, Compression, EngineName, INPUT_TYPES, OUTPUT_FORMATS, TOKEN_FILE_FORMATS,
    COMPRESSIONS, ENGINE_NAMES, DEFAULT_COMPRESSION, FORMAT_COMPRESSIONS, MAX_SEQ_LENGTH,
    MAX_TOTAL_TOKENS, MAX_SHARDS, MAX_BATCH_SIZE, MAX_ROW_GROUP_SIZE, MAX_POOL_SIZE,
    DEFAULT_MAX_DOCUMENT_BYTES, RESERVED_NAMES, parse_size, TokenizerConfig, DatasetConfig,
    TokenizeStageConfig, ChatStageConfig, WeightSchedulePoint, MixStageConfig, StreamingConfig,
    PackStageConfig, SaveStageConfig, LoadStageConfig, RayConfig, name_datasets, MAX_NAME_LENGTH, safe_name)
from easydata.config.secrets import (  # noqa: F401
    REDACTED, redact_url, redact_urls)
from easydata.config.callables import (  # noqa: F401
    callable_name, callable_identity, resolve_callable)
from easydata.config.fingerprint import (  # noqa: F401
    SHAPING_FIELDS, NOT_SHAPING, fingerprint_of)
from easydata.config.files import (  # noqa: F401
    parse_mapping_text, MAX_CONFIG_NODES, MAX_CONFIG_BYTES, load_mapping, apply_overrides)
from easydata.config.pipeline import (  # noqa: F401
    PipelineConfig)

__all__ = [
    "COMPRESSIONS", "ChatStageConfig", "Compression", "DEFAULT_COMPRESSION", "DEFAULT_MAX_DOCUMENT_BYTES",
    "DatasetConfig", "ENGINE_NAMES", "EngineName", "FORMAT_COMPRESSIONS", "INPUT_TYPES", "InputType",
    "LoadStageConfig", "MAX_BATCH_SIZE", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES", "MAX_NAME_LENGTH",
    "MAX_POOL_SIZE", "MAX_ROW_GROUP_SIZE", "MAX_SEQ_LENGTH", "MAX_SHARDS", "MAX_TOTAL_TOKENS",
    "MixStageConfig", "NOT_SHAPING", "OUTPUT_FORMATS", "OutputFormat", "PackStageConfig", "PipelineConfig",
    "REDACTED", "RESERVED_NAMES", "RayConfig", "SHAPING_FIELDS", "SaveStageConfig", "StreamingConfig",
    "TOKEN_FILE_FORMATS", "TokenizeStageConfig", "TokenizerConfig", "WeightSchedulePoint", "apply_overrides",
    "callable_identity", "callable_name", "resolve_callable", "fingerprint_of", "load_mapping",
    "name_datasets", "parse_mapping_text", "parse_size", "redact_url", "redact_urls", "safe_name",
]
