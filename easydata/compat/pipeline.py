"""The fluent `Pipeline`: EasyData's `.source().tokenize().mix().pack().save().load().build()` as the
front door to the Beam job and the reader.

Each stage call records its settings and updates the `{name: source}` dict that `get_data()` shows:

- `source()`: a file / Hub source per dataset (`easydata.compat.sources`), read lazily.
- `tokenize()`: `TokenizedShardedSource`s (tokenized on the fly with the job's own tokenizer code).
- `mix()`, `pack()`, `save()`: sources over the job's output (`JobOutputSource`): the Beam job runs
  once, the first time one of them is read, or at `build()`.
- `load()`: loaders giving training batches from the output through `easydata.reader.TokenReader`
  (numpy dicts of shape `(batch_size, seq_length)`; JAX arrays with `prefetch_to_device`).
- `build()`: runs what was asked and returns the first entry, as EasyData does: after `load()`, an
  iterator of batches; otherwise the output (or lazy) source.

Only the stages called shape the job (EasyData's semantics): `pack()` packs, `mix()` mixes, `save()`
writes to `save.output_dir` (and each dataset's `save_path`). Without `save()` the job writes into
a cache keyed by the config's fingerprint (`cache_path` of the first dataset, else
`$EASYDATA_CACHE/pipelines`, default `~/.cache/easydata-beam/pipelines`), and a later pipeline with the same config and unchanged input files
reads it again instead of running. `Pipeline(config).run()` runs the config as it is, like
`easydata run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
import uuid
from typing import Any, Iterator, Optional, Sequence

from easydata.compat.sources import (FilesBackedSource, HuggingFaceShardedSource, OutputShardedSource,
                                     source_for_files)
from easydata.compat.transforms import TokenizedShardedSource
from easydata.config import (DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig, PipelineConfig,
                             SaveStageConfig, TokenizeStageConfig)
from easydata.core.protocols import BaseStage, PipelineContext, ShardedDataSource
from easydata.errors import ConfigError, OutputInUse
from easydata.ops.mixing import MIXED_NAME

__all__ = ["Pipeline", "JobOutputSource", "BatchLoader", "create_pipeline", "tokenize_and_save", "default_cache_dir"]


_logger = logging.getLogger(__name__)
#: How often a process waiting for another to prepare the same cached pipeline looks again.
PREPARING_POLL_SECONDS = 2.0


def default_cache_dir() -> str:
    """Where prepared outputs are cached: `pipelines/` in easydata-beam's cache (`$EASYDATA_CACHE`,
    default `~/.cache/easydata-beam`, which also holds the default job's sample corpus)."""
    from easydata.cache import cache_root

    return os.path.join(str(cache_root()), "pipelines")


def _job_sources(job: Any) -> dict[str, Any]:
    """The job's outputs as sources: one per output, or with a `weight_schedule` (mixed when read, step by
    step) the one `mixed` source EasyData's page promises, a `MixedShardedSource` over the datasets."""
    sources = {name: JobOutputSource(job, name) for name in job.outputs}
    if not job.schedule:
        return sources
    from easydata.compat.mixing import MixedShardedSource, WeightScheduler

    mix = job.config.mix
    return {MIXED_NAME: MixedShardedSource(sources, weight_scheduler=WeightScheduler(job.schedule,
                                                                                      mix.weight_schedule_type),
                                           seed=job.config.mix_seed)}


def _stage_config(cls: type, current: Any, config: Any, settings: dict[str, Any]) -> Any:
    """A stage's settings: a given config object, else the current one, with keyword changes."""
    if config is not None and not isinstance(config, cls):
        raise TypeError(f"expected a {cls.__name__}, got {type(config).__name__}")
    base = config if config is not None else (current if current is not None else cls())
    return dataclasses.replace(base, **settings) if settings else base


