"""easydata-beam core: configs, tokenizer loading, formats, manifest, validation, reader, CLI.

Importing `easydata` (or `easydata.reader`) does not import Apache Beam or JAX; only running a
pipeline (`Pipeline(...).build()`, `tokenize_and_save`, `easydata run`) does. EasyData's names
(`easydel.data`) are all here; docs/migrating-from-easydata.md maps each one.
"""

from easydata.api import Pipeline, create_pipeline, tokenize_and_save
from easydata.compat.loader import AsyncDataLoader
from easydata.compat.mixing import MixedShardedSource, WeightScheduler, block_mixture_interleave
from easydata.compat.sources import (ArrowShardedSource, CsvShardedSource, HFDatasetShardedSource,
                                     HuggingFaceShardedSource, JsonShardedSource, ParquetShardedSource,
                                     TextShardedSource)
from easydata.compat.transforms import ChatTemplateTransform, TokenizedShardedSource, TransformedShardedSource
from easydata.config import (ChatStageConfig, DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig,
                             PipelineConfig, RayConfig, SaveStageConfig, TokenizeStageConfig, TokenizerConfig,
                             WeightSchedulePoint)
from easydata.core.protocols import BaseStage, PipelineContext, ShardedDataSource
from easydata.errors import ConfigError, EasyDataError, InputError, OutputError, TokenizerError, ValidationFailed

__version__ = "0.1.0"

__all__ = [
    # the pipeline
    "Pipeline", "create_pipeline", "tokenize_and_save",
    # configs
    "PipelineConfig", "DatasetConfig", "TokenizerConfig", "TokenizeStageConfig", "ChatStageConfig", "MixStageConfig",
    "PackStageConfig", "SaveStageConfig", "LoadStageConfig", "RayConfig", "WeightSchedulePoint",
    # EasyData's object API (easydata.compat)
    "ShardedDataSource", "BaseStage", "PipelineContext", "ParquetShardedSource", "JsonShardedSource",
    "ArrowShardedSource", "CsvShardedSource", "TextShardedSource", "HuggingFaceShardedSource",
    "HFDatasetShardedSource", "TransformedShardedSource", "ChatTemplateTransform", "TokenizedShardedSource",
    "MixedShardedSource", "block_mixture_interleave", "WeightScheduler", "AsyncDataLoader",
    # errors
    "EasyDataError", "ConfigError", "InputError", "OutputError", "TokenizerError", "ValidationFailed",
    "__version__",
]
