"""Choosing the Beam runner and pipeline options from command-line flags.

With no `--runner` (or `--runner=DirectRunner`), a local job runs on Beam's FnApiRunner (the engine
behind DirectRunner) through `OfflineDirectRunner`, which skips Beam's first attempt to start the
Prism runner (that attempt downloads a binary): no download, no network. By default it runs one
worker process per usable core, each tokenizing on its share of the cores (one in-process worker on
a single core); `--direct_num_workers=N` runs N (1: in-process). Its options make each view once
(`LocalRunOptions`).
`--runner=DaskRunner` runs on a dask `distributed` cluster through `ManagedDaskRunner`
(`beam_pipelines.dask.dask_runner`: Beam's DaskRunner with a complete batch translation; without an address
it starts a local cluster). Any other runner name and every other flag pass through to Beam unchanged.
`new_pipeline` makes the `beam.Pipeline` both builders (batch, streaming) build on, its scratch directory removed
with it.
"""

from __future__ import annotations

import difflib
import shutil
import weakref
from typing import Any, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, WorkerOptions
from apache_beam.runners.runner import PipelineRunner

from easydata.errors import EasyDataError
from easydata.run.machine import usable_cores
from transforms.beam_internals import beam_flag_names, short_state_sampling
from beam_pipelines.local.offline_runner import OfflineDirectRunner
from beam_pipelines.local.worker_pool import LOCAL_RUNNERS, default_worker_count

__all__ = ["OfflineDirectRunner", "LocalRunOptions", "make_runner_and_options", "is_local_runner", "is_dask_runner",
           "unknown_beam_flags", "check_runner_options", "runs_on_this_machine", "short_state_sampling", "new_pipeline"]

_DASK_RUNNERS = {"DaskRunner", "ManagedDaskRunner"}


def new_pipeline(runner: PipelineRunner | str, options: PipelineOptions) -> beam.Pipeline:
    """A `beam.Pipeline` whose scratch directory goes with it.

    Beam makes a `beam-pipeline-temp*` directory in the temporary directory for every `Pipeline` and removes
    it only at the end of `run()`: a job built and not run (`build_batch_job`, which builds graphs to inspect
    or serialise offline) or one whose building failed left one behind per call. It is now also removed
    when the pipeline object is collected, or when the interpreter exits (`weakref.finalize`).
    """
    pipeline = beam.Pipeline(runner=runner, options=options)
    scratch = getattr(pipeline, "local_tempdir", None)  # Beam's public attribute; absent in another Beam: left alone
    if isinstance(scratch, str):
        weakref.finalize(pipeline, shutil.rmtree, scratch, True)
    return pipeline


def is_local_runner(runner_name: Optional[str]) -> bool:
    return runner_name in LOCAL_RUNNERS


def is_dask_runner(runner_name: Optional[str]) -> bool:
    return runner_name in _DASK_RUNNERS


def _dask_runner() -> PipelineRunner:
    try:
        import dask.bag  # noqa: F401 - Beam's DaskRunner needs both
        import distributed  # noqa: F401
    except ImportError as e:
        raise EasyDataError(f"--runner=DaskRunner needs dask and distributed ({e}): install them with"
                            " pip install 'easydata-beam[dask]' (in a checkout: pip install -e '.[dask]')") from e
    from beam_pipelines.dask.dask_runner import ManagedDaskRunner

    return ManagedDaskRunner()


def runs_on_this_machine(runner: PipelineRunner | str, options: PipelineOptions) -> bool:
    """Whether the job's workers share this machine's files (then they can report progress to it)."""
    if isinstance(runner, str):
        return False
    uses_local_cluster = getattr(runner, "uses_local_cluster", None)
    return uses_local_cluster is None or uses_local_cluster(options)