class Pipeline:
    """Fluent builder over a `PipelineConfig`; each stage method returns the pipeline itself."""

    def __init__(self, config: PipelineConfig, *, beam_args: Optional[Sequence[str]] = None,
                 show_progress: bool = False):
        self._config = config
        self.beam_args, self.show_progress = list(beam_args or []), show_progress
        self._context = PipelineContext(config=config, seed=config.seed)
        self._data: Optional[dict[str, Any]] = None
        self._stages: list[str] = []
        self._called: set[str] = set()
        self._job: Optional["_Job"] = None

    @classmethod
    def from_config(cls, config: PipelineConfig | dict[str, Any] | str, **options: Any) -> "Pipeline":
        """From a config object, a plain dict, or a YAML/JSON file path; `beam_args=[...]` (Beam flags
        such as `--runner`) and `show_progress=True` apply to the job."""
        if isinstance(config, str):
            config = PipelineConfig.from_yaml(config)
        elif isinstance(config, dict):
            config = PipelineConfig.from_dict(config)
        return cls(config, **options)

    # ---- state ---------------------------------------------------------------------------------

    @property
    def config(self) -> PipelineConfig:
        """The config with every stage's settings applied so far."""
        return self._config

    def get_data(self) -> dict[str, Any]:
        """The current `{name: source or loader}` (empty before `source()`)."""
        return dict(self._data or {})

    def get_context(self) -> PipelineContext:
        return self._context

    def get_stages(self) -> list[str]:
        return list(self._stages)

    def _ensure_data(self) -> dict[str, Any]:
        if self._data is None:
            raise RuntimeError("Call source() before other pipeline stages")
        return self._data

    def _update(self, stage: str, **changes: Any) -> None:
        if changes:
            self._config = dataclasses.replace(self._config, **changes)
            self._context.config = self._config
        self._called.add(stage)
        self._stages.append(stage)
        self._job = None  # the job depends on every stage's settings

    # ---- stages --------------------------------------------------------------------------------

    def source(self, *datasets: DatasetConfig | dict[str, Any]) -> "Pipeline":
        """Opens a source per dataset (those of the config, plus any given here)."""
        if self._data is not None:
            raise RuntimeError("source() has already been called")
        added = [d if isinstance(d, DatasetConfig) else DatasetConfig(**d) for d in datasets]
        self._update("source", **({"datasets": [*self._config.datasets, *added]} if added else {}))
        self._data = {ds.name: _dataset_source(ds) for ds in self._config.datasets}
        return self

    def tokenize(self, config: Optional[TokenizeStageConfig] = None, **settings: Any) -> "Pipeline":
        """Tokenizes every dataset (its own tokenizer, else the default)."""
        data = self._ensure_data()
        self._update("tokenize", tokenize=_stage_config(TokenizeStageConfig, self._config.tokenize, config, settings))
        by_name = {ds.name: ds for ds in self._config.datasets}
        self._data = {name: self._tokenized(by_name[name], source) if name in by_name else source
                      for name, source in data.items()}
        return self

    def _tokenized(self, ds: DatasetConfig, source: Any) -> TokenizedShardedSource:
        tok = self._config.tokenize_for(ds)
        return TokenizedShardedSource(source, self._config.tokenizer_for(ds),
                                      max_length=tok.max_length if tok.truncation_mode != "none" else None,
                                      content_field=ds.content_field, add_special_tokens=tok.add_bos is not False,
                                      add_eos=tok.add_eos, remove_columns=tok.remove_columns,
                                      batch_size=tok.batch_size, engine=tok.engine)

    def mix(self, config: Optional[MixStageConfig] = None, **settings: Any) -> "Pipeline":
        """Mixes the datasets into one output, `mixed` (a single dataset: nothing to mix). Fixed
        weights are shares of output tokens (equal when none are given); a `weight_schedule` is
        applied step by step when the output is read (`load()`)."""
        data = self._ensure_data()
        names = [ds.name for ds in self._config.datasets]
        mix = _stage_config(MixStageConfig, self._config.mix, config, settings)
        if not mix.weight_schedule and self._config.schedule and not mix.weights:
            mix = dataclasses.replace(mix, weight_schedule=list(self._config.schedule))
        if not mix.weights and not mix.weight_schedule:
            mix = dataclasses.replace(mix, weights={name: 1.0 for name in names})
        self._update("mix", mix=mix)
        if len(data) > 1:
            self._data = _job_sources(self._ensure_job())
        return self

    def pack(self, config: Optional[PackStageConfig] = None, **settings: Any) -> "Pipeline":
        """Packs documents into rows of exactly `seq_length` tokens (when `enabled`), losing none."""
        self._ensure_data()
        self._update("pack", pack=_stage_config(PackStageConfig, self._config.pack, config, settings))
        self._data = _job_sources(self._ensure_job())
        return self

    def save(self, config: Optional[SaveStageConfig] = None, **settings: Any) -> "Pipeline":
        """Writes the output now (when `enabled`): to `save.output_dir`, and each dataset with a
        `save_path` there; then uploads it when `push_to_hub`."""
        self._ensure_data()
        self._update("save", save=_stage_config(SaveStageConfig, self._config.save, config, settings))
        job = self._ensure_job()
        self._data = _job_sources(job)
        if job.saving:
            job.run()
        return self

    def load(self, config: Optional[LoadStageConfig] = None, **settings: Any) -> "Pipeline":
        """Turns every output into a loader of training batches (`BatchLoader`)."""
        self._ensure_data()
        self._update("load", load=_stage_config(LoadStageConfig, self._config.load, config, settings))
        job = self._ensure_job()
        if job.schedule:
            self._data = {MIXED_NAME: BatchLoader(job, None)}
        else:
            self._data = {name: BatchLoader(job, name) for name in job.outputs}
        return self

    def apply(self, stage: BaseStage) -> "Pipeline":
        """Runs a custom stage (`easydata.core.protocols.BaseStage`) on the current data."""
        data = self._ensure_data()
        self._data = stage.process(dict(data), self._context)
        self._stages.append(stage.name)
        return self

    def build(self, beam_args: Optional[Sequence[str]] = None, *, show_progress: bool = False) -> Any:
        """Runs what the stages asked for and returns the first entry of `get_data()`: after
        `load()`, an iterator of training batches; after `pack()`/`mix()`/`save()`, the output as a
        `JobOutputSource` (with `.manifest` and `.output_dir`); otherwise the lazy source."""
        data = self._ensure_data()
        if beam_args is not None:
            self.beam_args = list(beam_args)
        self.show_progress = self.show_progress or show_progress
        if self._job is not None:
            self._job.beam_args, self._job.show_progress = self.beam_args, self.show_progress
            self._job.run()
        first = next(iter(data.values()), None)
        return iter(first) if isinstance(first, BatchLoader) else first

    def plan(self) -> Any:
        """What the job would do, without running it (`easydata run --dry-run`)."""
        from easydata.run.dry_run import plan_report

        return plan_report(self._ensure_job().config if self._data is not None else self._config)

    def run(self, beam_args: Optional[Sequence[str]] = None, *, show_progress: bool = False) -> Any:
        """Runs the whole config as `easydata run` does (every configured stage); returns the
        `BatchResult` (`.manifest`, `.output_dir`, `.elapsed_seconds`)."""
        return _run_job(self._config, beam_args, show_progress)

    def _ensure_job(self) -> "_Job":
        if self._job is None:
            self._job = _Job(self._config, self._called)
            self._job.beam_args, self._job.show_progress = self.beam_args, self.show_progress
        return self._job


