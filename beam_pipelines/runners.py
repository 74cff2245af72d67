"""Choosing the Beam runner and pipeline options from command-line flags.

With no `--runner` (or `--runner=DirectRunner`), a local job runs on Beam's FnApiRunner (the engine
behind DirectRunner) through `OfflineDirectRunner`, which skips Beam's first attempt to start the
Prism runner (that attempt downloads a binary): no download, no network. By default it runs one
worker process per usable core, each tokenizing on its share of the cores (one in-process worker on
a single core); `--direct_num_workers=N` runs N (1: in-process). Its options make each view once
(`LocalRunOptions`).
`--runner=DaskRunner` runs on a dask `distributed` cluster through `ManagedDaskRunner`
(`beam_pipelines.dask_runner`: Beam's DaskRunner with a complete batch translation; without an address
it starts a local cluster). Any other runner name and every other flag pass through to Beam unchanged.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import threading
from typing import Any, Callable, Iterator, Optional

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, WorkerOptions, \
    _BeamArgumentParser
from apache_beam.runners.direct.direct_runner import DirectRunner
from apache_beam.runners.runner import PipelineRunner

from easydata.errors import EasyDataError
from easydata.run.machine import usable_cores
from beam_pipelines.beam_internals import short_state_sampling
from beam_pipelines.worker_pool import LOCAL_RUNNERS, default_worker_count, take_prestarted, \
    tokenizer_threads_per_worker

__all__ = ["OfflineDirectRunner", "LocalRunOptions", "make_runner_and_options", "is_local_runner", "is_dask_runner",
           "unknown_beam_flags", "runs_on_this_machine", "short_state_sampling"]

_DASK_RUNNERS = {"DaskRunner", "ManagedDaskRunner"}


@contextlib.contextmanager
def fail_bundles_of_lost_workers() -> Iterator[None]:
    """Makes a worker's pending bundles fail when its connection breaks, quietly, while the block runs.

    The FnApiRunner reads each worker's instruction responses on a thread that simply dies when the
    stream breaks (the worker process was killed, e.g. by the out-of-memory killer), leaving the
    bundles it was running unanswered, and the runner waited for ever (its stream may also just end,
    as if the worker had finished). Here the end of the stream fails those bundles instead (Beam's
    `ControlFuture.abort`), and any request sent to the worker after it, so the job fails and its
    runner can say which worker ended. The runner's reader of that worker's data stream dies the same
    way, logging a traceback and raising on its thread, and closing that worker logs a traceback:
    these are dropped here, the job's error says it.
    A Beam whose control connection no longer looks like this is left alone.
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    connection = worker_handlers.ControlConnection
    read, push = connection.__dict__.get("_read"), connection.__dict__.get("push")
    if read is None or push is None or not hasattr(worker_handlers.ControlFuture, "abort"):
        yield
        return

    def read_or_abort(self: Any) -> None:
        # The stream ends (with an error, or cleanly when the peer vanished) while requests may be
        # pending: none will be answered. At a normal close nothing is pending.
        broken = None
        try:
            read(self)
        except Exception as e:  # noqa: BLE001 - any broken stream: fail what waits on it
            broken = type(e).__name__
        self._easydata_lost = RuntimeError(f"lost the connection to a worker process ({broken or 'its stream ended'})")
        pending = list(self._futures_by_id.values())
        if broken or pending:
            lost.set()
        for future in pending:
            future.abort(self._easydata_lost)

    def push_or_fail(self: Any, request: Any) -> Any:
        future = push(self, request)
        lost = getattr(self, "_easydata_lost", None)
        if future is not None and lost is not None:  # sent after the stream ended: never answered
            future.abort(lost)
        return future

    def quiet_data_reader(args: threading.ExceptHookArgs) -> None:
        if not (args.thread is not None and args.thread.name == _DATA_READER_THREAD):
            hook(args)

    lost = threading.Event()
    quiet_reads, quiet_closes = _DropMessage(_DATA_READ_FAILED), _DropMessage(_CLOSE_FAILED, only_if=lost.is_set)
    hook = threading.excepthook
    connection._read, connection.push = read_or_abort, push_or_fail
    threading.excepthook = quiet_data_reader
    logging.getLogger(_DATA_PLANE_LOGGER).addFilter(quiet_reads)
    logging.getLogger(worker_handlers.__name__).addFilter(quiet_closes)
    try:
        yield
    finally:
        logging.getLogger(worker_handlers.__name__).removeFilter(quiet_closes)
        logging.getLogger(_DATA_PLANE_LOGGER).removeFilter(quiet_reads)
        threading.excepthook = hook
        connection._read, connection.push = read, push


