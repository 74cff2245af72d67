"""The batch pipeline: read -> chat template and tokenize -> (mix) -> pack or sort groups -> shards -> commit.

Without a `mix` section every dataset becomes its own output `OUT/<name>/`; with one, the datasets'
token rows are mixed by share of output tokens into a single output `OUT/mixed/`.

`build_batch_pipeline` wires `transforms/` into a `beam.Pipeline`; `run_batch` takes the output's lock,
plans the run (checks, splits, tokenizers: `easydata.run.run_plan.plan_run`, no side effect), opens the
output (`open_output`: journal recovery, staging, `run.json`, the work units the readers look up), runs the
job on the chosen runner with a progress report for local runs, and returns the committed manifest. `build_batch_job` plans and builds
without writing anything or running (the job graph can then be inspected or serialised offline), and
`launch_batch` submits it and returns at once (the Dataflow Flex Template entry).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.runner import PipelineResult

from easydata.config import PipelineConfig
from easydata.errors import TRANSIENT_ADVICE, ConfigError, EasyDataError, TransientInputError, classify
from easydata.logs import quiet_user_errors
from easydata.io.group_files import group_files_dir
from easydata.run.lock import OutputLock
from easydata.memory import return_free_memory
from easydata.run.manifest import read_manifest
from easydata.run.output import new_run_id, recover_commit
from easydata.run.progress import ProgressMonitor, progress_directory, say
from easydata.run.run_plan import RunPlan, check_reachable_by_workers, check_shared_by_processes, plan_run
from easydata.run.run_plan import open_output as open_run_output
from easydata.ops.splits import split_output_name
from easydata.io.token_files import token_file_spec
from beam_pipelines.runners import OfflineDirectRunner, check_runner_options, make_runner_and_options, runs_on_this_machine, \
    unknown_beam_flags, new_pipeline
from beam_pipelines.local.worker_pool import discard_prestarted, prestart, prestarted_engine_chooser
from transforms import MIX_PLAN_TAG, MIXED_NAME, REJECTED_TAG, STATS_TAG, CommitOutput, \
    Pack, ReadDocuments, SortGroups, SplitRows, SumCounters, Tokenize, WeightedMix, WriteShards

__all__ = ["build_batch_pipeline", "build_batch_job", "launch_batch", "run_batch", "BatchResult"]


def build_batch_pipeline(pipeline: beam.Pipeline, config: PipelineConfig, plan: RunPlan, started_at: float,
                         progress_dir: Optional[str] = None, group_via_files: bool = False) -> beam.PCollection:
    """Adds the whole batch job to `pipeline`; returns the PCollection holding the manifest.

    Args:
      progress_dir: a directory the launching process can read, where workers report progress.
      group_via_files: move the rows of the pack and shuffle group-bys through files in the staging
        directory (`transforms.group_files`): for runners whose workers share this machine's files.
    """
    datasets = {d.name: d for d in config.datasets}
    shards, stats, rejected = [], [], []
    tokenized: dict[str, beam.PCollection] = {}
    for ds_plan in plan.datasets:
        name = ds_plan.name
        # a resumed run's done units are loaded by the same step (no Flatten of two steps' rows: see `ReadDocuments`)
        read = pipeline | f"Read[{name}]" >> ReadDocuments(
            dataset=datasets[name], units=ds_plan.unit_ids(datasets[name]),
            batch_size=config.tokenize.batch_size, max_document_bytes=config.tokenize.max_document_byte_limit,
            staging=plan.staging, progress_dir=progress_dir, messages_field=config.chat.messages_field,
            checkpoint=True, resumed=[u.unit for u in ds_plan.resumed_units])
        stats.append(read[STATS_TAG])
        rejected.append(read[REJECTED_TAG])
        encoded = read.documents | f"Tokenize[{name}]" >> Tokenize(
            dataset=name, tokenizer=ds_plan.tokenizer, config=config.tokenize_for(datasets[name]), seed=config.seed,
            template=ds_plan.chat_template, assistant_only_loss=config.chat.assistant_only_loss, staging=plan.staging,
            progress_dir=progress_dir, checkpoint=True, engine=ds_plan.engine,
            template_kwargs=config.chat.template_kwargs)
        stats.append(encoded[STATS_TAG])
        rejected.append(encoded[REJECTED_TAG])
        tokenized[name] = encoded.rows
    outputs = {name: (rows, ds_plan.num_groups, ds_plan.pad_id)
               for (name, rows), ds_plan in zip(tokenized.items(), plan.datasets)}
    mix_plan = None
    if config.static_mix is not None:
        units = {ds_plan.name: ds_plan.unit_ids(datasets[ds_plan.name])
                 for ds_plan in plan.datasets}
        mixed = tokenized | "Mix" >> WeightedMix(weights=config.mix.weights, stop_strategy=config.mix.stop_strategy,
                                                 total_tokens=config.mix.total_tokens, seed=config.mix_seed,
                                                 staging=plan.staging, units=units)
        stats.append(mixed[STATS_TAG])
        mix_plan = mixed[MIX_PLAN_TAG]
        outputs = {MIXED_NAME: (mixed["rows"], plan.mix_num_groups, plan.datasets[0].pad_id)}
    fractions = config.save.split_fractions()
    if fractions is not None:  # train / validation / ...: each split is its own output `<name>/<split>`
        outputs = {split_output_name(name, split): (part, num_groups, pad_id)
                   for name, (rows, num_groups, pad_id) in outputs.items()
                   for split, part in (rows | f"Split[{name}]" >> SplitRows(
                       dataset=name, fractions=fractions, split_seed=config.save.split_seed)).items()}
    def group_dir(stage: str, name: str) -> Optional[str]:
        return group_files_dir(plan.staging, stage, name) if group_via_files else None

    for name, (rows, num_groups, pad_id) in outputs.items():
        if config.pack.enabled:  # packing stages its groups sorted
            packed = rows | f"Pack[{name}]" >> Pack(name=name, config=config.pack, pad_id=pad_id,
                                                    seed=config.seed, num_groups=num_groups, staging=plan.staging,
                                                    group_dir=group_dir("pack", name),
                                                    dictionary=plan.shuffle_dictionary, progress_dir=progress_dir)
            groups = packed["groups"]
            stats.append(packed[STATS_TAG])
        else:
            sorted_groups = rows | f"Sort[{name}]" >> SortGroups(name=name, num_groups=num_groups, staging=plan.staging,
                                                                 group_dir=group_dir("sort", name),
                                                                 dictionary=plan.shuffle_dictionary,
                                                                 progress_dir=progress_dir)
            groups = sorted_groups["groups"]
            stats.append(sorted_groups[STATS_TAG])
        shards.append(groups | f"Write[{name}]" >> WriteShards(
            name=name, num_groups=num_groups, save=config.save, staging=plan.staging,
            token_files=token_file_spec(config, plan.datasets[0].tokenizer_info.vocab_size, pad_id),
            progress_dir=progress_dir))
    commit_inputs = {
        "shards": shards | "AllShards" >> beam.Flatten(),
        "counters": stats | "AllStats" >> beam.Flatten() | "SumCounters" >> beam.CombineGlobally(SumCounters()),
        "rejected": rejected | "AllRejected" >> beam.Flatten(),
    }
    if mix_plan is not None:
        commit_inputs["mix_plan"] = mix_plan
    return commit_inputs | "CommitOutput" >> CommitOutput(config=config, plan=plan, started_at=started_at,
                                                          progress_dir=progress_dir)


def _check_beam_flags(beam_args: list[str]) -> None:
    """Refuses Beam flags that look like typos of known ones; warns about flags no loaded options class knows."""
    for flag, suggestion in unknown_beam_flags(beam_args):
        if suggestion:
            raise EasyDataError(f"unknown option {flag} (did you mean {suggestion}?)")
        print(f"easydata: warning: {flag} is not an option Beam knows here; passing it on", file=sys.stderr)
    check_runner_options(beam_args)


def build_batch_job(config: PipelineConfig, beam_args: Optional[list[str]] = None, *, resume: bool = False,
                    **plan_options: int) -> tuple[beam.Pipeline, RunPlan]:
    """Prepares the run and builds the whole batch job on the runner `beam_args` name, without running it.

    Planning is `run_batch`'s (`easydata.run.run_plan.plan_run`): config, inputs and tokenizers are
    checked, input files listed, the output checked. Nothing is written and no runner is contacted, so
    the job graph of a remote runner (`--runner=DataflowRunner ...`) can be built, inspected and
    serialised (`pipeline.to_runner_api()`) offline. To run the graph yourself, first take the output's
    lock and make the plan's changes to the output (`easydata.run.run_plan.open_output`), as `run_batch`
    does. Workers report no local progress.

    Returns:
      The constructed pipeline and its `RunPlan`.

    Raises:
      EasyDataError: user-caused problems (config, inputs, tokenizer, output, a mistyped Beam flag).
    """
    _check_beam_flags(list(beam_args or []))
    pipeline, plan, _ = _build_job(config, beam_args, resume, plan_options, start_workers=False, open_output=False)
    return pipeline, plan


def _check_launch(config: PipelineConfig, beam_args: list[str]) -> bool:
    """Whether the job runs on this machine; for a runner whose workers run on other machines (a runner
    named to Beam: Dataflow, a portable runner), first checks that they can reach its inputs and output
    (before the lock or planning touch the output). A Dask cluster given by address is not checked: its
    workers may share this machine's files (a cluster on this host, a shared filesystem)."""
    runner, options = make_runner_and_options(beam_args)
    if isinstance(runner, str):
        check_reachable_by_workers(config, runner)
    elif isinstance(runner, OfflineDirectRunner) and \
            options.view_as(DirectOptions).direct_running_mode == "multi_processing":
        check_shared_by_processes(config, options.view_as(DirectOptions).direct_num_workers)
    return runs_on_this_machine(runner, options)