def unknown_beam_flags(beam_args: list[str]) -> list[tuple[str, Optional[str]]]:
    """Flags no registered Beam options class declares, each with the closest known flag (or None).

    Beam itself silently drops such flags, so a typo like `--runer=DataflowRunner` would otherwise
    run the job locally. Options of runners not imported yet are unknown here, hence the suggestion:
    callers refuse flags that look like typos and only warn about the others.
    """
    if is_dask_runner(PipelineOptions(beam_args).view_as(StandardOptions).runner):
        _dask_runner()  # registers the Dask options (or says how to install dask)
    known = beam_flag_names()
    if known is None:  # a Beam whose parser we do not know: no flag is called unknown (as Beam does)
        return []
    found = []
    for arg in beam_args:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        if name and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            found.append((arg.split("=", 1)[0], f"--{close[0]}" if close else None))
    return found


def check_runner_options(beam_args: list[str]) -> None:
    """Refuses, in one line and before anything is planned or written, a runner's missing required options
    that Beam would otherwise report as a traceback when the job is built (`DataflowRunner`: `--project`,
    `--region`, `--temp_location`).

    Raises:
      EasyDataError: naming every missing option.
    """
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    options = PipelineOptions(beam_args)
    if options.view_as(StandardOptions).runner not in ("DataflowRunner", "dataflow"):
        return
    cloud = options.view_as(GoogleCloudOptions)
    missing = [flag for flag, value in (("--project", cloud.project), ("--region", cloud.region),
                                        ("--temp_location", cloud.temp_location or cloud.staging_location))
               if not value]
    if missing:
        raise EasyDataError(f"--runner=DataflowRunner needs {', '.join(missing)} (e.g. --project=my-project"
                            " --region=us-central1 --temp_location=gs://my-bucket/tmp); see docs/dataflow.md")


class LocalRunOptions(PipelineOptions):
    """The options of a local run: `PipelineOptions` that make each view (`view_as(cls)`) once.

    Beam asks for views of a job's options hundreds of times while it builds the job (every applied
    transform, every type-hint check), and each new view builds and runs an argparse parser for its
    class: a part of a local job's start-up (docs/performance.md#figures-behind-design-choices), before any worker gets work. A view reads and writes
    the values it shares with the options it was made from, and the flags it parses never change,
    so one view per class behaves like a new one each time. The views are not pickled with the options.
    """

    def view_as(self, cls: type[Any]) -> Any:
        views = self.__dict__.setdefault("_views", {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def make_runner_and_options(beam_args: list[str]) -> tuple[PipelineRunner | str, PipelineOptions]:
    """Builds the runner and options for `beam_args` (unrecognised flags stay Beam's to judge).

    Local runners and `DaskRunner` come back as runner instances, others as Beam runner names.

    Local runs default to one worker process per usable core (`worker_pool.default_worker_count`),
    each tokenizing with one thread: everything a worker does besides tokenizing (reading, turning
    ids into rows, packing, writing) then runs on every core too, where one in-process worker runs
    it on one Python thread while the tokenizer's threads use the other cores. On 2 cores the two
    measured about equal (docs/performance.md#figures-behind-design-choices); with more cores that one Python thread becomes the
    limit. On a single usable core the job runs in-process. `--direct_num_workers=N` chooses N
    (1: in-process; N > 1: processes unless `--direct_running_mode` says otherwise).
    """
    options = PipelineOptions(beam_args)
    runner_name = options.view_as(StandardOptions).runner
    if is_local_runner(runner_name):
        options = LocalRunOptions(beam_args)
    if is_dask_runner(runner_name):
        runner = _dask_runner()
        runner.check_options(options)
        return runner, options
    if not is_local_runner(runner_name):
        return runner_name, options
    direct = options.view_as(DirectOptions)
    explicit = {a.split("=", 1)[0] for a in beam_args if a.startswith("--")}
    if "--direct_num_workers" not in explicit:
        direct.direct_num_workers = default_worker_count()
    elif direct.direct_num_workers == 0:  # Beam's "one per core"
        direct.direct_num_workers = usable_cores()
    if "--direct_running_mode" not in explicit:
        direct.direct_running_mode = "in_memory" if direct.direct_num_workers == 1 else "multi_processing"
    if "--default_sdk_harness_log_level" not in explicit:
        # Local worker processes log every gRPC channel at INFO; keep the terminal for progress.
        options.view_as(WorkerOptions).default_sdk_harness_log_level = "WARNING"
    return OfflineDirectRunner(), options
