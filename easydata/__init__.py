"""easydata-beam core: configs, tokenizer loading, formats, manifest, validation, reader, CLI.

Importing `easydata` (or `easydata.reader`) does not import Apache Beam or JAX; only running a
pipeline (`Pipeline(...).build()`, `tokenize_and_save`, `easydata run`) does. EasyData's names
(`easydel.data`) are all here; docs/migrating-from-easydata.md maps each one.

They are imported when first used (PEP 562: `from easydata import Pipeline` imports `easydata.compat`
then), not when the package is: every `easydata` command and a run's local worker server import the package,
and the compatibility layer, its readers and their libraries (fsspec, pyarrow) took 0.4-0.6 s of a fresh process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what `__getattr__` gives, for type checkers and editors
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

#: Each public name -> the module it comes from.
_SOURCES = {
    **dict.fromkeys(("Pipeline", "create_pipeline", "tokenize_and_save"), "easydata.api"),
    "AsyncDataLoader": "easydata.compat.loader",
    **dict.fromkeys(("MixedShardedSource", "WeightScheduler", "block_mixture_interleave"), "easydata.compat.mixing"),
    **dict.fromkeys(("ArrowShardedSource", "CsvShardedSource", "HFDatasetShardedSource", "HuggingFaceShardedSource",
                     "JsonShardedSource", "ParquetShardedSource", "TextShardedSource"), "easydata.compat.sources"),
    **dict.fromkeys(("ChatTemplateTransform", "TokenizedShardedSource", "TransformedShardedSource"),
                    "easydata.compat.transforms"),
    **dict.fromkeys(("ChatStageConfig", "DatasetConfig", "LoadStageConfig", "MixStageConfig", "PackStageConfig",
                     "PipelineConfig", "RayConfig", "SaveStageConfig", "TokenizeStageConfig", "TokenizerConfig",
                     "WeightSchedulePoint"), "easydata.config"),
    **dict.fromkeys(("BaseStage", "PipelineContext", "ShardedDataSource"), "easydata.core.protocols"),
    **dict.fromkeys(("ConfigError", "EasyDataError", "InputError", "OutputError", "TokenizerError",
                     "ValidationFailed"), "easydata.errors"),
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use; else a subpackage or module of `easydata`
    (`easydata.reader` after `import easydata`, as when the package imported its parts eagerly)."""
    source = _SOURCES.get(name)
    if source is not None:
        value = getattr(importlib.import_module(source), name)
    elif not name.startswith("_"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":  # the module exists and failed to import: say so
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})
