"""Where this package touches Apache Beam's private internals, each behind a guard.

Every function here changes something Beam does not offer as an option, for local-run speed or
clean failure, and first checks that Beam still looks as expected; when it does not (a newer
Beam), it leaves Beam alone and the job runs as Beam would run it (slower, never wrong). Each guard
has a test (`tests/test_beam_internals.py`).

Here: the state sampler's sleep (`short_state_sampling`), failing a lost worker's bundles
(`fail_bundles_of_lost_workers`: the control connection's `_read` / `push`, `_futures_by_id`,
`threading.excepthook`), the names of every Beam flag (`beam_flag_names`: Beam's argument parser
class and its `_actions`), the primitives Beam's DaskRunner rewrites a pipeline into (`dask_primitives`:
the private classes of `apache_beam.runners.dask.overrides`) and a side input's view options
(`side_input_view`: `AsSideInput._view_options`) and coders that size an element without encoding it
(`TypeCoder`: `FastCoder._create_impl` returning a `CallbackCoderImpl`) and stage descriptors that hold only
their own PCollections (`lean_bundle_descriptors`: `BundleContextManager._build_process_bundle_descriptor`). No other module of this project names a private Beam
attribute (`tests/test_beam_internals.py` checks the source).

Beam's internal modules (its runner and worker internals: `fn_runner`, the SDK harness, the job and worker-pool
services, the Dask runner's internals, `coder_impl`) are imported only here and in the two packages whose
contract is to drive them: `beam_pipelines.local` (the local worker machinery: `offline_runner`, `worker_pool`,
`local_worker`) and `beam_pipelines.dask` (the Dask translation); the same test checks every other module.

Not here because they touch no private name: `local/lean_import` hides optional libraries Beam imports
when installed (a plain import hook), `local/worker_pool` serves Beam's public worker-pool gRPC service.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator, NamedTuple, Optional

__all__ = ["STATE_SAMPLING_PERIOD_MS", "short_state_sampling", "state_sampler_is_known",
           "fail_bundles_of_lost_workers", "control_connection_is_known", "beam_flag_names", "DropMessage",
           "DaskPrimitives", "dask_primitives", "side_input_view", "TypeCoder", "type_coders_are_known",
           "lean_bundle_descriptors", "bundle_descriptors_are_known"]


#: Longest sleep of Beam's per-bundle state sampler thread in local runs (Beam's default: 200 ms).
STATE_SAMPLING_PERIOD_MS = 10


@contextlib.contextmanager
def short_state_sampling(period_ms: int = STATE_SAMPLING_PERIOD_MS) -> Iterator[None]:
    """Makes bundles end without waiting for Beam's state sampler, while the block runs.

    Each bundle starts a thread that samples which step is running, sleeping up to
    `DEFAULT_SAMPLING_PERIOD_MS` (200 ms) between samples, and ending the bundle joins that thread:
    a local job lost about a second, idle, over its dozen bundles (py-spy, docs/performance.md).
    The sampler sleeps without the GIL, so a shorter period costs nothing measurable. A Beam whose
    sampler no longer looks like this is left alone.
    """
    from apache_beam.runners.worker import statesampler

    if not state_sampler_is_known():
        yield
        return
    init = statesampler.StateSampler.__init__
    defaults = init.__defaults__
    init.__defaults__ = (period_ms,)
    try:
        yield
    finally:
        init.__defaults__ = defaults


def state_sampler_is_known() -> bool:
    """The guard: Beam's `StateSampler.__init__` still takes the sampling period as its one default."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    period = getattr(statesampler, "DEFAULT_SAMPLING_PERIOD_MS", None)
    return period is not None and getattr(init, "__defaults__", None) in ((period,), (STATE_SAMPLING_PERIOD_MS,))


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

    if not control_connection_is_known():
        yield
        return
    connection = worker_handlers.ControlConnection
    read, push = connection.__dict__["_read"], connection.__dict__["push"]

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
    quiet_reads, quiet_closes = DropMessage(_DATA_READ_FAILED), DropMessage(_CLOSE_FAILED, only_if=lost.is_set)
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


