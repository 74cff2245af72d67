"""Everything decided before a batch job starts: input splits, tokenizers, engines, staging, group counts.

`plan_run` does all checks a user can fail (config, files, tokenizers, output directory) in the
launching process, so mistakes end with one clear line before any worker starts, and records what
the workers and the final commit need in a small, picklable `RunPlan`; it writes nothing. The dry
run shares its checks and per-dataset plan (`plan_datasets`). `open_output` is the one step with side
effects on the output (journal recovery, the output and staging directories, `run.json`, shipped
tokenizers), which the launcher runs under the output's lock before the job starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any, Callable, Optional

from easydata.run.staged_units import write_units
from easydata.run.checkpoint import UnitCheckpoint, completed_units, run_signature, unfinished_runs, write_run_info
from easydata.config import DatasetConfig, PipelineConfig, TokenizerConfig
from easydata.text.chat import ChatRenderer
from easydata.text.chat_templates import NAMED_TEMPLATES, named_template, template_file_text
from easydata.errors import ConfigError, InputError
from easydata.io.conversations import is_chat_field
from easydata.io.filesystems import file_version, read_bytes
from easydata.io.group_files import discard_group_files
from easydata.io.record_format import RecordFormatter
from easydata.io.staging import Staging
from easydata.ops.mixing import mix_budget, normalise_weights
from easydata.ops.pack_stage import resolve_pad_id
from easydata.run.output import check_output, new_run_id, prepare_output, staging_dir
from easydata.ops.sharding import DEFAULT_GROUP_BYTES, choose_num_groups
from easydata.io.sources import InputSplit, plan_input, plan_splits, text_bytes, work_units
from easydata.run.machine import parallel_readers, splits_per_dataset
from easydata.text.tokenizer import TokenizerHandle, TokenizerInfo, load_tokenizer

__all__ = ["DatasetPlan", "RunPlan", "plan_datasets", "plan_run", "open_output", "prepare_run"]

# Uncompressed Arrow bytes of token rows per input byte: ~1 token per 3-4 bytes of text, 4 bytes per
# id, 4 per mask. Only sizes the hash groups, so a rough figure is enough.
_ROW_BYTES_PER_INPUT_BYTE = 2.5
#: `(tokenizer, requested engine, sample texts, add_special_tokens) -> EngineChoice or None`.
EngineChooser = Callable[[TokenizerConfig, str, list, Optional[bool]], Any]


@dataclasses.dataclass(frozen=True)
class DatasetPlan:
    """One dataset's part of the run."""

    name: str
    splits: list[InputSplit]
    tokenizer: TokenizerConfig
    tokenizer_info: TokenizerInfo
    input_bytes: int  # the bytes its readers will consume (`easydata.io.sources.text_bytes`: compressed files
    # decompressed, a table's columns read uncompressed)
    num_groups: int
    pad_id: int
    chat_template: Optional[str] = None
    resumed_units: tuple[UnitCheckpoint, ...] = ()  # work units a resumed run loads instead of reading
    split_bytes: int = 0  # the size the splits were cut to (`easydata.io.sources.split_size`)
    readers: int = 1  # the parallel readers its large compressed files were cut into parts for (`plan_input`)
    engine: str = "hf"  # what encodes its plain documents (`easydata.text.engines.choose_engine`)
    engine_choice: Optional[dict[str, Any]] = None  # why, for the manifest

    def work_units(self, dataset: DatasetConfig) -> list[list[InputSplit]]:
        """Its work units (`easydata.io.sources.work_units`): `open_output` records them for the workers
        (`easydata.run.staged_units`), `ReadDocuments` reads them by id."""
        return work_units(dataset, self.splits, self.split_bytes)

    def unit_ids(self, dataset: DatasetConfig) -> list[int]:
        """The ids of its work units (each one's first split's index)."""
        return [unit[0].index for unit in self.work_units(dataset)]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What workers and the commit step need to know about the run."""

    run_id: str
    output_dir: str
    staging: str
    datasets: list[DatasetPlan]
    mix_num_groups: Optional[int] = None  # hash groups of the mixed output; None: no mix
    resumed: bool = False  # continues an interrupted run (its staging directory and checkpoints)
    unit_count: int = 0  # work units of all datasets
    lock_id: Optional[str] = None  # the run id in the output's lock (easydata.run.lock), checked before the commit
    shuffle_dictionary: Optional[bytes] = None  # zstd dictionary of the shuffle (easydata.ops.shuffle_dictionary)
    signature: str = ""  # what a resumed run must share with this one (`run.json`)
    input_versions: dict[str, str] = dataclasses.field(default_factory=dict)  # every input file's version
    shipped_tokenizers: tuple[tuple[str, str], ...] = ()  # (tokenizer, staged copy) `open_output` makes

    @property
    def resumed_unit_count(self) -> int:
        return sum(len(d.resumed_units) for d in self.datasets)

    def without_inputs(self) -> RunPlan:
        """The plan without its per-file parts (each dataset's splits, every input's version), as the steps
        after reading carry it in the job graph (100,000 input files are megabytes there); the splits are
        in the staging directory (`easydata.run.staged_units`)."""
        return dataclasses.replace(self, datasets=[dataclasses.replace(d, splits=[]) for d in self.datasets],
                                   input_versions={})

    @property
    def total_input_bytes(self) -> int:
        return sum(d.input_bytes for d in self.datasets)

    def tokenizer_manifest(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The main tokenizer's manifest entry, and per-dataset entries when they differ."""
        infos = {d.name: d.tokenizer_info.to_manifest() for d in self.datasets}
        first = next(iter(infos.values()))
        differ = any(info["content_hash"] != first["content_hash"] for info in infos.values())
        return first, (infos if differ else {})


