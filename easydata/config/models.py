"""The config models: the EasyData vocabulary as frozen, keyword-only dataclasses, one per stage
(`TokenizerConfig`, `DatasetConfig`, `TokenizeStageConfig`, `ChatStageConfig`, `MixStageConfig`,
`StreamingConfig`, `PackStageConfig`, `SaveStageConfig`, `LoadStageConfig`, `RayConfig`), the
enumerations each written once (the fields' `Literal` types; the tuples derive from them), the limits,
and dataset naming. The whole job is `easydata.config.pipeline.PipelineConfig`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from typing import Any, Literal, Optional, Union



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
FORMAT_COMPRESSIONS = {
    "parquet": COMPRESSIONS,
    "arrow": ("none", "zstd", "lz4"),
    "jsonl": ("none", "gzip", "zstd"),
    "bin": ("none",),
    "megatron": ("none",),
    "npz": ("none", "gzip"),
    "tfrecord": ("none", "gzip"),
    "arrayrecord": ("none", "zstd"),
}
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
      split: the split of a `huggingface` dataset, or of a data directory whose files are named by split as
        the Hub names them (`data/train-00000-of-00001.parquet`, `test.jsonl`): default `train`
        (`easydata.io.data_directories`).
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


#: What the chat renderer passes a template itself (`easydata.text.chat.ChatRenderer`): no `template_kwargs` key.
TEMPLATE_ARGUMENTS = frozenset({"messages", "tools", "add_generation_prompt"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatStageConfig:
    """Chat rendering for datasets whose content is a list of messages.

    Attributes:
      messages_field: the field holding the messages.
      template: jinja template text or a path to a file with it (null: the tokenizer's own).
      assistant_only_loss: emit a `loss_mask` that is 1 only on assistant tokens.
      template_kwargs: more variables for the template, as `transformers`' `apply_chat_template(**kwargs)`
        passes them: `date_string` (Llama 3.1-3.3), `enable_thinking` (Qwen3), `reasoning_effort` (gpt-oss).
    """

    messages_field: str = "messages"
    template: Optional[str] = None
    assistant_only_loss: bool = True
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


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
        found = []  # a weight schedule: `easydata.config.schedule`, as the top-level `schedule`
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
    taken = {d.name.lower() for d in datasets if isinstance(d.name, str)}  # one directory on macOS whatever the case
    named = []
    for i, ds in enumerate(datasets):
        if ds.name is None:
            base = re.sub(r"[^A-Za-z0-9_.\-]", "_", _derived_name(ds)).lstrip("_.-") or f"dataset_{i}"
            if not safe_name(base):
                base = f"dataset_{i}"
            name, n = base, 1
            while name.lower() in taken:
                n += 1
                name = f"{base}_{n}"
            taken.add(name.lower())
            ds = dataclasses.replace(ds, name=name)
        named.append(ds)
    return named


#: The longest dataset name: it names a directory of the output and the files under `rejected/` (file systems
#: refuse components over 255 bytes, and a dead-letter file adds a suffix to the name).
MAX_NAME_LENGTH = 100


def safe_name(name: str) -> bool:
    """True when `name` can be a dataset's directory in the output: one plain path component of at most
    `MAX_NAME_LENGTH` characters that no file of the output's own (manifest, dead letters, the mix, hidden
    staging and lock files) uses, in any case (`Rejected/` is `rejected/` on macOS and Windows file systems)."""
    return (isinstance(name, str) and len(name) <= MAX_NAME_LENGTH
            and bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", name)) and name.lower() not in RESERVED_NAMES)