def _build_job(config: PipelineConfig, beam_args: Optional[list[str]], resume: bool, plan_options: dict[str, int], *,
               started: Optional[float] = None, progress_dir: Optional[str] = None,
               announce_resume: bool = False, start_workers: bool = True,
               lock_id: Optional[str] = None, open_output: bool = True) -> tuple[beam.Pipeline, RunPlan, bool]:
    """`build_batch_job`, and whether the workers run on this machine (then, with `progress_dir`, they
    report progress there); `announce_resume` says on stderr whether an unfinished run is resumed.

    With `start_workers`, the local worker processes a multi-process run needs start first, and
    import their libraries while this process plans and builds the job (`beam_pipelines.local.worker_pool`);
    the caller then ends any the runner did not take (`discard_prestarted`), also when this raises.
    With `open_output` (the caller holds the output's lock), the plan's changes to the output are made
    (`easydata.run.run_plan.open_output`) before the job is built.
    """
    beam_args = list(beam_args or [])
    if start_workers:
        prestart(beam_args, config)
    runner, options = make_runner_and_options(beam_args)
    local = runs_on_this_machine(runner, options)
    plan = dataclasses.replace(plan_run(config, resume=resume, engine_chooser=prestarted_engine_chooser(),
                                        ship_tokenizers=not local, **plan_options), lock_id=lock_id)
    if open_output:
        open_run_output(config, plan)
    if announce_resume:  # a fast engine asked for but not used: said once per tokenizer
        for note in sorted({f"tokenizer '{d.tokenizer.name_or_path}' encodes with hf: {d.engine_choice['reason']}"
                            for d in plan.datasets if d.engine_choice and d.engine == "hf"
                            and d.engine_choice.get("requested") != "hf"}):
            say(f"easydata: note: {note}")
    if resume and announce_resume:
        say(f"easydata: resuming run {plan.run_id}: {plan.resumed_unit_count} of {plan.unit_count} input units"
            " already tokenized" if plan.resumed else
            "easydata: no unfinished run of this job to resume: starting a new run")
    pipeline = new_pipeline(runner, options)
    build_batch_pipeline(pipeline, config, plan, time.time() if started is None else started,
                         progress_dir if local else None, group_via_files=local)
    # Planning's tokenizers (hf's, a fast engine's) are freed by now, but glibc keeps their heap pages while
    # this process runs a local job's runner: ~120 MiB of a Qwen3 job's peak PSS. A no-op for other runners.
    return_free_memory()
    return pipeline, plan, local