@contextlib.contextmanager
def lean_bundle_descriptors() -> Iterator[None]:
    """Makes the FnApiRunner describe each stage with the PCollections its transforms use, while the block runs.

    Beam copies every PCollection of the whole pipeline into each stage's `ProcessBundleDescriptor`; a
    worker parses and keeps every descriptor, and each of its bundle processors a copy. The pipeline has
    a branch of stages per dataset (or split), so the bytes grow with the square of the datasets: 120
    datasets of one document each took 90 s and a worker peaked at 3.1 GB (40 datasets: 287 descriptors of
    1,661 PCollections each, 75 MB). A worker reads a descriptor's PCollections only through its
    transforms' inputs and outputs (their coders and windowing), so only those are copied in: the
    descriptor is Beam's but for that (`bundle_descriptors_are_known` checks it has no other field). A Beam
    whose runner no longer builds descriptors this way is left alone.
    """
    if not bundle_descriptors_are_known():
        yield
        return
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.portability.fn_api_runner import execution

    manager = execution.BundleContextManager
    build = manager.__dict__["_build_process_bundle_descriptor"]

    def build_lean(self: Any) -> Any:
        components = self.execution_context.pipeline_components
        transforms = {transform.unique_name: transform for transform in self.stage.transforms}
        used = {pcoll for transform in transforms.values()
                for pcoll in (*transform.inputs.values(), *transform.outputs.values())}
        return beam_fn_api_pb2.ProcessBundleDescriptor(
            id=self.bundle_uid, transforms=transforms,
            pcollections={pcoll: components.pcollections[pcoll] for pcoll in used},
            coders=dict(components.coders.items()),
            windowing_strategies=dict(components.windowing_strategies.items()),
            environments=dict(components.environments.items()),
            state_api_service_descriptor=self.state_api_service_descriptor(),
            timer_api_service_descriptor=self.data_api_service_descriptor())

    manager._build_process_bundle_descriptor = build_lean
    try:
        yield
    finally:
        manager._build_process_bundle_descriptor = build


#: Every field of Beam's `ProcessBundleDescriptor`, as `lean_bundle_descriptors` fills them (Beam 2.77).
_DESCRIPTOR_FIELDS = {"id", "transforms", "pcollections", "windowing_strategies", "coders", "environments",
                      "state_api_service_descriptor", "timer_api_service_descriptor"}


def bundle_descriptors_are_known() -> bool:
    """The guard: a `ProcessBundleDescriptor` has exactly the fields `lean_bundle_descriptors` fills, and the
    FnApiRunner's `BundleContextManager` still builds it in `_build_process_bundle_descriptor` from what
    that reads (the stage's transforms, the pipeline's components, the service descriptors)."""
    try:
        from apache_beam.portability.api import beam_fn_api_pb2
        from apache_beam.runners.portability.fn_api_runner import execution
    except ImportError:
        return False
    fields = set(beam_fn_api_pb2.ProcessBundleDescriptor.DESCRIPTOR.fields_by_name)
    build = getattr(execution, "BundleContextManager", object).__dict__.get("_build_process_bundle_descriptor")
    names = set(getattr(getattr(build, "__code__", None), "co_names", ()))
    return fields == _DESCRIPTOR_FIELDS and {
        "stage", "transforms", "execution_context", "pipeline_components", "pcollections", "bundle_uid",
        "state_api_service_descriptor", "data_api_service_descriptor"} <= names


# The runner-side reader of a worker's data stream: its thread's name, logger and message (Beam's).
_DATA_READER_THREAD = "read_grpc_client_inputs"
_DATA_PLANE_LOGGER = "apache_beam.runners.worker.data_plane"
_DATA_READ_FAILED = "Failed to read inputs in the data plane."
_CLOSE_FAILED = "Error closing worker_handler"


class DropMessage(logging.Filter):
    """Drops records whose message holds `fragment` (with `only_if`, only while it returns true)."""

    def __init__(self, fragment: str, only_if: Callable[[], bool] = lambda: True):
        super().__init__()
        self._fragment = fragment
        self._only_if = only_if

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self._fragment in record.getMessage() and self._only_if())