def _dataset_source(ds: DatasetConfig) -> ShardedDataSource:
    if ds.type == "huggingface":
        return HuggingFaceShardedSource(str(ds.data_files), split=ds.split or "train")
    if not ds.data_file_list:
        raise ConfigError(f"dataset '{ds.name}': set `data_files`")
    return source_for_files(ds.data_files, ds.type)


def _run_job(config: PipelineConfig, beam_args: Optional[Sequence[str]], show_progress: bool) -> Any:
    """Validates `config` (every problem at once) and runs the Beam job."""
    problems = config.validate()
    if problems:
        raise ConfigError(problems)
    from easydata.logs import quiet_beam_logs

    with quiet_beam_logs():
        from easydata.launch import run_batch_job

        return run_batch_job(config, _worker_args(config, list(beam_args or [])), show_progress=show_progress)


def _worker_args(config: PipelineConfig, args: list[str]) -> list[str]:
    """`tokenize.num_workers` / `ray.num_workers` as the local runner's worker count."""
    workers = config.tokenize.num_workers
    if config.ray is not None and config.ray.enabled and config.ray.num_workers:
        workers = config.ray.num_workers
    if workers and not any(a.startswith("--direct_num_workers") for a in args):
        args = [*args, f"--direct_num_workers={workers}"]
    return args


