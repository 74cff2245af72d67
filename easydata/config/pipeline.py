"""`PipelineConfig`: a whole preprocessing job, and how it is loaded.

A config is loaded from YAML or JSON (`PipelineConfig.from_yaml`, `from_json`, `from_dict`). Loading
converts nested dicts into the stage configs (`easydata.config.convert`), rejects unknown keys with a
did-you-mean, checks types, and `validate()` returns *every* problem at once (`easydata.config.validation`;
an empty list means the config is usable); `from_dict` raises one `ConfigError` listing them all.

The resolved config is written into the output manifest, and `fingerprint()` hashes everything that
shapes the output (`easydata.config.fingerprint`), so a resumed or compared run can prove it used the
same settings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Union

from easydata.config.convert import convert
from easydata.config.files import apply_overrides, load_mapping
from easydata.config.callables import callable_name
from easydata.config.fingerprint import fingerprint_of
from easydata.config.secrets import REDACTED, redact_url
from easydata.config.models import (ChatStageConfig, DatasetConfig, LoadStageConfig, MixStageConfig,
                                    PackStageConfig, RayConfig, SaveStageConfig, StreamingConfig, TokenizeStageConfig,
                                    TokenizerConfig, WeightSchedulePoint, name_datasets)
from easydata.config.validation import problems, warnings
from easydata.errors import ConfigError

__all__ = ["PipelineConfig"]


def _redacted(data: Any) -> Any:
    """`data` (plain JSON data) with every string that is a URL redacted (`redact_url`)."""
    if isinstance(data, dict):
        return {key: _redacted(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_redacted(value) for value in data]
    return redact_url(data) if isinstance(data, str) else data


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """A whole preprocessing job.

    Attributes:
      seed: drives every deterministic choice (shuffle order, shard assignment, mixing).
      max_rejected_fraction: fail the run when more than this fraction of documents is rejected.
      allow_empty_datasets: commit a run in which a dataset ends with no document (all rejected, or no
        records); by default that fails the run, naming the most common rejection reason.
      default_tokenizer: tokenizer for datasets that do not name their own.
      datasets: the inputs (`DatasetConfig`s or plain dicts; unnamed ones get a derived name).
      tokenize, chat, mix, pack, save, load: stage settings.
      streaming: the streaming pipeline's windowing; EasyData's `streaming=True/False` is accepted
        (input is always read as a stream, never loaded whole) and means the defaults.
      ray: EasyData's `RayConfig`, mapped onto local worker processes (see `RayConfig`).
      schedule: weights over training steps for reading the datasets' outputs mixed
        (`easydata.reader.MixedReader`); `Pipeline(...).mix().load()` applies it when `mix` has no
        `weight_schedule` of its own. The job itself does not use it.
    """

    seed: int = 42
    max_rejected_fraction: Optional[float] = None
    allow_empty_datasets: bool = False
    default_tokenizer: Union[str, TokenizerConfig, None] = None
    datasets: list[DatasetConfig] = dataclasses.field(default_factory=list)
    tokenize: TokenizeStageConfig = dataclasses.field(default_factory=TokenizeStageConfig)
    chat: ChatStageConfig = dataclasses.field(default_factory=ChatStageConfig)
    mix: Optional[MixStageConfig] = None
    pack: PackStageConfig = dataclasses.field(default_factory=PackStageConfig)
    save: SaveStageConfig = dataclasses.field(default_factory=SaveStageConfig)
    load: LoadStageConfig = dataclasses.field(default_factory=LoadStageConfig)
    streaming: Union[StreamingConfig, bool] = dataclasses.field(default_factory=StreamingConfig)
    schedule: list[WeightSchedulePoint] = dataclasses.field(default_factory=list)
    ray: Optional[RayConfig] = None

    def __post_init__(self) -> None:
        # EasyData spellings, normalised once so the engine reads one form: dataset dicts become
        # configs, unnamed datasets get a name, `streaming=True/False` becomes the default windowing.
        if not isinstance(self.datasets, list):  # a conversion problem already reported
            return
        datasets = [DatasetConfig(**d) if isinstance(d, dict) else d for d in self.datasets]
        removed = set(self.tokenize.remove_columns) if isinstance(self.tokenize, TokenizeStageConfig) else set()
        if removed:
            datasets = [dataclasses.replace(d, additional_fields=[f for f in d.additional_fields if f not in removed])
                        for d in datasets]
        if all(isinstance(d, DatasetConfig) for d in datasets):
            object.__setattr__(self, "datasets", name_datasets(datasets))
        if isinstance(self.streaming, bool):
            object.__setattr__(self, "streaming", StreamingConfig())
        # `~` in the output, expanded here once: fsspec expands it and os/pyarrow paths do not, so leaving
        # it to each step staged a run in two places.
        save = self.save
        if isinstance(save, SaveStageConfig) and isinstance(save.output_dir, str) and save.output_dir.startswith("~"):
            object.__setattr__(self, "save", dataclasses.replace(save, output_dir=os.path.expanduser(save.output_dir)))

    # ---- loading -------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PipelineConfig":
        """Builds and validates a config; raises `ConfigError` listing every problem."""
        found: list[str] = []
        config = convert(cls, data, "", found)
        if not found:
            found.extend(config.validate())
        if found:
            raise ConfigError(found)
        for warning in warnings(data):
            print(f"easydata: warning: {warning}", file=sys.stderr)
        return config

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "PipelineConfig":
        """Loads a YAML (or JSON, a YAML subset) file, applying `key.path=value` overrides."""
        return cls.from_dict(apply_overrides(load_mapping(path), overrides or []))

    @classmethod
    def from_json(cls, path: str | Path, overrides: list[str] | None = None) -> "PipelineConfig":
        return cls.from_yaml(path, overrides)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-compatible data (written into the manifest, which is uploaded
        with the shards by `push_to_hub`); a `format_callback` function appears as its `"module:qualname"`
        and a secret (`save.hub_token`, a URL's login and query values: `easydata.config.secrets`) as `REDACTED`:
        secrets never enter a manifest or a log."""
        data = _redacted(json.loads(json.dumps(dataclasses.asdict(self), default=callable_name)))
        if data["save"].get("hub_token") is not None:
            data["save"]["hub_token"] = REDACTED
        return data

    def fingerprint(self) -> str:
        """A hash of the settings that shape the output (`SHAPING_FIELDS`, an allow-list), so that editing
        anything else (`save.overwrite`, the hub upload, the streaming windows, what only readers or the
        run's checks use, EasyData knobs accepted and ignored) does not block `--resume`. A
        `format_callback` counts with its code."""
        return fingerprint_of(self)

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)

    # ---- semantic checks -----------------------------------------------------------------------

    def tokenizer_spec(self, dataset: DatasetConfig) -> Union[str, TokenizerConfig, None]:
        for spec in (dataset.tokenizer, self.tokenize.default_tokenizer, self.default_tokenizer):
            if spec is not None:
                return spec
        return None

    def tokenizer_for(self, dataset: DatasetConfig) -> TokenizerConfig:
        """Which tokenizer `dataset` loads: its own, else `tokenize.default_tokenizer`, else
        `default_tokenizer`; with `pack.eos_token_id` as its EOS id when packing."""
        spec = self.tokenizer_spec(dataset)
        if spec is None:
            raise ConfigError(f"dataset '{dataset.name}' has no tokenizer and `default_tokenizer` is not set")
        config = spec if isinstance(spec, TokenizerConfig) else TokenizerConfig(name_or_path=spec)
        if self.pack.enabled and self.pack.eos_token_id is not None:
            config = dataclasses.replace(config, eos_token_id=self.pack.eos_token_id)
        return config.loading_key()

    def tokenize_for(self, dataset: DatasetConfig) -> TokenizeStageConfig:
        """The tokenize settings of `dataset`: the stage's, with what its `TokenizerConfig` says about
        length (`max_length`, `truncation`) and special tokens (`add_special_tokens`)."""
        spec = self.tokenizer_spec(dataset)
        stage = self.tokenize
        if not isinstance(spec, TokenizerConfig):
            return stage
        changes: dict[str, Any] = {}
        if spec.max_length is not None:
            changes["max_length"] = spec.max_length
            changes["truncation"] = spec.truncation
        elif spec.truncation is not None:
            changes["truncation"] = spec.truncation
        if not spec.add_special_tokens:
            changes["add_bos"] = False
        return dataclasses.replace(stage, **changes) if changes else stage

    @property
    def static_mix(self) -> Optional[MixStageConfig]:
        """The mix the job itself performs: `mix` unless it is a weight schedule (read-time mixing)."""
        return self.mix if self.mix is not None and self.mix.static else None

    @property
    def mix_seed(self) -> int:
        return self.mix.seed if self.mix is not None and self.mix.seed is not None else self.seed

    def validate(self) -> list[str]:
        """Returns every semantic problem of this config; empty when it is usable (`easydata.config.validation`)."""
        return problems(self)