# The runner-side reader of a worker's data stream: its thread's name, logger and message (Beam's).
_DATA_READER_THREAD = "read_grpc_client_inputs"
_DATA_PLANE_LOGGER = "apache_beam.runners.worker.data_plane"
_DATA_READ_FAILED = "Failed to read inputs in the data plane."
_CLOSE_FAILED = "Error closing worker_handler"


class _DropMessage(logging.Filter):
    """Drops records whose message holds `fragment` (with `only_if`, only while it returns true)."""

    def __init__(self, fragment: str, only_if: Callable[[], bool] = lambda: True):
        super().__init__()
        self._fragment = fragment
        self._only_if = only_if

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self._fragment in record.getMessage() and self._only_if())


class OfflineDirectRunner(DirectRunner):
    """DirectRunner that runs batch pipelines on the FnApiRunner, never trying Prism.

    In `multi_processing` mode the worker processes are forked by `beam_pipelines.worker_pool.StandbyWorkers`
    (a server started ahead of the job when the launcher could, see `prestart`), offered to the
    FnApiRunner as an external worker pool; each runs Beam's harness with a quiet stderr
    (`beam_pipelines.local_worker`).
    """

    def run_pipeline(self, pipeline, options):  # noqa: D401 - Beam's signature
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle
        from apache_beam.transforms import environments
        from google.protobuf import json_format

        if options.view_as(StandardOptions).streaming:
            return super().run_pipeline(pipeline, options)
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode != "multi_processing":
            with short_state_sampling():
                return fn_runner.FnApiRunner(provision_info=provision_info).run_pipeline(pipeline, options)
        workers = take_prestarted()
        # The FnApiRunner replaces our environment when it sees `multi_processing`, and warns when it
        # sees several workers `in_memory`: hand it the latter, with that warning filtered out.
        quiet = _DropMessage("direct_running_mode")
        fn_logger = logging.getLogger(fn_runner.__name__)
        direct.direct_running_mode = "in_memory"
        fn_logger.addFilter(quiet)
        try:
            address = workers.serve(json_format.MessageToJson(encoded),
                                    tokenizer_threads=tokenizer_threads_per_worker(direct.direct_num_workers))
            environment = environments.ExternalEnvironment(address, capabilities=environments.python_sdk_capabilities())
            runner = fn_runner.FnApiRunner(default_environment=environment, provision_info=provision_info)
            with fail_bundles_of_lost_workers():
                return runner.run_pipeline(pipeline, options)
        except Exception as e:
            failures = [] if isinstance(e, EasyDataError) else workers.failures()
            if failures:
                raise EasyDataError(f"a local worker process ended during the job ({'; '.join(failures)}; a"
                                    " SIGKILL is often the kernel's out-of-memory killer): the output was not"
                                    " committed; run again, with --resume to keep the tokenized input") from e
            raise
        finally:
            direct.direct_running_mode = "multi_processing"
            fn_logger.removeFilter(quiet)
            workers.close()


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
    from beam_pipelines.dask_runner import ManagedDaskRunner

    return ManagedDaskRunner()


def runs_on_this_machine(runner: PipelineRunner | str, options: PipelineOptions) -> bool:
    """Whether the job's workers share this machine's files (then they can report progress to it)."""
    if isinstance(runner, str):
        return False
    uses_local_cluster = getattr(runner, "uses_local_cluster", None)
    return uses_local_cluster is None or uses_local_cluster(options)


def _known_flags() -> set[str]:
    """Names of the flags every registered options class declares (a flag's name may differ from the
    option it sets: Beam's `--dask_client_address` sets `address`)."""
    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return {flag[2:].replace("-", "_") for action in parser._actions for flag in action.option_strings
            if flag.startswith("--")}


def unknown_beam_flags(beam_args: list[str]) -> list[tuple[str, Optional[str]]]:
    """Flags no registered Beam options class declares, each with the closest known flag (or None).

    Beam itself silently drops such flags, so a typo like `--runer=DataflowRunner` would otherwise
    run the job locally. Options of runners not imported yet are unknown here, hence the suggestion:
    callers refuse flags that look like typos and only warn about the others.
    """
    if is_dask_runner(PipelineOptions(beam_args).view_as(StandardOptions).runner):
        _dask_runner()  # registers the Dask options (or says how to install dask)
    known = _known_flags()
    found = []
    for arg in beam_args:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        if name and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            found.append((arg.split("=", 1)[0], f"--{close[0]}" if close else None))
    return found


class LocalRunOptions(PipelineOptions):
    """The options of a local run: `PipelineOptions` that make each view (`view_as(cls)`) once.

    Beam asks for views of a job's options hundreds of times while it builds the job (every applied
    transform, every type-hint check), and each new view builds and runs an argparse parser for its
    class: ~0.3 s of a local job's start-up, before any worker gets work. A view reads and writes
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
    measured about equal (docs/performance.md); with more cores that one Python thread becomes the
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