class _Job:
    """The one Beam job a pipeline's stages describe, and where its output lives."""

    def __init__(self, config: PipelineConfig, called: set[str]):
        self.base, self.beam_args, self.show_progress = config, [], False
        names = [ds.name for ds in config.datasets]
        mixed = "mix" in called and len(names) > 1
        mix = config.mix if mixed else None
        self.schedule = list(mix.weight_schedule) if mix is not None and not mix.static else []
        pack = config.pack if "pack" in called else dataclasses.replace(config.pack, enabled=False)
        save = config.save
        self.saving = "save" in called and save.enabled
        exports = {ds.name: ds.save_path for ds in config.datasets if ds.save_path} if self.saving else {}
        if mix is not None and mix.static:
            exports = {}
        formats = {ds.save_format for ds in config.datasets if ds.save_path and ds.save_format}
        if len(formats) > 1:
            raise ConfigError(f"datasets ask for different save_format values ({', '.join(sorted(formats))}); one job"
                              " writes one format: build a pipeline per format")
        fmt = formats.pop() if formats and exports else save.format
        self.exports = exports
        self.cached = not (self.saving and not exports)
        job = dataclasses.replace(config, mix=mix, pack=pack,
                                  save=dataclasses.replace(save, format=fmt, push_to_hub=False, output_dir="<cache>"))
        self.key = job.fingerprint()
        if self.cached:
            root = next((ds.cache_path for ds in config.datasets if ds.cache_path), None) or default_cache_dir()
            out = os.path.join(root, self.key)
            job = dataclasses.replace(job, save=dataclasses.replace(job.save, output_dir=out, overwrite=True))
        else:
            job = dataclasses.replace(job, save=dataclasses.replace(job.save, output_dir=save.output_dir))
        self.config = job
        self.reuse = config.tokenize.cache_tokenized and all(ds.cache_enabled for ds in config.datasets)
        self.outputs = [MIXED_NAME] if mix is not None and mix.static else names
        self.result: Any = None

    @property
    def output_dir(self) -> str:
        return self.config.save.output_dir

    def _inputs_file(self) -> str:
        return self.output_dir.rstrip("/") + ".inputs.json"

    def _input_versions(self) -> dict[str, str]:
        """What the cached output was made from: each input file's version and each tokenizer's content hash
        (tokenizer files replaced at the same path give other ids)."""
        from easydata.io.filesystems import expand_data_files, file_version
        from easydata.text.tokenizer import tokenizer_content_hash

        versions = {}
        for ds in self.config.datasets:
            name = self.config.tokenizer_for(ds).name_or_path
            versions[f"tokenizer:{name}"] = tokenizer_content_hash(name)
            if ds.type == "huggingface" or not ds.data_file_list:
                continue
            for path in expand_data_files(ds.data_file_list):
                versions[path] = file_version(path)
        return versions

    def _reusable(self) -> Optional[dict[str, Any]]:
        """The manifest of an earlier run of this very job over the same input files, if any."""
        from easydata.run.manifest import read_manifest

        try:
            manifest = read_manifest(self.output_dir)
        except Exception:  # no output (or a broken one): run
            return None
        if manifest.get("config_fingerprint") != self.config.fingerprint():
            return None
        if not self.cached:
            from easydata.text.tokenizer import tokenizer_content_hash

            made_with = {info.get("content_hash") for info in [manifest.get("tokenizer") or {},
                                                                *(manifest.get("tokenizers") or {}).values()]
                         if isinstance(info, dict)}
            current = {tokenizer_content_hash(self.config.tokenizer_for(ds).name_or_path) for ds in self.config.datasets}
            return manifest if current <= made_with else None
        try:
            with open(self._inputs_file(), encoding="utf-8") as f:
                recorded = json.load(f)
        except (OSError, ValueError):
            return None
        return manifest if recorded == self._input_versions() else None

    def run(self) -> Any:
        """Runs the job unless its output is already there; then the exports and the hub upload.

        A cached output is prepared by one process at a time: the processes of a multi-process training
        script that build the same pipeline wait for the first (`_preparing`), then read what it made.
        """
        if self.result is not None:
            return self.result
        with self._preparing():
            manifest = self._reusable() if self.reuse else None
            if manifest is None:
                versions = self._input_versions() if self.cached else None
                result = _run_job(self.config, self.beam_args, self.show_progress)
                manifest = result.manifest
                if versions is not None:
                    os.makedirs(os.path.dirname(self._inputs_file()) or ".", exist_ok=True)
                    with open(self._inputs_file(), "w", encoding="utf-8") as f:
                        json.dump(versions, f)
        if self.saving:
            from easydata.run.export import export_dataset

            for name, dest in self.exports.items():
                export_dataset(self.output_dir, name, dest, overwrite=self.base.save.overwrite)
            if self.exports:
                rest = [n for n in self.outputs if n not in self.exports]
                for name in rest:
                    export_dataset(self.output_dir, name, os.path.join(self.base.save.output_dir, name),
                                   overwrite=self.base.save.overwrite)
            if self.base.save.push_to_hub:
                from easydata.io.hub import push_output

                targets = list(self.exports.values()) or [self.output_dir]
                for target in targets:
                    push_output(target, str(self.base.save.hub_repo_id), private=self.base.save.hub_private,
                                token=self.base.save.hub_token)
        self.result = manifest
        return manifest

    @contextlib.contextmanager
    def _preparing(self) -> Iterator[None]:
        """Holds the cache entry's lock (`<entry>.preparing/`, `easydata.run.lock`) while this process checks,
        makes and records the entry, waiting while another live process holds it (its output is then reused);
        a lock whose holder died is taken over. Nothing for a pipeline that saves to its own output."""
        if not self.cached:
            yield
            return
        from easydata.run.lock import OutputLock, read_lock

        lock = OutputLock(self.output_dir.rstrip("/") + ".preparing", uuid.uuid4().hex[:12])
        unreadable, said = 0, False
        while True:
            try:
                lock.acquire()
                break
            except OutputInUse:
                holder = read_lock(lock.output_dir)
                unreadable = 0 if holder else unreadable + 1
                if unreadable > 3:  # a lock that cannot be read never expires: say so (its message says what to do)
                    raise
                if unreadable == 0 and not said:
                    _logger.warning("another process is preparing this pipeline's data (run %s, host %s, pid %s);"
                                    " waiting for it to use what it makes", holder.get("run_id"), holder.get("host"),
                                    holder.get("pid"))
                    said = True
                time.sleep(PREPARING_POLL_SECONDS)
        try:
            yield
        finally:
            lock.release()

    def location(self, name: str) -> tuple[str, Optional[str]]:
        """Where output `name` can be read: `(directory, name within it)`. With `save.splits` a dataset's
        output is its first split (`train`), the one training reads; `<name>/<split>` names any other."""
        if name in self.exports:
            return self.exports[name], name
        fractions = self.config.save.split_fractions()
        if fractions is not None and "/" not in name:
            from easydata.ops.splits import split_output_name

            name = split_output_name(name, next(iter(fractions)))
        return self.output_dir, name