def _run(pipeline: beam.Pipeline) -> PipelineResult:
    """Runs the job; on our local runner without Beam's runner-API round trip.

    For a runner it does not know to be FnAPI-based, Beam first pickles and unpickles every
    transform, converts the graph to its protos and builds a new pipeline from them, a check that
    the pipeline survives serialisation; the local FnApiRunner then converts it again (a part of
    every local run's start-up: docs/performance.md#figures-behind-design-choices). Our runner serialises the graph once, itself.
    """
    return pipeline.run(test_runner_api=not isinstance(pipeline.runner, OfflineDirectRunner))


def launch_batch(config: PipelineConfig, beam_args: Optional[list[str]] = None, *, resume: bool = False,
                 **plan_options: int) -> PipelineResult:
    """Builds the batch job and submits it without waiting for it to finish.

    On a remote runner this returns as soon as the job is submitted (a Flex Template launcher must
    exit then); the manifest appears in the output directory when the job commits. Local runners
    run the job to completion inside `run()`, so locally the output is committed on return.

    The output is locked first, as `run_batch` locks it: for a submitted job with a detached lock
    (`easydata.run.lock`), which the job's commit releases, so a second launch into the output fails
    in one line while the first job runs. A launch that writes its job to `--template_location` is locked
    the same way: that is how Dataflow's Flex Template launcher runs the entry (it submits the job file it
    finds there), so the written job is the one that runs and commits (`tests/test_gcs.py` replays one).
    """
    problems = config.validate()
    if problems:  # before the lock: a config error leaves no trace in the output
        raise ConfigError(problems)
    args = list(beam_args or [])
    _check_beam_flags(args)
    local = _check_launch(config, args)
    lock = OutputLock(config.save.output_dir, new_run_id(), detached=not local)
    submitted = False
    try:
        lock.acquire()
        pipeline, _, _ = _build_job(config, args, resume, plan_options, lock_id=lock.run_id)
        with quiet_user_errors():
            result = _run(pipeline)
        submitted = True
        return result
    finally:
        if not (lock.detached and submitted):  # a submitted job's commit releases it
            lock.release()
        discard_prestarted()  # those the runner did not take (a job that failed before it ran)