def control_connection_is_known() -> bool:
    """The guard: Beam's runner-side `ControlConnection` still reads with `_read`, sends with `push`,
    keeps pending requests in `_futures_by_id`, and its futures can `abort`."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    connection = worker_handlers.ControlConnection
    return (callable(connection.__dict__.get("_read")) and callable(connection.__dict__.get("push"))
            and hasattr(worker_handlers.ControlFuture, "abort")
            and "_futures_by_id" in getattr(connection.__init__, "__code__", type("", (), {"co_names": ()})).co_names)


def beam_flag_names() -> Optional[set[str]]:
    """Names of the flags every registered Beam options class declares (a flag's name may differ from
    the option it sets: `--dask_client_address` sets `address`); None when Beam's parser no longer
    looks as expected (the guard: then no flag is called unknown, as Beam itself would not)."""
    from apache_beam.options import pipeline_options

    parser_class = getattr(pipeline_options, "_BeamArgumentParser", None)
    if parser_class is None:
        return None
    parser = parser_class(allow_abbrev=False)
    classes = {str(c): c for c in pipeline_options.PipelineOptions.__subclasses__()}.values()
    if not all(hasattr(cls, "_add_argparse_args") for cls in classes) or not hasattr(parser, "_actions"):
        return None
    for cls in classes:
        cls._add_argparse_args(parser)
    return {flag[2:].replace("-", "_") for action in parser._actions for flag in action.option_strings
            if flag.startswith("--")}


class DaskPrimitives(NamedTuple):
    """The transforms Beam's `dask_overrides()` rewrite a pipeline into (besides `ParDo`), and the rewrite."""

    create: type  # holds its elements in `.values`
    group_by_key: type
    flatten: type
    reshuffle: type
    overrides: Callable[[], list]


def dask_primitives() -> Optional[DaskPrimitives]:
    """Beam's DaskRunner primitives (private classes of `apache_beam.runners.dask.overrides`); None when
    this Beam no longer has them as expected (the guard: the caller then refuses to run, since Beam's
    own DaskRunner translation loses outputs, see `beam_pipelines.dask.dask_runner`)."""
    try:
        from apache_beam.runners.dask import overrides
    except ImportError:
        return None
    names = ("_Create", "_GroupByKeyOnly", "_Flatten", "_Reshuffle")
    classes = [getattr(overrides, name, None) for name in names]
    create = classes[0]
    if not all(isinstance(c, type) for c in classes) or not callable(getattr(overrides, "dask_overrides", None)):
        return None
    if "values" not in getattr(create, "__dataclass_fields__", {}):
        return None
    return DaskPrimitives(*classes, overrides.dask_overrides)


def side_input_view(side_input: Any) -> Any:
    """A side input's view options (Beam's `AsSideInput._view_options()`), which rebuild its view
    (`SideInputMap`) in a worker; raises `RuntimeError` when this Beam has no such method."""
    view_options = getattr(side_input, "_view_options", None)
    if not callable(view_options):
        raise RuntimeError(f"this Apache Beam's side inputs have no _view_options(): the DaskRunner translation"
                           f" was written against apache-beam 2.77 ({type(side_input).__name__})")
    return view_options()


def type_coders_are_known() -> bool:
    """Whether this Beam's `FastCoder` builds its implementation in `_create_impl` and its `CallbackCoderImpl`
    takes an encoder, a decoder and a size estimator (what `TypeCoder` relies on): tried on a probe value."""
    try:
        from apache_beam.coders.coder_impl import CallbackCoderImpl
        from apache_beam.coders.coders import FastCoder

        impl = CallbackCoderImpl(lambda value: b"probe", lambda data: data.decode(), lambda value: 7)
        return callable(FastCoder.__dict__.get("_create_impl")) and impl.estimate_size(object()) == 7 \
            and impl.decode(impl.encode(object())) == "probe"
    except Exception:  # noqa: BLE001 - any other Beam: its own coders are used
        return False


def _fast_coder_base() -> type:
    from apache_beam.coders.coders import FastCoder

    return FastCoder


class TypeCoder(_fast_coder_base()):  # type: ignore[misc]
    """A Beam coder for one Python type (`TYPE`) from three functions: `encode(value) -> bytes`,
    `decode(bytes) -> value` and `estimate(value) -> int`, the size Beam's element counters record without
    encoding the value (they encode sampled elements to measure them otherwise). Equal to any other instance
    of its class; not deterministic (values only, never keys). Register it only when `type_coders_are_known()`."""

    TYPE: type

    def _create_impl(self) -> Any:
        from apache_beam.coders.coder_impl import CallbackCoderImpl

        cls = type(self)
        return CallbackCoderImpl(cls.encode, cls.decode, cls.estimate)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return self.TYPE

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))