class JobOutputSource(FilesBackedSource):
    """One output of a pipeline's job as a sharded source (the job runs on first access)."""

    def __init__(self, job: _Job, name: str):
        self.job, self.name = job, name
        self._files: Optional[OutputShardedSource] = None

    @property
    def manifest(self) -> dict[str, Any]:
        return self.job.run()

    @property
    def output_dir(self) -> str:
        self.job.run()
        return self.job.location(self.name)[0]

    @property
    def files(self) -> Any:
        if self._files is None:
            self.job.run()
            directory, name = self.job.location(self.name)
            self._files = OutputShardedSource(directory, name=name)
        return self._files

    def __len__(self) -> int:
        return int(self.manifest["datasets"][self.job.location(self.name)[1]]["rows"])

    def __repr__(self) -> str:
        return f"JobOutputSource({self.name!r}, output_dir={self.job.output_dir!r})"


class BatchLoader:
    """Training batches of one output (or, with a weight schedule, of all mixed step by step).

    Each iteration runs the job if needed and reads with `TokenReader` (`MixedReader` for a
    schedule): dicts of numpy arrays of shape `(batch_size, seq_length)`, or JAX arrays when
    `load.prefetch_to_device`.
    """

    def __init__(self, job: _Job, name: Optional[str]):
        self.job, self.name = job, name

    def reader(self) -> Any:
        from easydata.reader import MixedReader, TokenReader

        self.job.run()
        config, load = self.job.config, self.job.config.load
        options = dict(batch_size=load.batch_size, shuffle=load.shuffled,
                       seed=load.seed if load.seed is not None else config.seed,
                       num_epochs=load.num_epochs if load.num_epochs is not None else 1,
                       drop_remainder=load.drops_remainder, layout=load.layout, process_index=0, process_count=1,
                       prefetch=load.prefetch_buffer_size if load.prefetch_enabled else 0)
        if self.name is None:
            readers = {}
            for name in self.job.outputs:
                directory, inner = self._where(name)
                readers[name] = TokenReader(directory, **options, name=inner, seq_length=self._seq_length(name))
            mix = config.mix
            return MixedReader(readers, mix.weight_schedule, mix.weight_schedule_type, seed=options["seed"])
        directory, name = self._where(self.name)
        return TokenReader(directory, **options, name=name, seq_length=self._seq_length(self.name))

    def _where(self, name: str) -> tuple[str, Optional[str]]:
        directory, inner = self.job.location(name)
        return (directory, inner) if directory == self.job.output_dir else (directory, None)

    def _seq_length(self, name: str) -> Optional[int]:
        """Packed rows have their length; unpacked ones are padded (or cut) to the dataset's
        `max_length`, else to the longest row."""
        config = self.job.config
        if config.pack.enabled:
            return None
        ds = next((d for d in config.datasets if d.name == name), None)
        if ds is not None and config.tokenize_for(ds).max_length is not None:
            return config.tokenize_for(ds).max_length
        return _longest_row(*self._where(name), config.save.format)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        reader = self.reader()
        load = self.job.config.load
        drop = set() if self.job.base.pack.include_segment_ids or not self.job.config.pack.enabled \
            else {"segment_ids", "positions"}
        batches = (({k: v for k, v in batch.items() if k not in drop} if drop else batch) for batch in reader)
        if not load.prefetch_to_device:
            return batches
        import jax

        return (jax.device_put(batch) for batch in batches)