@dataclasses.dataclass
class BatchResult:
    """What a finished batch run produced."""

    output_dir: str
    manifest: dict[str, Any]
    elapsed_seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.manifest["totals"]["tokens"] / max(self.elapsed_seconds, 1e-9)


def _finish_interrupted_commit(config: PipelineConfig, announce: bool) -> Optional[dict[str, Any]]:
    """`--resume` of a run killed inside its commit: the commit's journal finishes it (the job is not
    run again); returns the manifest, or None when there was no such commit of this job."""
    run_id = recover_commit(config.save.output_dir)
    if run_id is None:
        return None
    manifest = read_manifest(config.save.output_dir)
    if manifest.get("config_fingerprint") != config.fingerprint():
        return None  # another job's commit, finished; this one runs as usual (and finds an output)
    if announce:
        print(f"easydata: finished the interrupted commit of run {run_id}", file=sys.stderr)
    return manifest


#: How many times a run whose workers run on this machine starts again after a transient read error (a reset
#: connection, a timeout, a store's I/O error: `easydata.errors.TransientInputError`), as `--resume` (the work
#: units already tokenized are kept), before it fails in one line. Remote runners retry the bundle themselves.
LOCAL_READ_RETRIES = 2


def run_batch(config: PipelineConfig, beam_args: Optional[list[str]] = None, *,
              show_progress: bool = True, resume: bool = False, **plan_options: int) -> BatchResult:
    """Runs the batch pipeline to completion and returns the committed manifest.

    A transient read error fails the step (never a dead letter: the data may be fine); a local run then
    starts again as `--resume`, up to `LOCAL_READ_RETRIES` times, saying so on stderr, and fails in one line
    after the last.

    Args:
      config: the job.
      beam_args: Beam pipeline flags (`--runner`, `--direct_num_workers`, `--project`, ...).
      show_progress: draw progress on stderr for local runs.
      resume: continue an unfinished run of the same job in the output directory (`--resume`): its
        tokenized work units are loaded, not read and tokenized again.
      plan_options: `split_bytes` / `group_bytes` tuning passed to `plan_run`.
    """
    attempt = 0
    while True:
        try:
            return _run_batch_once(config, beam_args, show_progress=show_progress, resume=resume or attempt > 0,
                                   **plan_options)
        except TransientInputError as e:
            if attempt == LOCAL_READ_RETRIES or not runs_on_this_machine(*make_runner_and_options(list(beam_args or []))):
                raise
            attempt += 1
            if show_progress:
                say(f"easydata: note: {e.message.removesuffix(TRANSIENT_ADVICE)}; trying again as --resume"
                    f" ({attempt} of {LOCAL_READ_RETRIES})")