def load_chat_template(value: Optional[str], own: Optional[dict[str, str]] = None) -> Optional[str]:
    """`chat.template`: one of the tokenizer's own templates by name (`own`, from `TokenizerInfo.chat_templates`:
    `tool_use`, `rag`, as `transformers`' `apply_chat_template(chat_template=<name>)` takes it), the name of a
    shipped template (`chatml`, `llama3`, `mistral`, `gemma`, `phi3`: `easydata.text.chat_templates`), a file
    holding a jinja template, or the template text itself; checked to parse.

    Raises:
      ConfigError: when it is neither a readable file nor a template that parses.
    """
    if value is None:
        return None
    if own and value in own:
        return own[value]
    named = named_template(value)
    if named is not None:
        return named
    if "{" not in value:  # not template text: must be a file
        try:
            value = template_file_text(read_bytes(value))
        except (InputError, OSError, UnicodeDecodeError) as e:
            names = f"one of the tokenizer's templates ({', '.join(sorted(own))}), " if own else ""
            raise ConfigError(f"chat.template '{value}' is neither {names}a shipped template"
                              f" ({', '.join(NAMED_TEMPLATES)}), a readable file nor a jinja template: {e}") from None
    try:
        ChatRenderer(value, {}, ())
    except ValueError as e:
        raise ConfigError(f"chat.template: {e}") from None
    return value


def check_batch_job(config: PipelineConfig) -> None:
    """The config checks of a batch run: `validate()`, and no Pub/Sub source (that is the streaming pipeline's).

    Raises:
      ConfigError: every problem.
    """
    problems = config.validate()
    if problems:
        raise ConfigError(problems)
    if any(ds.pubsub_subscription for ds in config.datasets):
        raise ConfigError("a dataset reads from `pubsub_subscription`: that needs the streaming pipeline"
                          " (`easydata run CONFIG --streaming`)")


def _on_this_machine(path: str) -> bool:
    """A path only this machine (or this process) can read: local files, `file://`, `memory://`."""
    from easydata.io.filesystems import local_path

    return local_path(path) is not None or path.startswith("memory://")


def check_reachable_by_workers(config: PipelineConfig, runner: str) -> None:
    """For a runner whose workers run on other machines (Dataflow, a portable runner, a remote Dask
    cluster): every input and the output must be on a store they reach. Local tokenizer files are not
    refused: the launcher ships them with the job (`prepare_run(ship_tokenizers=True)`).

    Raises:
      ConfigError: one line per path only this machine can read.
    """
    problems = [f"dataset '{ds.name}': data_files '{path}'" for ds in config.datasets if ds.type != "huggingface"
                for path in ds.data_file_list if _on_this_machine(path)]
    if _on_this_machine(config.save.output_dir):
        problems.append(f"save.output_dir '{config.save.output_dir}'")
    if problems:
        raise ConfigError([f"{p} is on this machine, which the workers of --runner={runner} cannot read: put it on a"
                           " store they reach (gs://, s3://, hf://)" for p in problems])