def _longest_row(directory: str, name: Optional[str], fmt: str) -> int:
    """The most tokens any row of an output holds (unpacked rows have different lengths)."""
    import pyarrow.compute as pc

    from easydata.io.formats import iter_shard_batches

    files = OutputShardedSource(directory, name=name)
    longest = 0
    for shard in files.shard_names:
        for batch in iter_shard_batches(shard, fmt, columns=["input_ids"]):
            if batch.num_rows:
                longest = max(longest, pc.max(pc.list_value_length(batch.column(0))).as_py() or 0)
    return max(longest, 1)


def create_pipeline(datasets: Sequence[DatasetConfig | dict[str, Any]], default_tokenizer: Optional[str] = None,
                    **kwargs: Any) -> Pipeline:
    """A `Pipeline` over these datasets (configs or dicts) with `PipelineConfig` keyword settings."""
    configs = [d if isinstance(d, DatasetConfig) else DatasetConfig(**d) for d in datasets]
    return Pipeline(PipelineConfig(datasets=configs, default_tokenizer=default_tokenizer, **kwargs))


def tokenize_and_save(data_files: str | Sequence[str], tokenizer: str, output_path: Optional[str] = None,
                      output_format: Optional[str] = None, max_length: Optional[int] = None, *,
                      output_dir: Optional[str] = None, format: Optional[str] = None, name: Optional[str] = None,
                      content_field: str = "text", num_shards: Optional[int] = None, seed: int = 42,
                      overwrite: bool = False, beam_args: Optional[Sequence[str]] = None, **dataset: Any) -> Any:
    """Tokenizes files and saves them in one call.

    EasyData's form, `tokenize_and_save(data_files, tokenizer, output_path, output_format,
    max_length)`, writes the shards directly into `output_path` (with a manifest), documents cut to
    `max_length` tokens. This package's form, `output_dir=`, writes the standard layout
    `output_dir/<name>/part-*` (the `easydata tokenize` command). Returns the run's `BatchResult`.
    """
    if (output_path is None) == (output_dir is None):
        raise ConfigError("tokenize_and_save needs output_path (EasyData's flat layout) or output_dir, not both")
    fmt = output_format or format or "parquet"
    ds = {"data_files": data_files, "content_field": content_field, **dataset}
    if name is not None:
        ds["name"] = name
    elif output_dir is not None:
        ds["name"] = "data"
    config = PipelineConfig.from_dict({
        "seed": seed, "default_tokenizer": tokenizer, "datasets": [ds],
        "tokenize": {"max_length": max_length},
        "save": {"output_dir": output_dir or output_path, "format": fmt, "num_shards": num_shards,
                 "overwrite": overwrite},
    })
    if output_dir is not None:
        return _run_job(config, beam_args, False)
    config = config.replace(datasets=[dataclasses.replace(config.datasets[0], save_path=output_path)])
    return Pipeline(config, beam_args=beam_args).source().tokenize().save().build()