def _run_batch_once(config: PipelineConfig, beam_args: Optional[list[str]], *, show_progress: bool, resume: bool,
                    **plan_options: int) -> BatchResult:
    """One attempt of `run_batch`."""
    started = time.time()
    problems = config.validate()
    if problems:  # before the lock: a config error leaves no trace in the output
        raise ConfigError(problems)
    _check_beam_flags(list(beam_args or []))
    local = _check_launch(config, list(beam_args or []))
    try:
        with OutputLock(config.save.output_dir, new_run_id()) as lock:  # one run at a time per output
            if lock.took_over and show_progress:
                print(f"easydata: note: {lock.took_over}; taking it over", file=sys.stderr)
            if resume:
                finished = _finish_interrupted_commit(config, announce=show_progress)
                if finished is not None:
                    return BatchResult(output_dir=config.save.output_dir, manifest=finished,
                                       elapsed_seconds=time.time() - started)
            after = "packing, shuffling and writing shards" if config.pack.enabled else "shuffling and writing shards"
            with progress_directory(show_progress) as progress_dir, quiet_user_errors(), \
                    ProgressMonitor(progress_dir, None, enabled=show_progress and local, after_input=after,
                                    group_stage="packing" if config.pack.enabled else "sorting") as monitor:
                # Workers report progress only for a display: with none (`--quiet`), they write no progress files.
                pipeline, plan, _ = _build_job(config, beam_args, resume, plan_options, started=started,
                                               progress_dir=progress_dir,
                                               announce_resume=show_progress, lock_id=lock.run_id)
                monitor.reading(plan.total_input_bytes, units=plan.unit_count)
                try:
                    _run(pipeline).wait_until_finish()
                except Exception as e:  # a user error in a step: its own class and message, not Beam's wrapping
                    error = classify(e)
                    if error is None or error is e:
                        raise
                    raise error from None
    finally:
        discard_prestarted()  # those the runner did not take (a job that failed before it ran)
    manifest = read_manifest(plan.output_dir)
    return BatchResult(output_dir=plan.output_dir, manifest=manifest, elapsed_seconds=time.time() - started)