#: Records read from a dataset's input at planning to check its fields (`check_fields`).
FIELDS_SAMPLE = 50


def check_fields(config: PipelineConfig, ds: DatasetConfig, splits: list[Any]) -> None:
    """A dataset none of whose records sampled across its input (up to `FIELDS_SAMPLE`, from places spread over
    its splits, `easydata.io.sampling.spread`) has its content field is refused at planning, naming the fields
    its records have (a wrong `content_field` was found only after reading every input, and the run then
    failed for a dataset that wrote nothing). A sample with any usable record, or only other problems,
    passes: the run judges those per record. Skipped with `allow_empty_datasets`.

    An additional field that no sampled document has a value for is warned about (a misspelt name gave a
    column of nulls and no word of it).

    Raises:
      ConfigError: one line naming the dataset, the field and the fields found.
    """
    from easydata.io.sampling import spread
    from easydata.io.sources import read_split

    if config.allow_empty_datasets or not splits or ds.type == "txt" or RecordFormatter.for_dataset(ds) is not None:
        return
    places = [p for split in splits[::max(1, len(splits) // 4)][:4] for p in spread(split, 4)]
    per_place = max(1, FIELDS_SAMPLE // max(1, len(places)))
    rejects: list[Any] = []
    batches = [batch for place in places for batch in read_split(place, ds, batch_size=per_place, limit=per_place,
                                                                 rejects=rejects,
                                                                 messages_field=config.chat.messages_field)]
    documents = sum(map(len, batches))
    empty = [f for f in ds.additional_fields if all(v is None for batch in batches for v in batch.fields[f])]
    if documents and empty:
        which = f"field {empty[0]!r} holds" if len(empty) == 1 else f"fields {', '.join(map(repr, empty))} hold"
        print(f"easydata: warning: dataset '{ds.name}': additional {which} no value in any of the {documents}"
              f" documents sampled across its input (missing or null): check {'its' if len(empty) == 1 else 'their'}"
              " name" + "s" * (len(empty) > 1), file=sys.stderr)
    missing = [r for r in rejects if r.reason == f"missing content field '{ds.content_field}'"]
    if documents or not missing or len(missing) != len(rejects):
        return
    fields = sorted({f for r in missing for f in r.fields})
    raise ConfigError(f"dataset '{ds.name}': none of {sum(r.records for r in missing)} records sampled across its input has"
                      f" content_field '{ds.content_field}'" + (f" (their fields: {', '.join(fields)})" if fields
                                                              else "") + _field_advice(ds, fields))


def _field_advice(ds: DatasetConfig, fields: list[str]) -> str:
    """What to do when no record has the content field, judged from the fields the records have."""
    outer = ds.content_field.split(".", 1)[0]
    if "." in ds.content_field and outer in fields:
        return (f": content_field names a top-level field, and '{ds.content_field}' looks like one inside '{outer}';"
                " lift it out with a format_callback")
    separator = next((c for c in ";|" if len(fields) == 1 and c in fields[0]), None)
    if separator is not None:  # a CSV header read as one field: Excel's in many locales separates by ';'
        return (f": the header is one field holding '{separator}': CSV is read separated by ',' (.tsv by tabs);"
                " convert the file, or read it with a format_callback")
    return "; set the dataset's content_field"


def check_shared_by_processes(config: PipelineConfig, workers: int) -> None:
    """For a local run in worker processes: `memory://` inputs and output live in this process only, and
    the workers read the inputs and exchange the rows through the output's staging.

    Raises:
      ConfigError: one line per `memory://` path.
    """
    paths = [f"dataset '{ds.name}': data_files '{p}'" for ds in config.datasets for p in ds.data_file_list
             if p.startswith("memory://")]
    if config.save.output_dir.startswith("memory://"):
        paths.append(f"save.output_dir '{config.save.output_dir}'")
    if paths:
        raise ConfigError([f"{p} is in this process's memory, which the local runner's {workers} worker processes"
                           " cannot share: run with --direct_num_workers=1, or use a path or store they share"
                           for p in paths])


def check_tokenizer(config: PipelineConfig, handle: TokenizerHandle) -> None:
    """A loaded tokenizer declares the special tokens the job adds (`tokenize.add_eos`, `add_bos`). A padding
    token it declares but its vocabulary lacks is named in a warning line when packed rows will be padded with
    another id (`transformers` would add it as a new id, which the model has no embedding for).

    Raises:
      ConfigError: naming the tokenizer and the setting.
    """
    name = handle.config.name_or_path
    if config.pack.enabled and config.pack.pad_token_id is None and "pad" in handle.missing_specials:
        pad_id = resolve_pad_id(config.pack, handle.pad_token_id, handle.eos_token_id)
        instead = f"its EOS id {pad_id}" if pad_id == handle.eos_token_id else f"id {pad_id}"
        print(f"easydata: warning: tokenizer '{name}' declares pad_token '{handle.missing_specials['pad']}', which"
              f" its vocabulary lacks: packed rows are padded with {instead} (set pack.pad_token_id to choose)",
              file=sys.stderr)

    def declares(kind: str) -> str:
        missing = handle.missing_specials.get(kind)
        return f"declares {kind}_token '{missing}', which its vocabulary lacks," if missing \
            else f"declares no {kind.upper()} token"

    if config.tokenize.add_eos and handle.eos_token_id is None:
        raise ConfigError(f"tokenizer '{name}' {declares('eos')} but tokenize.add_eos is"
                          " true: set the tokenizer's `eos_token` or tokenize.add_eos: false")
    if config.tokenize.add_bos and handle.bos_token_id is None:
        raise ConfigError(f"tokenizer '{name}' {declares('bos')} but tokenize.add_bos is"
                          " true: set the tokenizer's `bos_token` or tokenize.add_bos: null")


def dataset_settings(config: PipelineConfig, ds: DatasetConfig, tok: TokenizerConfig, info: TokenizerInfo,
                     configured: Optional[str]) -> tuple[Optional[str], int]:
    """A dataset's chat template (`configured`: `chat.template` as `load_chat_template` read it for this
    tokenizer, else the tokenizer's default) and padding id, checked: chat records need a template that parses,
    and the padding id must be one of the vocabulary's.

    Raises:
      ConfigError: one line naming the dataset or tokenizer.
    """
    own = dict(info.chat_templates)
    template = configured if configured is not None else info.chat_template
    if template is None and is_chat_field(ds.content_field, config.chat.messages_field):
        having = f"chat templates named {', '.join(sorted(own))} but none named 'default'" if own \
            else "no chat template"
        raise ConfigError(f"dataset '{ds.name}' reads chat records (content_field '{ds.content_field}') but"
                          f" tokenizer '{tok.name_or_path}' has {having} and chat.template is not set: set"
                          f" chat.template ({'one of those names, ' if own else ''}jinja text or a file)")
    for checked in (template, info.tool_template(template)) if configured is None else ():
        try:
            if checked is not None:
                ChatRenderer(checked, {}, ())
        except ValueError as e:
            raise ConfigError(f"tokenizer '{tok.name_or_path}': {e}; set chat.template to one that works") from None
    pad_id = resolve_pad_id(config.pack, info.pad_token_id, info.eos_token_id)
    if config.pack.enabled and not 0 <= pad_id < info.vocab_size:  # JAX's gathers would clamp it silently
        raise ConfigError(f"pack.pad_token_id {pad_id} is not an id of tokenizer '{tok.name_or_path}' (vocabulary"
                          f" of {info.vocab_size:,}): choose an id in [0, {info.vocab_size})")
    return template, pad_id


def plan_datasets(config: PipelineConfig, *, split_bytes: Optional[int] = None,
                  group_bytes: int = DEFAULT_GROUP_BYTES, prefetch_engines: bool = False
                  ) -> tuple[list[DatasetPlan], dict[TokenizerConfig, TokenizerHandle]]:
    """The run's checks and each dataset's part of the plan, shared by the run and `--dry-run`: the config
    (`check_batch_job`), each tokenizer loaded once and checked (`check_tokenizer`), the input files listed
    and split (`easydata.io.sources.plan_input`), the dataset's template and padding (`dataset_settings`),
    its content and additional fields (`check_fields`) and, for a mix, one vocabulary (`check_shared_vocabulary`).
    Reads, never writes. Engines are not chosen yet (`plan_run` does); with `prefetch_engines`, a fast
    engine the config asks for starts loading while the inputs are planned.

    Returns:
      The datasets' plans (engine `hf` until chosen) and the loaded tokenizers.

    Raises:
      ConfigError, InputError, TokenizerError: what the run would stop with first, one line each.
    """
    check_batch_job(config)
    handles: dict[TokenizerConfig, TokenizerHandle] = {}
    configured: dict[TokenizerConfig, Optional[str]] = {}  # `chat.template` as read for each tokenizer
    datasets = []
    for ds in config.datasets:
        tok = config.tokenizer_for(ds)
        if tok not in handles:
            requested = config.tokenize_for(ds).engine
            if requested != "hf" and prefetch_engines:  # loads while hf loads and the inputs are planned
                from easydata.text.engines import fast_candidates, prefetch_engine
                from easydata.text.tokenizer import resolve_tokenizer_files

                prefetch_engine(fast_candidates(requested), resolve_tokenizer_files(tok.name_or_path)[0])
            handle = load_tokenizer(tok)
            check_tokenizer(config, handle)
            handles[tok] = handle
            configured[tok] = load_chat_template(config.chat.template, dict(handle.info.chat_templates))
        readers = parallel_readers()
        splits, planned_split_bytes = plan_input(ds, target_bytes=split_bytes, exclude_dirs=(config.save.output_dir,),
                                                 splits_wanted=splits_per_dataset(), readers=readers)
        input_bytes = text_bytes(splits, ds, config.chat.messages_field)
        info = handles[tok].info
        template, pad_id = dataset_settings(config, ds, tok, info, configured[tok])
        check_fields(config, ds, splits)
        datasets.append(DatasetPlan(name=ds.name, splits=splits, tokenizer=tok, tokenizer_info=info,
                                    input_bytes=input_bytes, pad_id=pad_id, chat_template=template,
                                    split_bytes=planned_split_bytes, readers=readers,
                                    num_groups=choose_num_groups(int(input_bytes * _ROW_BYTES_PER_INPUT_BYTE),
                                                                 group_bytes)))
    if config.static_mix is not None:
        check_shared_vocabulary(config, handles)
    return datasets, handles


def plan_run(config: PipelineConfig, *, split_bytes: Optional[int] = None,
             group_bytes: int = DEFAULT_GROUP_BYTES, resume: bool = False,
             engine_chooser: Optional[EngineChooser] = None, ship_tokenizers: bool = False) -> RunPlan:
    """Everything decided before a batch job starts, without a side effect: nothing is written, the output
    is only read (`easydata.run.output.check_output`; with `resume`, its unfinished runs). `open_output`
    then makes the plan's changes to the output, in the launching process, under the output's lock.

    Args:
      config: the job.
      split_bytes: target size of an input split (work unit of one reader); default: from the
        dataset's total size (`easydata.io.sources.split_size`).
      group_bytes: target size of a shuffle group (memory of one sorting worker).
      resume: continue an unfinished run of the same job in the output directory, if there is one:
        its tokenized work units are loaded instead of read again (`easydata.run.checkpoint`).
      engine_chooser: makes planning's engine choice elsewhere, e.g. in a local worker server that has
        the engine loaded already (`beam_pipelines.local.worker_pool`); when it returns None, or without
        one, this process chooses (`easydata.text.engines.choose_engine`).
      ship_tokenizers: the workers run elsewhere: tokenizers given as local files are copied into the
        run's staging too, as hub tokenizers are for a remote output (`_shipped_tokenizers`).

    Raises:
      ConfigError, InputError, TokenizerError, OutputError: user-caused problems, one line each.
    """
    datasets, handles = plan_datasets(config, split_bytes=split_bytes, group_bytes=group_bytes,
                                      prefetch_engines=engine_chooser is None)
    by_name = {ds.name: ds for ds in config.datasets}
    datasets = _choose_engines(config, datasets, handles, by_name, engine_chooser)
    mix_num_groups = _mix_num_groups(config, datasets, group_bytes) if config.static_mix is not None else None
    check_output(config.save.output_dir, config.save.overwrite)
    signature = _signature(config, datasets)
    previous = None
    if resume:
        previous, datasets = _resumable_run(config, datasets, signature)
    run_id = previous or new_run_id()
    staging = staging_dir(config.save.output_dir, run_id)
    if previous:
        datasets = [dataclasses.replace(d, resumed_units=resumable_units(staging, d, by_name[d.name]))
                    for d in datasets]
    dictionary = _shuffle_dictionary(config, datasets, handles, by_name, mix_num_groups)
    datasets, shipped = _shipped_tokenizers(datasets, config.save.output_dir, staging, local_files=ship_tokenizers)
    return RunPlan(run_id=run_id, output_dir=config.save.output_dir, staging=staging, datasets=datasets,
                   mix_num_groups=mix_num_groups, resumed=previous is not None, shuffle_dictionary=dictionary,
                   unit_count=sum(len(d.work_units(by_name[d.name])) for d in datasets),
                   signature=signature, input_versions=_input_versions(datasets), shipped_tokenizers=shipped)


def open_output(config: PipelineConfig, plan: RunPlan) -> None:
    """Makes the plan's changes to the output, for the launcher to call under the output's lock: finishes a
    commit a killed run left (its journal) and creates the output directory (`prepare_output`, which checks
    it again); a resumed run's interrupted attempt leaves its group files behind (never read again); a new
    run is recorded for `--resume` (`run.json`); tokenizers the workers cannot reach are copied into the
    staging directory. Safe to run twice for the same plan.

    Raises:
      OutputError: the output is in the way (exists without overwrite, foreign files) or cannot be written.
    """
    from easydata.text.tokenizer import stage_tokenizer_files

    prepare_output(config.save.output_dir, config.save.overwrite)
    if plan.resumed:
        discard_group_files(plan.staging)
    else:
        write_run_info(plan.staging, plan.signature, plan.run_id, {d.name: d.split_bytes for d in plan.datasets},
                       readers={d.name: d.readers for d in plan.datasets},
                       fingerprint=config.fingerprint(), inputs=plan.input_versions,
                       id_sources=_id_sources(plan.datasets))
    by_name = {ds.name: ds for ds in config.datasets}
    for d in plan.datasets:  # what `ReadDocuments` looks its units up in
        write_units(plan.staging, d.name, d.work_units(by_name[d.name]))
    for source, target in plan.shipped_tokenizers:
        stage_tokenizer_files(source, target)


def prepare_run(config: PipelineConfig, **options: Any) -> RunPlan:
    """`plan_run`, then `open_output`: what a launcher does before it builds the job (tests and tools that
    need a ready output without a runner). Takes `plan_run`'s options."""
    plan = plan_run(config, **options)
    open_output(config, plan)
    return plan


def _choose_engines(config: PipelineConfig, datasets: list[DatasetPlan],
                    handles: dict[TokenizerConfig, TokenizerHandle], by_name: dict[str, DatasetConfig],
                    engine_chooser: Optional[EngineChooser] = None) -> list[DatasetPlan]:
    """Each tokenizer's engine for plain documents (`easydata.text.engines.choose_engine`), verified on
    documents sampled from every dataset that uses it."""
    from easydata.io.sampling import sample_texts
    from easydata.text.engines import choose_engine, special_token_strings

    choices: dict[tuple[TokenizerConfig, str], Any] = {}
    out = []
    for d in datasets:
        requested = config.tokenize_for(by_name[d.name]).engine
        key = (d.tokenizer, requested)
        if key not in choices:
            handle = handles[d.tokenizer]
            users = [other for other in datasets if other.tokenizer == d.tokenizer]
            sample = [] if requested == "hf" else [
                text for other in users for text in sample_texts(
                    by_name[other.name], other.splits, documents=max(200, 2000 // len(users)),
                    chars=max(50_000, 500_000 // len(users)), messages_field=config.chat.messages_field)]
            specials = special_token_strings(handle.tokenizer)
            add_bos = config.tokenize_for(by_name[d.name]).add_bos  # None: the tokenizer's own special tokens
            choice = engine_chooser(d.tokenizer, requested, sample, add_bos is None) \
                if engine_chooser is not None and requested != "hf" else None
            choices[key] = choice if choice is not None else choose_engine(
                requested, handle.tokenizer_file, handle.tokenizer, specials, sample, add_special_tokens=add_bos is None)
        choice = choices[key]
        out.append(dataclasses.replace(d, engine=choice.name, engine_choice=choice.to_manifest()))
    return out


def _shuffle_dictionary(config: PipelineConfig, datasets: list[DatasetPlan],
                        handles: dict[TokenizerConfig, TokenizerHandle], by_name: dict[str, DatasetConfig],
                        mix_num_groups: Optional[int]) -> Optional[bytes]:
    """The run's shuffle dictionary (`easydata.ops.shuffle_dictionary`) when it has many hash groups:
    trained on documents sampled from every dataset, through the run's own stages (`DocumentStages`, with
    `tokenizers`: the same ids, the engines are verified equal), and routed as the pipeline does."""
    from easydata.io.sampling import sample_batches
    from easydata.ops import shuffle_dictionary
    from easydata.text.stages import DocumentStages

    groups = max([d.num_groups for d in datasets] + [mix_num_groups or 0])
    if groups < shuffle_dictionary.MIN_GROUPS:
        return None
    rows = []
    for d in datasets:
        dataset = by_name[d.name]
        stages = DocumentStages.for_dataset(config, dataset, handles[d.tokenizer], d.chat_template)
        for batch in sample_batches(dataset, d.splits, documents=max(200, 2000 // len(datasets)),
                                    messages_field=config.chat.messages_field):
            staged = stages.process(batch)
            if staged.rows is not None:
                rows.append(staged.rows)
    return shuffle_dictionary.train_shuffle_dictionary(shuffle_dictionary.sample_routed_rows(rows, groups))


def _shipped_tokenizers(datasets: list[DatasetPlan], output_dir: str, staging: str, *, local_files: bool = False
                        ) -> tuple[list[DatasetPlan], tuple[tuple[str, str], ...]]:
    """Hub tokenizers of a job whose output is remote (gs://, s3://: workers on other machines, e.g.
    Dataflow) are resolved here, once, and planned to be copied into the run's staging directory (by
    `open_output`); the workers load them from there and never ask the Hub. Local jobs share this
    machine's cache. With `local_files` (a runner whose workers are elsewhere), tokenizers given as local
    files go the same way: the workers could not read this machine's path.

    Returns:
      The datasets with their tokenizers' staged locations, and the copies to make: (tokenizer, target).
    """
    from easydata.io.filesystems import local_path
    from easydata.text.tokenizer import is_hub_id, resolve_tokenizer_files

    if local_path(output_dir) is not None:
        return datasets, ()
    shipped: dict[str, tuple[str, str]] = {}
    out = []
    for d in datasets:
        name = d.tokenizer.name_or_path
        if is_hub_id(name) or (local_files and local_path(name) is not None):
            if name not in shipped:
                resolve_tokenizer_files(name)  # here, once: downloaded if it must be, or its error now
                shipped[name] = (name, Staging(staging).tokenizer(name))
            d = dataclasses.replace(d, tokenizer=dataclasses.replace(d.tokenizer, name_or_path=shipped[name][1]))
        out.append(d)
    return out, tuple(shipped.values())


def resumable_units(staging: str, plan: DatasetPlan, dataset: DatasetConfig) -> tuple[UnitCheckpoint, ...]:
    """The work units of `plan` an interrupted run finished: checkpointed, and of the same splits (a unit
    of another version's grouping is read again, not taken for part of a larger one)."""
    units = {unit[0].index: tuple(split.index for split in unit) for unit in plan.work_units(dataset)}
    done = completed_units(staging, plan.name, units)
    return tuple(checkpoint for index, checkpoint in done.items() if checkpoint.splits == units[index])


def _signature(config: PipelineConfig, datasets: list[DatasetPlan]) -> str:
    """What a resumed run must share with the interrupted one: the config, the input splits and what each
    dataset's ids come from (its tokenizer's content hash and the engine with its version)."""
    return run_signature(config.fingerprint(), {d.name: d.splits for d in datasets}) + "-" + hashlib.sha256(
        json.dumps(_id_sources(datasets), sort_keys=True).encode()).hexdigest()[:8]


def _id_sources(datasets: list[DatasetPlan]) -> dict[str, str]:
    """Per dataset, what its token ids come from: `<tokenizer content hash> <engine> <engine version>`."""
    return {d.name: " ".join((d.tokenizer_info.content_hash, str(d.engine),
                              str((d.engine_choice or {}).get("version") or ""))) for d in datasets}


def _resumable_run(config: PipelineConfig, datasets: list[DatasetPlan], signature: str
                   ) -> tuple[Optional[str], list[DatasetPlan]]:
    """The newest unfinished run of this job in the output directory, and the dataset plans to run.

    A run planned here with other split sizes or readers than it was (the default size and the readers a
    large compressed file is cut into parts for follow the machine's cores: resumed on another machine, or
    with another `split_bytes`) is re-planned with the interrupted run's recorded ones, and resumed when that
    gives its signature (same config, same input files); its work units are then the interrupted run's.
    """
    by_name = {ds.name: ds for ds in config.datasets}
    current: Optional[dict[str, str]] = None
    for info in unfinished_runs(config.save.output_dir):
        recorded_inputs = info.get("inputs")
        if info.get("fingerprint") == config.fingerprint() and isinstance(recorded_inputs, dict):
            current = _input_versions(datasets) if current is None else current
            for path, version in sorted(recorded_inputs.items()):
                now = current.get(path, "absent")
                if now != version:
                    raise InputError(f"cannot resume run {info['run_id']}: input '{path}' changed since it started"
                                     f" ({version} -> {now}); its tokens would not match the file: run without"
                                     " --resume to start afresh")
            recorded_ids = info.get("id_sources")
            for name, now in sorted(_id_sources(datasets).items()):
                if isinstance(recorded_ids, dict) and recorded_ids.get(name, now) != now:
                    raise InputError(f"cannot resume run {info['run_id']}: the tokenizer or engine of dataset"
                                     f" '{name}' changed since it started ({recorded_ids[name]} -> {now}); its"
                                     " checkpoints hold the old ids: run without --resume to start afresh")
        if info["signature"] == signature:
            return info["run_id"], datasets
        recorded = info.get("split_bytes")
        if not isinstance(recorded, dict) or set(recorded) != {d.name for d in datasets}:
            continue
        readers = info.get("readers") if isinstance(info.get("readers"), dict) else {}  # none recorded: no parts
        wanted = {d.name: (int(recorded[d.name]), int(readers.get(d.name, 1))) for d in datasets}
        if all(wanted[d.name] == (d.split_bytes, d.readers) for d in datasets):
            continue
        replanned = [d if wanted[d.name] == (d.split_bytes, d.readers) else
                     dataclasses.replace(d, splits=plan_splits(by_name[d.name], target_bytes=wanted[d.name][0],
                                                                   exclude_dirs=(config.save.output_dir,),
                                                                   readers=wanted[d.name][1]),
                                         split_bytes=wanted[d.name][0], readers=wanted[d.name][1])
                     for d in datasets]
        if _signature(config, replanned) == info["signature"]:
            return info["run_id"], replanned
    return None, datasets


def _input_versions(datasets: list[DatasetPlan]) -> dict[str, str]:
    """`file_version` of every input file the plans read, as planning found it (`InputSplit.version`)."""
    versions = {split.path: split.version or file_version(split.path) for d in datasets for split in d.splits}
    return dict(sorted(versions.items()))


def check_shared_vocabulary(config: PipelineConfig, handles: dict[TokenizerConfig, TokenizerHandle]) -> None:
    """Mixed rows share one embedding table: every mixed dataset's tokenizer must have the same vocabulary.

    Raises:
      ConfigError: naming two datasets whose vocabularies differ.
    """
    first_ds, first = None, None
    for ds in config.datasets:
        if not config.mix.weights.get(ds.name):
            continue
        handle = handles[config.tokenizer_for(ds)]
        if first is None:
            first_ds, first = ds.name, handle
        elif handle.info.content_hash != first.info.content_hash and \
                handle.tokenizer.get_vocab(with_added_tokens=True) != first.tokenizer.get_vocab(with_added_tokens=True):
            raise ConfigError(f"mix: datasets '{first_ds}' ({first.info.name_or_path}, vocab"
                              f" {first.info.vocab_size}) and '{ds.name}' ({handle.info.name_or_path}, vocab"
                              f" {handle.info.vocab_size}) use different vocabularies; mixed rows must share one"
                              " tokenizer vocabulary")


def _mix_num_groups(config: PipelineConfig, datasets: list[DatasetPlan], group_bytes: int) -> int:
    """Hash groups for the mixed output, from the budget the input sizes suggest (bytes stand in for tokens)."""
    weights = normalise_weights(config.mix.weights)
    sizes = {d.name: max(d.input_bytes, 1) for d in datasets}
    if config.mix.total_tokens is not None:
        estimate = config.mix.total_tokens * 4 * _ROW_BYTES_PER_INPUT_BYTE  # ~4 bytes of text per token
    else:
        estimate = mix_budget(sizes, weights, config.mix.stop_strategy) * _ROW_BYTES_PER_INPUT_BYTE
    return choose_num_groups(int(estimate), group_bytes)
