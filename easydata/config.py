"""Pipeline configuration: the EasyData vocabulary as frozen, keyword-only dataclasses.

A config is loaded from YAML or JSON (`PipelineConfig.from_yaml`, `from_json`, `from_dict`). Loading
converts nested dicts into the stage configs, rejects unknown keys with a did-you-mean, checks types,
and `validate()` returns *every* problem at once (an empty list means the config is usable);
`from_dict` raises one `ConfigError` listing them all.

The resolved config is written into the output manifest, and `fingerprint()` hashes everything that
shapes the output, so a resumed or compared run can prove it used the same settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

from easydata.errors import ConfigError

__all__ = [
    "TokenizerConfig",
    "DatasetConfig",
    "TokenizeStageConfig",
    "ChatStageConfig",
    "MixStageConfig",
    "StreamingConfig",
    "PackStageConfig",
    "SaveStageConfig",
    "LoadStageConfig",
    "RayConfig",
    "WeightSchedulePoint",
    "PipelineConfig",
    "parse_size",
    "parse_mapping_text",
    "safe_name",
    "apply_overrides",
    "INPUT_TYPES",
    "OUTPUT_FORMATS",
    "DEFAULT_COMPRESSION",
]

# The enumerations, each written once: the config fields' types are these, and the tuples derive from them.
InputType = Literal["jsonl", "json", "parquet", "arrow", "csv", "txt"]
OutputFormat = Literal["parquet", "arrow", "jsonl", "bin", "npz", "megatron", "tfrecord", "arrayrecord"]
Compression = Literal["none", "zstd", "snappy", "gzip", "lz4"]
EngineName = Literal["auto", "hf", "fastokens", "gigatoken"]
INPUT_TYPES = typing.get_args(InputType)
OUTPUT_FORMATS = typing.get_args(OutputFormat)
# Formats of plain numpy token files (`easydata.io.token_files`): default compression `none`.
TOKEN_FILE_FORMATS = ("bin", "npz", "megatron")
COMPRESSIONS = typing.get_args(Compression)
ENGINE_NAMES = typing.get_args(EngineName)
#: The compression of each output format when `save.compression` is not set.
DEFAULT_COMPRESSION = {"parquet": "zstd", "arrow": "zstd", "jsonl": "none", "bin": "none", "npz": "none",
                       "megatron": "none", "tfrecord": "none", "arrayrecord": "zstd"}
_FORMAT_COMPRESSIONS = {
    "parquet": COMPRESSIONS,
    "arrow": ("none", "zstd", "lz4"),
    "jsonl": ("none", "gzip", "zstd"),
    "bin": ("none",),
    "megatron": ("none",),
    "npz": ("none", "gzip"),
    "tfrecord": ("none", "gzip"),
    "arrayrecord": ("none", "zstd"),
}
#: What a secret (`save.hub_token`) reads as wherever the config is shown or written.
REDACTED = "<redacted>"
# Resource bounds: settings beyond these are refused before any work starts (they would only end in
# "Unable to allocate ..." once data flows). Each is far above what a real job needs.
MAX_SEQ_LENGTH = 2**21             # tokens per packed row (2 M: the longest-context models' windows)
MAX_TOTAL_TOKENS = 10**14          # an explicit mix budget (100 T tokens)
MAX_SHARDS = 100_000               # shards per output
MAX_BATCH_SIZE = 1_000_000         # documents per tokenizer batch
MAX_ROW_GROUP_SIZE = 10_000_000    # rows per Parquet row group / Arrow record batch
MAX_POOL_SIZE = 4096               # open rows of the `pool` packer
#: Documents larger than this are dead letters unless `tokenize.max_document_bytes` says otherwise:
#: a single huge line would otherwise hold many times its size in memory while being tokenized.
DEFAULT_MAX_DOCUMENT_BYTES = "32MiB"
#: Dataset names become directories of the output: these are taken by the output's own files.
RESERVED_NAMES = ("rejected", "mixed", "manifest.json")

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(value: int | str) -> int:
    """Parses a byte size such as `500MB`, `1.5GiB` or `1048576` into bytes.

    Raises:
      ValueError: if the value is not a positive size.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as '500MB', got {value!r}")
    if isinstance(value, int):
        number, unit = float(value), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
        if not match or match.group(2).upper() not in _SIZE_UNITS:
            raise ValueError(f"expected a size such as '500MB' or '1GiB', got {value!r}")
        number, unit = float(match.group(1)), match.group(2).upper()
    size = int(number * _SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return size


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerConfig:
    """Which tokenizer to use, optional special-token overrides, and (EasyData's spelling) how a
    dataset's documents are encoded.

    Attributes:
      name_or_path: a directory holding `tokenizer.json` (and optionally `tokenizer_config.json`),
        a `tokenizer.json` file, or a Hugging Face hub id (downloaded into the standard cache when
        online, read from it with `HF_HUB_OFFLINE=1`).
      bos_token, eos_token, pad_token: override the special tokens the tokenizer declares.
      eos_token_id: override the EOS id itself (set from `pack.eos_token_id`).
      max_length, truncation: this dataset's documents are cut to `max_length` tokens (`truncation`
        true, or unset); they override `tokenize.max_length` / `tokenize.truncation` for the dataset.
      padding: `False`/`"longest"`: rows keep their length; `"max_length"`/`True`: rows are read
        padded to `max_length` (`Pipeline.load()`; the stored rows are not padded, padding is free
        at read time and marked by `segment_ids == 0`).
      add_special_tokens: False: no BOS (EOS between documents follows `tokenize.add_eos`).
      return_attention_mask, trust_remote_code: accepted for EasyData configs. Unpacked rows always
        carry `attention_mask`; tokenizers load from `tokenizer.json` and never run repository code.
    """

    name_or_path: str
    bos_token: Optional[str] = None
    eos_token: Optional[str] = None
    pad_token: Optional[str] = None
    eos_token_id: Optional[int] = None
    max_length: Optional[int] = None
    truncation: Union[bool, Literal["none", "truncate", "window"], None] = None
    padding: Union[bool, Literal["longest", "max_length", "do_not_pad"]] = False
    add_special_tokens: bool = True
    return_attention_mask: bool = True
    trust_remote_code: bool = False

    def loading_key(self) -> "TokenizerConfig":
        """The part that decides which tokenizer is loaded (datasets that differ only in how they
        encode share one loaded tokenizer)."""
        return TokenizerConfig(name_or_path=self.name_or_path, bos_token=self.bos_token, eos_token=self.eos_token,
                               pad_token=self.pad_token, eos_token_id=self.eos_token_id)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    """One input dataset.

    Attributes:
      name: output sub-directory and manifest key: letters, digits, `_`, `-`, `.`, starting with a
        letter or digit; not `rejected`, `mixed` or `manifest.json`. Derived from `data_files` (the
        last directory, or the file's stem) when not given.
      data_files: path, glob, or list of them; any fsspec URL (local, file://, gs://, s3://, hf://,
        memory://). For `type: huggingface`, the hub dataset id (`owner/name`).
      type: input format; inferred from the file extension when null (`.gz/.zst/.bz2` stripped first).
        `huggingface`: `data_files` is a hub dataset id, read from its `split`.
      split: the split of a `huggingface` dataset (default `train`).
      content_field: the field holding the document text.
      additional_fields: fields kept next to the tokens (unpacked rows: as columns; packed rows: per
        segment, with where the document came from).
      tokenizer: per-dataset tokenizer (defaults to `PipelineConfig.default_tokenizer`).
      tokenizer_kwargs: EasyData's `AutoTokenizer.from_pretrained` arguments; accepted and recorded
        (tokenizers are always the fast `tokenizer.json` ones; `revision` is not supported yet).
      num_rows: read at most this many documents (in input order), for quick trials.
      sample_by: for `txt` input, what one document is: a `line`, a `paragraph` (blank-line
        separated), or the whole `document` (file).
      pubsub_subscription: streaming source instead of `data_files` (streaming pipeline only).
      cache_path, cache_enabled: where `Pipeline(...).load().build()` keeps the prepared output of a
        job (the first dataset's `cache_path` wins; default `~/.cache/easydata-beam/pipelines`), and
        whether a prepared output may be reused.
      save_path, save_format: the Python API's `save()` also writes this dataset's output there, as a
        standalone output (its shards at the top level and its own manifest), in `save_format`.
      format_fields: rename record fields before anything else reads them (`{old: new}`; also the
        keys of messages).
      format_callback: a function (or `"module:function"`) turning each record dict into the record
        to use (a dict, or a string: the document text); None or an error dead-letters the record.
    """

    name: Optional[str] = None
    data_files: Union[str, list[str], None] = None
    type: Optional[Literal[InputType, "huggingface"]] = None
    split: Optional[str] = None
    content_field: str = "text"
    additional_fields: list[str] = dataclasses.field(default_factory=list)
    tokenizer: Union[str, TokenizerConfig, None] = None
    tokenizer_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    num_rows: Optional[int] = None
    sample_by: Literal["line", "paragraph", "document"] = "line"
    pubsub_subscription: Optional[str] = None
    cache_path: Optional[str] = None
    cache_enabled: bool = True
    save_path: Optional[str] = None
    save_format: Optional[Literal["parquet", "arrow", "jsonl"]] = None
    format_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    format_callback: Any = None

    @property
    def data_file_list(self) -> list[str]:
        if self.data_files is None:
            return []
        return [self.data_files] if isinstance(self.data_files, str) else list(self.data_files)

    def record_formatter(self) -> Optional[Any]:
        """`format_fields` then `format_callback` as one function of a record (None when neither is
        set); see `easydata.io.record_format`."""
        if not self.format_fields and self.format_callback is None:
            return None
        from easydata.io.record_format import RecordFormatter

        return RecordFormatter(self.format_fields, self.format_callback, self.content_field)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizeStageConfig:
    """How text becomes token ids.

    Attributes:
      max_length: documents longer than this many tokens are truncated (null: never).
      truncation: `none`, `truncate` (keep the first `max_length` tokens) or `window` (cut longer
        documents into overlapping windows of `max_length` tokens; `easydata.text.windows`). Unset: `truncate`
        when `max_length` is set (EasyData's meaning), else `none`; `true`/`false` are EasyData's
        spellings of `truncate`/`none`. `truncation_mode` is the one in force.
      stride: tokens shared by consecutive windows (`window` only; null: 0, no overlap).
      add_bos: prepend BOS (null: the tokenizer's own convention).
      add_eos: append EOS to every document unless it already ends with it.
      batch_size: documents per tokenizer call and per batch moved between stages.
      max_document_bytes: larger documents (UTF-8 bytes of their text) are rejected to the dead-letter
        output; a size (`32MiB`, `1GB` or bytes). Default 32 MiB; null: no limit (a single huge document
        then holds many times its size in memory while it is tokenized).
      default_tokenizer: tokenizer of datasets that name none (before `PipelineConfig.default_tokenizer`).
      num_workers: worker processes of the local runner (null: one per core); other runners size
        themselves.
      cache_tokenized: `Pipeline(...).load().build()` may reuse an output prepared earlier with the same
        config (false: prepare it again).
      remove_columns: fields not to keep next to the tokens (taken out of `additional_fields`; the
        text itself is never kept).
      engine: what encodes plain documents (`easydata.text.engines`): `hf` (Hugging Face `tokenizers`,
        the reference that defines the ids), `fastokens` or `gigatoken` (faster, used only after they
        gave `hf`'s ids on the run's own documents and an adversarial set, and checked on a sample while
        the run goes), `auto` (the fastest installed engine that passes, else `hf`).
    """

    max_length: Optional[int] = None
    truncation: Union[Literal["none", "truncate", "window"], bool, None] = None
    stride: Optional[int] = None
    add_bos: Optional[bool] = None
    add_eos: bool = True
    batch_size: int = 1000
    max_document_bytes: Union[int, str, None] = DEFAULT_MAX_DOCUMENT_BYTES
    default_tokenizer: Union[str, TokenizerConfig, None] = None
    num_workers: Optional[int] = None
    cache_tokenized: bool = True
    remove_columns: list[str] = dataclasses.field(default_factory=list)
    engine: EngineName = "auto"

    @property
    def truncation_mode(self) -> str:
        """`none`, `truncate` or `window`: the truncation in force (see `truncation`)."""
        if self.truncation is None:
            return "truncate" if self.max_length is not None else "none"
        if isinstance(self.truncation, bool):
            return "truncate" if self.truncation else "none"
        return self.truncation

    @property
    def max_document_byte_limit(self) -> Optional[int]:
        """`max_document_bytes` in bytes (None: no limit)."""
        return None if self.max_document_bytes is None else parse_size(self.max_document_bytes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatStageConfig:
    """Chat rendering for datasets whose content is a list of messages.

    Attributes:
      messages_field: the field holding the messages.
      template: jinja template text or a path to a file with it (null: the tokenizer's own).
      assistant_only_loss: emit a `loss_mask` that is 1 only on assistant tokens.
    """

    messages_field: str = "messages"
    template: Optional[str] = None
    assistant_only_loss: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class WeightSchedulePoint:
    """Mixing weights in force from training `step` on (used by the reader's `MixedReader`)."""

    step: int
    weights: dict[str, float]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixStageConfig:
    """Weighted mixing of datasets by share of output tokens.

    Attributes:
      weights: dataset name -> relative weight (normalised).
      stop_strategy: `first_exhausted`, `all_exhausted` or its alias `restart`.
      total_tokens: an explicit output token budget instead of a stop strategy.
      weight_schedule: weights that change with the training step (EasyData's curriculum). The job
        then writes each dataset as its own output and the reader mixes them step by step
        (`easydata.reader.MixedReader`; `Pipeline(...).load()` does it); `weights` are not used.
      weight_schedule_type: `step`, `linear` or `cosine` interpolation between schedule points.
      block_size: accepted for EasyData configs: selection here is per document and exact in tokens,
        so no block granularity is needed.
      seed: the mix's own seed (default: the pipeline's `seed`).
    """

    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    stop_strategy: Literal["first_exhausted", "all_exhausted", "restart"] = "first_exhausted"
    total_tokens: Optional[int] = None
    weight_schedule: list[WeightSchedulePoint] = dataclasses.field(default_factory=list)
    weight_schedule_type: Literal["step", "linear", "cosine"] = "step"
    block_size: int = 1000
    seed: Optional[int] = None

    @property
    def static(self) -> bool:
        """True when the job itself mixes (fixed weights), False when the reader does (a schedule)."""
        return not self.weight_schedule

    def problems(self, dataset_names: list[str]) -> list[str]:
        """What is wrong with these settings for a run over `dataset_names`."""
        found = []
        for i, point in enumerate(self.weight_schedule):
            for name in point.weights:
                if name not in dataset_names:
                    found.append(f"mix.weight_schedule[{i}]: '{name}' is not a dataset (datasets:"
                                 f" {', '.join(dataset_names)})")
        if [p.step for p in self.weight_schedule] != sorted({p.step for p in self.weight_schedule}):
            found.append("mix.weight_schedule: steps must be strictly increasing")
        if self.block_size <= 0:
            found.append(f"mix.block_size must be positive, got {self.block_size}")
        if not self.static:
            return found
        if not self.weights:
            found.append("mix.weights is empty: give each dataset a weight (or remove the `mix` section)")
        for name in self.weights:
            if name not in dataset_names:
                hint = difflib.get_close_matches(name, dataset_names, n=1)
                suggestion = f" (did you mean '{hint[0]}'?)" if hint else f" (datasets: {', '.join(dataset_names)})"
                found.append(f"mix.weights: '{name}' is not a dataset{suggestion}")
        for name in dataset_names:
            if self.weights and name not in self.weights:
                found.append(f"mix.weights: dataset '{name}' has no weight (give it one, or 0 to leave it out)")
        bad = [f"{n}={w}" for n, w in self.weights.items() if not math.isfinite(w) or w < 0]
        if bad:
            found.append(f"mix.weights must be finite and >= 0, got {', '.join(bad)}")
        elif self.weights and not any(w > 0 for w in self.weights.values()):
            found.append("mix.weights are all zero: give at least one dataset a positive weight")
        if self.total_tokens is not None and not 0 < self.total_tokens <= MAX_TOTAL_TOKENS:
            found.append(f"mix.total_tokens must be in [1, {MAX_TOTAL_TOKENS:.0e}], got {self.total_tokens}")
        return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class StreamingConfig:
    """Windowing of the streaming pipeline (`easydata run CONFIG --streaming`).

    Attributes:
      window_seconds: event-time window length; each window becomes its own committed shards.
      allowed_lateness_seconds: how long after a window's end late messages still count (each late
        firing commits an extra pane of that window); later ones are dropped and counted.
      early_firing_seconds: also fire a window this often (processing time) before it closes;
        null: fire once, when the watermark passes the window's end.
      event_time: what places a message in a window: `publish` (its Pub/Sub publish time) or
        `arrival` (when the pipeline reads it). null: `arrival` on the local runner, whose watermark
        is the wall clock (a backlog of older messages would otherwise be dropped as late), and
        `publish` on other runners.
    """

    window_seconds: int = 60
    allowed_lateness_seconds: int = 0
    early_firing_seconds: Optional[int] = None
    event_time: Optional[Literal["publish", "arrival"]] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackStageConfig:
    """Packing of documents into fixed-length rows.

    Attributes:
      enabled: pack (true) or write one row per document (false).
      seq_length: length of every packed row.
      strategy: `greedy`, `first_fit`, `best_fit` or `pool`.
      pad_token_id: padding id (default: the tokenizer's pad token, else its EOS, else 0); padding
        is marked by `segment_ids == 0` whatever its id.
      max_segments_per_row: optional cap on documents per row.
      pool_size: open rows kept by the `pool` strategy (`num_packers` is EasyData's name for it).
      eos_token_id: the id that ends every document (default: the tokenizer's EOS).
      include_segment_ids: packed rows always store `segment_ids` and `positions` (they are what
        keeps documents apart); false leaves them out of the batches `Pipeline(...).load()` gives.
      shuffle_packed, shuffle_buffer_factor: accepted for EasyData configs: packed rows are always
        shuffled globally and deterministically (`seed`), which a shuffle buffer only approximates.
    """

    enabled: bool = False
    seq_length: int = 2048
    strategy: Literal["greedy", "first_fit", "best_fit", "pool"] = "first_fit"
    pad_token_id: Optional[int] = None
    max_segments_per_row: Optional[int] = None
    pool_size: int = 8
    num_packers: Optional[int] = None
    eos_token_id: Optional[int] = None
    include_segment_ids: bool = True
    shuffle_packed: bool = True
    shuffle_buffer_factor: int = 10

    @property
    def pool_rows(self) -> int:
        """Open rows of the `pool` strategy: `num_packers` when given, else `pool_size`."""
        return self.num_packers if self.num_packers is not None else self.pool_size


@dataclasses.dataclass(frozen=True, kw_only=True)
class SaveStageConfig:
    """Where and how output shards are written.

    Attributes:
      output_dir: local path or fsspec URL of the output directory.
      format: `parquet`, `arrow` (IPC file), `jsonl`, `bin` (flat token stream + document index, for
        `np.memmap`), `npz` (padded `input_ids` / `attention_mask` arrays) or `megatron` (Megatron-LM's
        indexed dataset, `.bin` + `MMIDIDX` `.idx`, for Megatron-LM, NeMo, GPT-NeoX and MaxText); see
        `easydata.io.token_files`; `tfrecord` or `arrayrecord` (one `tf.train.Example` per row, for
        `tf.data` and Grain / MaxText; `easydata.io.record_files`).
      compression: codec the format supports (`parquet`: all; `arrow`: none/zstd/lz4; `jsonl`:
        none/gzip/zstd; `bin`: none; `npz`: none/gzip; `tfrecord`: none/gzip; `arrayrecord`:
        none/zstd). null: the format's default (`DEFAULT_COMPRESSION`: zstd for parquet, arrow and
        arrayrecord, none for the others); `codec` is the one in force.
      num_shards: exact number of shards per output (overrides `max_shard_size`).
      max_shard_size: upper bound of a shard's uncompressed size, e.g. `500MB`.
      overwrite: replace an existing output directory.
      row_group_size: rows per Parquet row group / Arrow record batch.
      validation_fraction: write a deterministic `train` / `validation` split of the documents, this
        fraction in `validation` (outputs `<name>/train`, `<name>/validation`); see `easydata.ops.splits`.
      splits: any split instead, `{name: fraction}` (normalised), e.g. `{train: 98, validation: 1, test: 1}`.
      split_seed: changes which documents land in which split (the pipeline `seed` does not).
      enabled: whether the Python API's `save()` stage writes (`easydata run` always writes).
      push_to_hub, hub_repo_id, hub_private, hub_token: after the commit, upload the output to this
        Hugging Face dataset repo (token default: the environment's, as huggingface_hub finds it).
    """

    output_dir: str = "easydata_output"
    format: OutputFormat = "parquet"
    compression: Optional[Compression] = None
    num_shards: Optional[int] = None
    max_shard_size: Union[int, str] = "500MB"
    overwrite: bool = False
    row_group_size: int = 1000
    validation_fraction: Optional[float] = None
    splits: Optional[dict[str, float]] = None
    split_seed: int = 0
    enabled: bool = True
    push_to_hub: bool = False
    hub_repo_id: Optional[str] = None
    hub_private: bool = True
    hub_token: Optional[str] = None

    @property
    def codec(self) -> str:
        """The compression in force: `compression`, or the format's default (the one rule for it)."""
        return self.compression or DEFAULT_COMPRESSION[self.format]

    @property
    def max_shard_bytes(self) -> int:
        return parse_size(self.max_shard_size)

    def split_fractions(self) -> Optional[dict[str, float]]:
        """Split name -> fraction of documents (summing to 1), or None when the output is not split."""
        if self.validation_fraction is not None:
            return {"train": 1.0 - self.validation_fraction, "validation": self.validation_fraction}
        if self.splits:
            total = sum(self.splits.values())
            if not (math.isfinite(total) and total > 0):  # refused by `split_problems`
                return None
            return {name: weight / total for name, weight in self.splits.items()}
        return None

    def split_problems(self) -> list[str]:
        """What is wrong with `validation_fraction` / `splits`."""
        found = []
        if self.validation_fraction is not None and self.splits is not None:
            found.append("set save.validation_fraction or save.splits, not both")
        if self.validation_fraction is not None and not 0 < self.validation_fraction < 1:
            found.append(f"save.validation_fraction must be within (0, 1), got {self.validation_fraction}")
        if self.splits is not None:
            if len(self.splits) < 2:
                found.append(f"save.splits needs at least two splits (name: fraction), got {self.splits}")
            for name, weight in self.splits.items():
                if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
                    found.append(f"save.splits: split name '{name}' must use letters, digits, '_', '-', '.'")
                if not math.isfinite(weight) or weight <= 0:
                    found.append(f"save.splits: fraction of '{name}' must be positive, got {weight}")
        return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadStageConfig:
    """How `Pipeline(...).load().build()` reads the prepared output (`easydata.reader.TokenReader`).

    Attributes:
      batch_size: rows per batch.
      shuffle: read rows in a deterministic shuffled order (seed: `seed`, else the pipeline's).
      num_epochs: passes over the data (null: 1 for `Pipeline.load()`, as EasyData's loader).
      drop_remainder / drop_last: drop the last, smaller batch.
      layout: column names of the batches: `raw`, `maxtext` or `hf` (see `easydata.reader`).
      prefetch_enabled, prefetch_buffer_size: read this many batches ahead on a background thread.
      prefetch_workers: accepted for EasyData configs (one read-ahead thread does the work).
      shuffle_buffer_size: EasyData's shuffle buffer; 0 turns shuffling off, any other value means
        the reader's exact global shuffle.
      prefetch_to_device: batches as JAX device arrays instead of numpy.
    """

    batch_size: int = 8
    shuffle: bool = True
    seed: Optional[int] = None
    num_epochs: Optional[int] = None
    drop_remainder: bool = True
    layout: Literal["raw", "maxtext", "hf"] = "raw"
    prefetch_enabled: bool = True
    prefetch_workers: int = 2
    prefetch_buffer_size: int = 4
    shuffle_buffer_size: Optional[int] = None
    drop_last: Optional[bool] = None
    prefetch_to_device: bool = False

    @property
    def shuffled(self) -> bool:
        return self.shuffle and self.shuffle_buffer_size != 0

    @property
    def drops_remainder(self) -> bool:
        return self.drop_remainder if self.drop_last is None else self.drop_last


@dataclasses.dataclass(frozen=True, kw_only=True)
class RayConfig:
    """EasyData's Ray settings, accepted and mapped: there is no Ray here. `enabled` with
    `num_workers` runs that many worker processes on the local runner; for more machines use
    `--runner=DaskRunner` or `DataflowRunner` (docs/runners.md)."""

    enabled: bool = False
    num_workers: Optional[int] = None
    resources_per_worker: dict[str, float] = dataclasses.field(default_factory=dict)
    address: Optional[str] = None


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
        problems: list[str] = []
        config = _convert(cls, data, "", problems)
        if not problems:
            problems.extend(config.validate())
        if problems:
            raise ConfigError(problems)
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
        and a secret (`save.hub_token`) as `REDACTED`: secrets never enter a manifest or a log."""
        data = json.loads(json.dumps(dataclasses.asdict(self), default=callable_name))
        if data["save"].get("hub_token") is not None:
            data["save"]["hub_token"] = REDACTED
        return data

    def fingerprint(self) -> str:
        """A hash of the settings that shape the output (`SHAPING_FIELDS`, an allow-list), so that editing
        anything else (`save.overwrite`, the hub upload, the streaming windows, what only readers or the
        run's checks use, EasyData knobs accepted and ignored) does not block `--resume`. A
        `format_callback` counts with its code."""
        return hashlib.sha256(json.dumps(_shaping(self), sort_keys=True, default=_callable_identity
                                         ).encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)

    # ---- semantic checks -----------------------------------------------------------------------

    def _tokenizer_spec(self, dataset: DatasetConfig) -> Union[str, TokenizerConfig, None]:
        for spec in (dataset.tokenizer, self.tokenize.default_tokenizer, self.default_tokenizer):
            if spec is not None:
                return spec
        return None

    def tokenizer_for(self, dataset: DatasetConfig) -> TokenizerConfig:
        """Which tokenizer `dataset` loads: its own, else `tokenize.default_tokenizer`, else
        `default_tokenizer`; with `pack.eos_token_id` as its EOS id when packing."""
        spec = self._tokenizer_spec(dataset)
        if spec is None:
            raise ConfigError(f"dataset '{dataset.name}' has no tokenizer and `default_tokenizer` is not set")
        config = spec if isinstance(spec, TokenizerConfig) else TokenizerConfig(name_or_path=spec)
        if self.pack.enabled and self.pack.eos_token_id is not None:
            config = dataclasses.replace(config, eos_token_id=self.pack.eos_token_id)
        return config.loading_key()

    def tokenize_for(self, dataset: DatasetConfig) -> TokenizeStageConfig:
        """The tokenize settings of `dataset`: the stage's, with what its `TokenizerConfig` says about
        length (`max_length`, `truncation`) and special tokens (`add_special_tokens`)."""
        spec = self._tokenizer_spec(dataset)
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
        """Returns every semantic problem of this config; empty when it is usable."""
        problems: list[str] = []
        if not self.datasets:
            problems.append("`datasets` is empty: add at least one dataset")
        for i, ds in enumerate(self.datasets):
            if not isinstance(ds, DatasetConfig):
                problems.append(f"datasets[{i}] must be a DatasetConfig (or a mapping of its fields), got {ds!r}")
        if problems and self.datasets:
            return problems
        names = [d.name for d in self.datasets]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"dataset name '{name}' is used more than once")
        for i, ds in enumerate(self.datasets):
            where = f"datasets[{i}] ('{str(ds.name)[:40]}')"
            if not safe_name(ds.name):
                shown = repr(ds.name) if len(str(ds.name)) <= 40 else f"{str(ds.name)[:30]!r}... ({len(ds.name)} characters)"
                problems.append(f"{where}: `name` {shown} must be letters, digits, '_', '-', '.', start with a letter or"
                                f" digit, and not be {', '.join(map(repr, RESERVED_NAMES))} (it names a directory of the"
                                f" output: at most {MAX_NAME_LENGTH} characters)")
            if not ds.data_file_list and not ds.pubsub_subscription:
                problems.append(f"{where}: set `data_files` (or `pubsub_subscription` for streaming)")
            spec = self._tokenizer_spec(ds)
            if spec is None:
                problems.append(f"{where}: no tokenizer: set `default_tokenizer` or the dataset's `tokenizer`")
            elif isinstance(spec, TokenizerConfig) and spec.max_length is not None and spec.max_length <= 0:
                problems.append(f"{where}: tokenizer max_length must be positive, got {spec.max_length}")
            problems.extend(f"{where}: {p}" for p in _dataset_source_problems(ds))
            if ds.num_rows is not None and ds.num_rows < 0:
                problems.append(f"{where}: `num_rows` must be >= 0, got {ds.num_rows}")
            if ds.content_field in ds.additional_fields:
                problems.append(f"{where}: `additional_fields` must not repeat `content_field` '{ds.content_field}'")
            reserved = {"input_ids", "attention_mask", "loss_mask", "segment_ids", "positions"}
            for field in sorted(reserved.intersection(ds.additional_fields)):
                problems.append(f"{where}: additional field '{field}' collides with an output column")
        tok = self.tokenize
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
        if self.ray is not None and self.ray.num_workers is not None and self.ray.num_workers <= 0:
            problems.append(f"ray.num_workers must be positive, got {self.ray.num_workers}")
        if tok.stride is not None and tok.truncation_mode != "window":
            problems.append("tokenize.stride only applies to truncation 'window'")
        elif tok.stride is not None and tok.max_length is not None and not 0 <= tok.stride < tok.max_length:
            problems.append(f"tokenize.stride (the overlap of consecutive windows) must be in [0, max_length ="
                            f" {tok.max_length}), got {tok.stride}")
        try:
            tok.max_document_byte_limit
        except ValueError as e:
            problems.append(f"tokenize.max_document_bytes: {e}")
        if self.max_rejected_fraction is not None and not 0 <= self.max_rejected_fraction <= 1:
            problems.append(f"max_rejected_fraction must be within [0, 1], got {self.max_rejected_fraction}")
        if not 0 < self.pack.seq_length <= MAX_SEQ_LENGTH:
            problems.append(f"pack.seq_length must be in [1, {MAX_SEQ_LENGTH:,}], got {self.pack.seq_length}")
        if self.pack.max_segments_per_row is not None and self.pack.max_segments_per_row <= 0:
            problems.append(f"pack.max_segments_per_row must be positive, got {self.pack.max_segments_per_row}")
        if not 0 < self.pack.pool_size <= MAX_POOL_SIZE:
            problems.append(f"pack.pool_size must be in [1, {MAX_POOL_SIZE}], got {self.pack.pool_size}")
        if self.pack.pad_token_id is not None and self.pack.pad_token_id < 0:
            problems.append(f"pack.pad_token_id must be >= 0, got {self.pack.pad_token_id}")
        if self.pack.eos_token_id is not None and self.pack.eos_token_id < 0:
            problems.append(f"pack.eos_token_id must be >= 0, got {self.pack.eos_token_id}")
        if self.pack.num_packers is not None and not 0 < self.pack.num_packers <= MAX_POOL_SIZE:
            problems.append(f"pack.num_packers must be in [1, {MAX_POOL_SIZE}], got {self.pack.num_packers}")
        load = self.load
        if load.batch_size <= 0:
            problems.append(f"load.batch_size must be positive, got {load.batch_size}")
        if load.prefetch_buffer_size < 0:
            problems.append(f"load.prefetch_buffer_size must be >= 0, got {load.prefetch_buffer_size}")
        if self.mix is not None:
            problems.extend(self.mix.problems(names))
        stream = self.streaming
        if stream.window_seconds <= 0:
            problems.append(f"streaming.window_seconds must be positive, got {stream.window_seconds}")
        if stream.allowed_lateness_seconds < 0:
            problems.append(f"streaming.allowed_lateness_seconds must be >= 0, got {stream.allowed_lateness_seconds}")
        if stream.early_firing_seconds is not None and stream.early_firing_seconds <= 0:
            problems.append(f"streaming.early_firing_seconds must be positive, got {stream.early_firing_seconds}")
        save = self.save
        if not save.output_dir:
            problems.append("save.output_dir is empty")
        if save.codec not in _FORMAT_COMPRESSIONS[save.format]:
            problems.append(f"save.compression '{save.codec}' is not supported by format"
                            f" '{save.format}' (choose from {', '.join(_FORMAT_COMPRESSIONS[save.format])})")
        if save.num_shards is not None and not 0 < save.num_shards <= MAX_SHARDS:
            problems.append(f"save.num_shards must be in [1, {MAX_SHARDS:,}], got {save.num_shards}")
        try:
            save.max_shard_bytes
        except ValueError as e:
            problems.append(f"save.max_shard_size: {e}")
        if not 0 < save.row_group_size <= MAX_ROW_GROUP_SIZE:
            problems.append(f"save.row_group_size must be in [1, {MAX_ROW_GROUP_SIZE:,}], got {save.row_group_size}")
        if save.format in TOKEN_FILE_FORMATS:
            problems.extend(self._token_file_problems())
        problems.extend(save.split_problems())
        if save.split_fractions() is not None and any(ds.pubsub_subscription for ds in self.datasets):
            problems.append("save.validation_fraction / save.splits are for batch runs; the streaming pipeline does"
                            " not split yet")
        if save.push_to_hub and not save.hub_repo_id:
            problems.append("save.push_to_hub needs save.hub_repo_id (e.g. 'username/dataset')")
        if save.push_to_hub and any(ds.pubsub_subscription for ds in self.datasets):
            problems.append("save.push_to_hub is for batch runs; the streaming pipeline commits windows as they close")
        if self.static_mix is not None and save.split_fractions() is not None:
            problems.append("save.validation_fraction / save.splits with a `mix` section is not supported yet: split"
                            " each dataset in its own run and mix at read time (MixedReader)")
        return problems

    def _token_file_problems(self) -> list[str]:
        """`bin` and `npz` hold token arrays only; `bin` is a stream readers cut windows from."""
        found = []
        fmt = self.save.format
        if fmt == "megatron" and self.pack.enabled:
            found.append("save.format 'megatron' holds documents (Megatron-LM, NeMo and MaxText build their own"
                         " samples from them): set pack.enabled to false")
        if fmt == "bin" and self.pack.enabled:
            found.append("save.format 'bin' writes a flat token stream (readers cut windows from it): set"
                         " pack.enabled to false, or use a row format (parquet, arrow, npz) for packed rows")
        for i, ds in enumerate(self.datasets):
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
    if ds.split is not None and ds.type != "huggingface":
        found.append("`split` is for type 'huggingface' (local files are listed in `data_files`)")
    callback = ds.format_callback
    if isinstance(callback, str):
        from easydata.io.record_format import resolve_callable

        try:
            resolve_callable(callback)
        except (ImportError, AttributeError, ValueError) as e:
            found.append(f"format_callback {callback!r}: {e}")
    elif callback is not None and not callable(callback):
        found.append(f"format_callback must be a function or 'module:function', got {type(callback).__name__}")
    return found


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
    "ChatStageConfig": ("template", "messages_field", "assistant_only_loss"),
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


def callable_name(value: Any) -> str:
    """JSON form of a function in a config: its `"module:qualname"` (what `resolve_callable` reads)."""
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _callable_identity(value: Any) -> str:
    """`callable_name` plus a hash of the function's code, so the fingerprint changes with it."""
    name = callable_name(value)
    code = getattr(value, "__code__", None)
    if code is None:
        return name
    digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode() + repr(code.co_names).encode())
    return f"{name}#{digest.hexdigest()[:12]}"


def _derived_name(ds: DatasetConfig) -> str:
    """A dataset name from its files: the last directory without glob characters, else the file's
    stem (`data/web/*.jsonl` -> `web`, `corpus.jsonl.gz` -> `corpus`, hub `owner/name` -> `name`)."""
    files = ds.data_file_list
    if not files:
        return "dataset"
    first = files[0].split("://", 1)[-1].rstrip("/")
    if ds.type == "huggingface":
        return first.split("/")[-1]
    parts = [p for p in first.split("/") if p not in ("", ".", "..")]
    if not parts:
        return "dataset"
    stem = parts[-1]
    if any(c in stem for c in "*?[") or len(parts) > 1 and "." in stem:
        directories = [p for p in parts[:-1] if not any(c in p for c in "*?[")]
        if directories:
            return directories[-1]
    return re.sub(r"(\.(gz|zst|bz2|jsonl|json|parquet|arrow|csv|tsv|txt))+$", "", stem) or stem


def name_datasets(datasets: list[DatasetConfig]) -> list[DatasetConfig]:
    """Gives every unnamed dataset a name (`_derived_name`, made a safe, unique path component)."""
    taken = {d.name for d in datasets if d.name is not None}
    named = []
    for i, ds in enumerate(datasets):
        if ds.name is None:
            base = re.sub(r"[^A-Za-z0-9_.\-]", "_", _derived_name(ds)).lstrip("_.-") or f"dataset_{i}"
            if not safe_name(base):
                base = f"dataset_{i}"
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base}_{n}"
            taken.add(name)
            ds = dataclasses.replace(ds, name=name)
        named.append(ds)
    return named


#: The longest dataset name: it names a directory of the output and the files under `rejected/` (file systems
#: refuse components over 255 bytes, and a dead-letter file adds a suffix to the name).
MAX_NAME_LENGTH = 100


def safe_name(name: str) -> bool:
    """True when `name` can be a dataset's directory in the output: one plain path component of at most
    `MAX_NAME_LENGTH` characters that no file of the output's own (manifest, dead letters, the mix, hidden
    staging and lock files) uses."""
    return (isinstance(name, str) and len(name) <= MAX_NAME_LENGTH
            and bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", name)) and name not in RESERVED_NAMES)


# ---- generic dict -> dataclass conversion with complete error reporting ----------------------------


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    """Converts plain data into `tp`, appending a message per problem instead of raising."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{where or 'config'}: expected a mapping, got {type(value).__name__}")
            return None
        return _convert_dataclass(tp, value, where, problems)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            result = _convert(arg, value, where, trial)
            if not trial:
                return result
        non_none = [a for a in args if a is not type(None)]
        literals = [a for a in non_none if typing.get_origin(a) is Literal]
        if len(non_none) == 1 or isinstance(value, str) and len(literals) == 1:
            # Optional[X], or a string for a Literal-or-bool field: report X's own, more precise, problem
            return _convert(literals[0] if isinstance(value, str) and literals else non_none[0], value, where, problems)
        problems.append(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return None
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            hint = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            problems.append(f"{where}: must be one of {', '.join(map(str, allowed))}; got {value!r}{suggestion}")
            return None
        return value
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {type(value).__name__}")
            return None
        return [_convert(item_type, v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {type(value).__name__}")
            return None
        return {_convert(key_type, k, f"{where}", problems): _convert(value_type, v, f"{where}.{k}", problems)
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        problems.append(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return None
    return value


def _convert_dataclass(cls: Any, data: dict[str, Any], where: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            problems.append(f"unknown key '{path}'{suggestion}")
            continue
        kwargs[key] = _convert(hints[key], value, path, problems)
    missing = [name for name, f in fields.items()
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               and name not in data]
    for name in missing:
        problems.append(f"missing required key '{where + '.' if where else ''}{name}'")
    if missing:
        return None
    try:
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - guarded by the checks above
        problems.append(f"{where or 'config'}: {e}")
        return None


# ---- files and overrides -------------------------------------------------------------------------


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise json.JSONDecodeError(f"duplicate key {repeated[0]!r} (a key may appear once per mapping)", "", 0)
    return dict(pairs)


def parse_mapping_text(text: str, *, json_text: bool = False) -> Any:
    """YAML (or JSON) text -> data; a key repeated in one mapping is an error, not "last one wins".

    Raises:
      yaml.YAMLError / json.JSONDecodeError: with the repeated key and its line.
    """
    import yaml

    if json_text:
        return json.loads(text, object_pairs_hook=_unique_json_object)

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_nodes(node)
        if expanded > MAX_CONFIG_NODES:
            raise yaml.YAMLError(f"its aliases expand to more than the {MAX_CONFIG_NODES:,} values a config may"
                                 " hold (a YAML alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()


#: The most values (scalars, lists, mappings) a config may expand to once YAML aliases are followed, and
#: the largest config file read: a few anchors can otherwise expand to billions of values (4 GB and growing).
MAX_CONFIG_NODES = 1_000_000
MAX_CONFIG_BYTES = 16 * 2**20


def _expanded_nodes(root: Any) -> int:
    """How many values a composed YAML node stands for with every alias expanded, computed per distinct
    node (an alias is the same node object again), so a bomb is measured without being expanded."""
    import yaml

    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        else:
            sizes[id(node)] = 1
            continue
        if not children_done:
            if id(node) in visiting:
                return 10 * MAX_CONFIG_NODES  # an alias inside its own anchor: endless
            visiting.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        visiting.discard(id(node))
        sizes[id(node)] = min(1 + sum(sizes.get(id(child), 1) for child in children), 10 * MAX_CONFIG_NODES)
    return sizes[id(root)]


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Reads a YAML or JSON config file into a dict, with one-line errors."""
    import yaml

    import stat

    path = Path(path)
    too_big = f"more than the {MAX_CONFIG_BYTES // 2**20} MiB a config may be"
    try:
        mode = path.stat().st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # would block until a writer comes
            raise ConfigError(f"config file '{path}' is not a regular file")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file '{path}' is {path.stat().st_size:,} bytes, {too_big}")
        with open(path, "rb") as f:  # read bounded: a device (/dev/zero) or /proc file reports size 0
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file '{path}' holds {too_big}")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file '{path}' does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file '{path}' is a directory") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte {e.start:,}: {e.reason})") from None
    text = text.removeprefix("\ufeff")  # a BOM an editor wrote
    try:
        data = parse_mapping_text(text, json_text=path.suffix == ".json")
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        detail = str(e).replace("\n", " ")
        raise ConfigError(f"config file '{path}' is not valid {'JSON' if path.suffix == '.json' else 'YAML'}:"
                          f" {detail}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping at the top level, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies `key.path=value` overrides (values parsed as YAML); list items by index: `datasets.0.name`."""
    import copy

    import yaml

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key.path=value, got '{item}'")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set expects key.path=value, got '{item}'")
        try:
            value = parse_mapping_text(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            if "alias bomb" in str(e):
                raise ConfigError(f"--set {item[:60]}: {e}") from None
            value = raw
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            nxt = parts[depth + 1]
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {key}: no list item '{part}'")
                node = node[int(part)]
            elif not isinstance(node, dict):
                raise ConfigError(f"--set {key}: '{'.'.join(parts[:depth])}' is not a mapping")
            else:
                if node.get(part) is None:
                    node[part] = [] if nxt.isdigit() else {}
                node = node[part]
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) > len(node):
                raise ConfigError(f"--set {key}: no list item '{last}'")
            if int(last) == len(node):
                node.append(value)
            else:
                node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {key}: '{'.'.join(parts[:-1])}' is not a mapping")
    return data
