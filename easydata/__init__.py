"""easydata-beam core: configs, tokenizer loading, formats, manifest, validation, reader, CLI.

Importing `easydata` (or `easydata.reader`) does not import Apache Beam or JAX; only running a
pipeline (`Pipeline(...).build()`, `tokenize_and_save`, `easydata run`) does.
"""

from easydata.api import Pipeline, tokenize_and_save
from easydata.config import (ChatStageConfig, DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig,
                             PipelineConfig, SaveStageConfig, TokenizeStageConfig, TokenizerConfig,
                             WeightSchedulePoint)
from easydata.errors import ConfigError, EasyDataError, InputError, OutputError, TokenizerError, ValidationFailed

__version__ = "0.1.0"

__all__ = [
    "Pipeline",
    "tokenize_and_save",
    "PipelineConfig",
    "DatasetConfig",
    "TokenizerConfig",
    "TokenizeStageConfig",
    "ChatStageConfig",
    "MixStageConfig",
    "PackStageConfig",
    "SaveStageConfig",
    "LoadStageConfig",
    "WeightSchedulePoint",
    "EasyDataError",
    "ConfigError",
    "InputError",
    "OutputError",
    "TokenizerError",
    "ValidationFailed",
    "__version__",
]
