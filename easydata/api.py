"""The Python API mirroring the CLI: `Pipeline.from_config(cfg)` with a fluent builder, and
`tokenize_and_save`.

    cfg = PipelineConfig.from_yaml("job.yaml")
    result = Pipeline.from_config(cfg).save(output_dir="out", overwrite=True).build()

Each fluent step returns a new builder over an updated config (configs are frozen); `build()`
validates, builds the Beam pipeline and runs it (Beam is imported only then).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from easydata.config import DatasetConfig, MixStageConfig, PipelineConfig

__all__ = ["Pipeline", "tokenize_and_save"]


class Pipeline:
    """Fluent builder over a `PipelineConfig`."""

    def __init__(self, config: PipelineConfig):
        self.config = config

    @classmethod
    def from_config(cls, config: PipelineConfig | dict[str, Any] | str) -> "Pipeline":
        """From a config object, a plain dict, or a YAML/JSON file path."""
        if isinstance(config, str):
            config = PipelineConfig.from_yaml(config)
        elif isinstance(config, dict):
            config = PipelineConfig.from_dict(config)
        return cls(config)

    def _with(self, **changes: Any) -> "Pipeline":
        return Pipeline(dataclasses.replace(self.config, **changes))

    def source(self, *datasets: DatasetConfig | dict[str, Any]) -> "Pipeline":
        """Adds datasets (configs or dicts); with no argument keeps the config's datasets."""
        added = [d if isinstance(d, DatasetConfig) else DatasetConfig(**d) for d in datasets]
        return self._with(datasets=[*self.config.datasets, *added])

    def tokenize(self, **settings: Any) -> "Pipeline":
        return self._with(tokenize=dataclasses.replace(self.config.tokenize, **settings))

    def mix(self, **settings: Any) -> "Pipeline":
        return self._with(mix=dataclasses.replace(self.config.mix or MixStageConfig(), **settings))

    def pack(self, **settings: Any) -> "Pipeline":
        return self._with(pack=dataclasses.replace(self.config.pack, **settings))

    def save(self, **settings: Any) -> "Pipeline":
        return self._with(save=dataclasses.replace(self.config.save, **settings))

    def build(self, beam_args: Optional[Sequence[str]] = None, *, show_progress: bool = False) -> Any:
        """Validates the config, then builds and runs the Beam pipeline; returns a `BatchResult`."""
        from beam_pipelines.batch import run_batch

        config = PipelineConfig.from_dict(self.config.to_dict())  # full validation, every problem at once
        return run_batch(config, list(beam_args or []), show_progress=show_progress)


def tokenize_and_save(data_files: str | Sequence[str], tokenizer: str, output_dir: str, *,
                      name: str = "data", content_field: str = "text", format: str = "parquet",
                      max_length: Optional[int] = None, num_shards: Optional[int] = None, seed: int = 42,
                      overwrite: bool = False, beam_args: Optional[Sequence[str]] = None, **dataset: Any) -> Any:
    """Tokenizes files into sharded output in one call (the `easydata tokenize` command)."""
    config = PipelineConfig.from_dict({
        "seed": seed,
        "default_tokenizer": tokenizer,
        "datasets": [{"name": name, "data_files": data_files, "content_field": content_field, **dataset}],
        "tokenize": {"max_length": max_length, "truncation": "truncate" if max_length else "none"},
        "save": {"output_dir": output_dir, "format": format, "num_shards": num_shards, "overwrite": overwrite},
    })
    return Pipeline(config).build(beam_args)
