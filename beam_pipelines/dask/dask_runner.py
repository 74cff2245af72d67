"""`--runner=DaskRunner`: batch pipelines on a dask `distributed` cluster, with the local runner's output.

Beam ships a DaskRunner (`apache_beam.runners.dask`) that turns a pipeline into dask bags. Its
translation (checked against Beam 2.77) is a minimum viable one that our batch pipeline outgrows:

- a multi-output ParDo's outputs are not told apart: every consumer of any tag receives all of them;
- outputs emitted in `finish_bundle` are dropped;
- only the bag of the last transform visited is computed: other branches never run;
- a side input is computed inside each consuming task by a nested dask computation (an
  `AsSingleton(CombineGlobally(sum))` side input came out different in different tasks);
- primitives it does not know (`Impulse`, `beam.io.Read`, ...) silently become no-ops, and stateful
  DoFns run without state;
- a `Create` puts up to 128 elements in one partition: our few input work units all go to one task;
- the client it opens is never closed.

`ManagedDaskRunner` keeps Beam's `DaskOptions` (`--dask_client_address`, `--dask_scheduler_file`,
`--dask_connection_timeout`, `--dask_npartitions`, ...) and Beam's graph rewrites (`dask_overrides`:
Create, GroupByKey, Flatten, Reshuffle), and translates the resulting primitives itself:

- ParDo runs each partition as one bundle through Beam's own `DoFnRunner` (setup, start_bundle,
  process, finish_bundle, teardown), collecting `(tag, WindowedValue)` pairs; each output
  PCollection selects its tag. Side inputs are dask `Item`s in the same graph, computed once and
  handed to every partition.
- GroupByKey groups by the key's encoding under a deterministic Beam coder (as Beam runners do) with
  dask's task-based shuffle, into two partitions per worker thread of the cluster (its parallelism;
  `--dask_npartitions` sets it), then runs Beam's GroupAlsoByWindow DoFn.
- Create holds one element per partition (up to 1,024 partitions) unless `--dask_npartitions` /
  `--dask_partition_size` say otherwise; Flatten concatenates; Reshuffle passes through.
- Every PCollection nobody consumes is computed (reduced to a count: no data travels back).
- Per-partition steps are materialised graph layers, not dask's blockwise `map_partitions`: a
  blockwise task taking a side input made dask recompute upstream partitions, running a ParDo's
  side effects (staged files) twice, concurrently.
- Anything else (`Impulse`, `beam.io.Read`, stateful DoFns, `TestStream`, unbounded input) is
  refused, before any cluster starts, with an error naming the step.

Without `--dask_client_address` / `--dask_scheduler_file`, the job starts a `distributed.LocalCluster`
(`--dask_local_workers` worker processes, default one per core, one thread each) and closes it when
the job ends. Cost: every element crosses process boundaries pickled, a dask bag partition is held
in memory whole (a GroupByKey partition holds its share of the data), and each bundle sets up its
DoFns (the tokenizer loads once per partition, not once per worker).
"""

from __future__ import annotations

import functools
import logging
import operator
from typing import Any, Iterable, Optional

from apache_beam import pvalue
from apache_beam.coders import registry as coder_registry
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnRunner, DoFnState, Receiver
from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunner
from apache_beam.runners.runner import PipelineResult, PipelineState
from apache_beam.transforms.core import ParDo
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.userstate import is_stateful_dofn
from apache_beam.transforms.window import GlobalWindows
from apache_beam.typehints import trivial_inference
from apache_beam.utils import counters
from apache_beam.utils.windowed_value import WindowedValue
import dask.bag as db
import distributed
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from transforms.beam_internals import DaskPrimitives, DropMessage, dask_primitives, side_input_view
from easydata.errors import EasyDataError
from easydata.run.machine import usable_cores

__all__ = ["ManagedDaskRunner", "LocalDaskClusterOptions"]

# A Create's elements are work units here (input splits): each should be its own task.
_MAX_CREATE_PARTITIONS = 1024
# GroupByKey outputs: partitions per worker thread (some slack for uneven groups), or a fixed count
# when the cluster has no workers yet (an adaptive cluster); `--dask_npartitions` overrides both.
_SHUFFLES_PER_THREAD = 2
_DEFAULT_SHUFFLE_PARTITIONS = 32


class LocalDaskClusterOptions(PipelineOptions):
    """Options of the local cluster started when no scheduler address is given."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--dask_local_workers", type=int, default=None,
            help="Worker processes of the local dask cluster started when no --dask_client_address or"
                 " --dask_scheduler_file is given (default: one per core; one thread each).")


# ---- tasks (module-level functions: they travel to the workers by reference) --------------------------

class _Collect(Receiver):
    def __init__(self, tag: Optional[str], outputs: list):
        self._tag, self._outputs = tag, outputs

    def receive(self, windowed_value: WindowedValue) -> None:
        self._outputs.append((self._tag, windowed_value))


class _Receivers(dict):
    """Tag -> receiver; outputs to undeclared tags are collected too (nobody selects them)."""

    def __init__(self, outputs: list):
        super().__init__()
        self._outputs = outputs

    def __missing__(self, tag: Optional[str]) -> _Collect:
        self[tag] = receiver = _Collect(tag, self._outputs)
        return receiver


def _run_bundle(payload: bytes, elements: Iterable[WindowedValue], *side_values: list) -> list:
    """Runs one partition as one bundle of a ParDo; returns its outputs as (tag, WindowedValue) pairs."""
    fn, args, kwargs, views, windowing, label = pickler.loads(payload)
    outputs: list = []
    side_inputs = [SideInputMap(view_class, view_options, values)
                   for (view_class, view_options), values in zip(views, side_values)]
    runner = DoFnRunner(fn, args, kwargs, side_inputs, windowing, tagged_receivers=_Receivers(outputs),
                        step_name=label, state=DoFnState(counters.CounterFactory()))
    runner.setup()
    try:
        runner.start()
        for element in elements:
            runner.process(element)
        runner.finish()
    finally:
        runner.teardown()
    return outputs


def _select(tag: Optional[str], outputs: Iterable[tuple[Optional[str], WindowedValue]]) -> list:
    return [value for t, value in outputs if t == tag]


def _concat(parts: Iterable[list]) -> list:
    return [value for part in parts for value in part]


def _encode_keys(key_coder: Any, elements: Iterable[WindowedValue]) -> list[tuple[bytes, Any, Any]]:
    return [(key_coder.encode(key), key, value) for key, value in (e.value for e in elements)]


def _grouped(groups: Iterable[tuple[bytes, list[tuple[bytes, Any, Any]]]]) -> list[WindowedValue]:
    return [GlobalWindows.windowed_value((members[0][1], [value for _, _, value in members])) for _, members in groups]


def _count(part: Iterable[Any]) -> int:
    return sum(1 for _ in part)


def _per_partition(bag: db.Bag, prefix: str, func: Any, *items: db.Item, data: Any = None) -> db.Bag:
    """`func([data,] partition, *items)` for every partition of `bag`, as a materialised graph layer.

    dask's own `Bag.map_partitions` builds blockwise layers, and a blockwise task that takes an `Item`
    (here: a side input) made dask recompute the upstream partitions: a ParDo's side effects
    (staged files) ran twice, concurrently. `data` (a ParDo's pickled DoFn) is one key of the layer,
    shipped once per worker instead of once per task.
    """
    name = f"{prefix}-{tokenize(bag.name, func, data, *(item.key for item in items))}"
    leading = () if data is None else (f"{name}-data",)
    layer: dict[Any, Any] = {} if data is None else {leading[0]: data}
    layer.update({(name, i): (func, *leading, (bag.name, i), *(item.key for item in items))
                  for i in range(bag.npartitions)})
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[bag, *items])
    return db.Bag(graph, name, bag.npartitions)


# ---- translation -------------------------------------------------------------------------------------



def _main_inputs(node: AppliedPTransform) -> list[pvalue.PCollection]:
    return [p for p in node.inputs if isinstance(p, pvalue.PCollection)]


def _refusal(node: AppliedPTransform, primitives: DaskPrimitives) -> Optional[str]:
    """Why this runner cannot run a primitive step (None: it can)."""
    transform = node.transform
    if any(not p.is_bounded for p in _main_inputs(node)):
        return f"the DaskRunner runs batch pipelines only: step {node.full_label!r} reads an unbounded PCollection"
    if not isinstance(transform, (ParDo, primitives.create, primitives.group_by_key, primitives.flatten,
                                  primitives.reshuffle)):
        return (f"the DaskRunner cannot run step {node.full_label!r}: {type(transform).__name__} is not supported"
                " (supported: Create, ParDo without state or timers, GroupByKey, Flatten, Reshuffle and composites"
                " of them)")
    if isinstance(transform, ParDo) and is_stateful_dofn(transform.fn):
        return (f"the DaskRunner cannot run step {node.full_label!r}: stateful DoFns (state or timers) are not"
                " supported")
    return None


class _SupportCheck(PipelineVisitor):
    """Raises `NotImplementedError` at the first step the translation cannot run."""

    def __init__(self, primitives: DaskPrimitives):
        self._primitives = primitives

    def visit_transform(self, node: AppliedPTransform) -> None:
        reason = _refusal(node, self._primitives)
        if reason is not None:
            raise NotImplementedError(reason)


class _Translator(PipelineVisitor):
    """Builds one dask bag per PCollection, visiting the pipeline's primitives in topological order.

    Args:
      bag_kwargs: `npartitions` or `partition_size` of every Create (default: one element per
        partition, up to 1,024 partitions).
      shuffle_partitions: output partitions of every GroupByKey (its parallelism).
      primitives: the transforms Beam's `dask_overrides()` rewrote the pipeline into.
    """

    def __init__(self, bag_kwargs: dict[str, int], shuffle_partitions: int, primitives: DaskPrimitives):
        self._primitives = primitives
        self.bags: dict[pvalue.PCollection, db.Bag] = {}
        self.consumed: set[pvalue.PCollection] = set()
        self._bag_kwargs = bag_kwargs
        self._shuffle_partitions = shuffle_partitions

    def visit_transform(self, node: AppliedPTransform) -> None:  # `_SupportCheck` has passed every step
        transform, main, primitives = node.transform, _main_inputs(node), self._primitives
        self.consumed.update(main)
        self.consumed.update(si.pvalue for si in node.side_inputs)
        if isinstance(transform, primitives.create):
            self._set(node, self._create(list(transform.values)))
        elif isinstance(transform, ParDo):
            self._pardo(node, main[0])
        elif isinstance(transform, primitives.group_by_key):
            self._set(node, self._group_by_key(node, main[0]))
        elif isinstance(transform, primitives.flatten):
            bags = [self.bags[p] for p in main]
            self._set(node, db.concat(bags) if bags else db.from_sequence([], npartitions=1))
        else:  # reshuffle: partitions already spread the work
            self._set(node, self.bags[main[0]])

    def sinks(self) -> list[db.Bag]:
        """Bags of the PCollections no step consumes: computing them runs the whole pipeline."""
        return [bag for pcoll, bag in self.bags.items() if pcoll not in self.consumed]

    def _set(self, node: AppliedPTransform, bag: db.Bag) -> None:
        (output,) = node.outputs.values()
        self.bags[output] = bag

    def _create(self, values: list[Any]) -> db.Bag:
        items = [GlobalWindows.windowed_value(v) for v in values]
        if self._bag_kwargs:
            return db.from_sequence(items, **self._bag_kwargs)
        return db.from_sequence(items, npartitions=max(1, min(len(items), _MAX_CREATE_PARTITIONS)))

    def _pardo(self, node: AppliedPTransform, main: pvalue.PCollection) -> None:
        transform = node.transform
        views = [(type(si), side_input_view(si)) for si in node.side_inputs]
        payload = pickler.dumps((transform.fn, transform.args, transform.kwargs, views, main.windowing,
                                 node.full_label))
        sides = [self.bags[si.pvalue].reduction(list, _concat) for si in node.side_inputs]
        results = _per_partition(self.bags[main], "pardo", _run_bundle, *sides, data=payload)
        for tag, output in node.outputs.items():
            self.bags[output] = _per_partition(results, f"select-{tag}", functools.partial(_select, tag))

    def _group_by_key(self, node: AppliedPTransform, main: pvalue.PCollection) -> db.Bag:
        key_type, _ = trivial_inference.key_value_types(main.element_type)
        key_coder = coder_registry.get_coder(key_type).as_deterministic_coder(node.full_label)
        keyed = _per_partition(self.bags[main], "key", functools.partial(_encode_keys, key_coder))
        # dask's task shuffle costs about n^2 small tasks for n partitions (n <= 32): shuffle among as many
        # partitions as the cluster runs in parallel, not as many as the input happens to have.
        if keyed.npartitions != self._shuffle_partitions:
            keyed = keyed.repartition(npartitions=self._shuffle_partitions)
        return _per_partition(keyed.groupby(operator.itemgetter(0), shuffle="tasks"), "grouped", _grouped)


# ---- the runner --------------------------------------------------------------------------------------

class _DaskJob(PipelineResult):
    """A submitted job: waiting gathers every sink (raising a worker's error) and then closes the client
    (and the local cluster when this job started it)."""

    def __init__(self, client: distributed.Client, futures: list, cluster: Optional[distributed.LocalCluster]):
        super().__init__(PipelineState.RUNNING)
        self._client, self._futures, self._cluster = client, futures, cluster

    def wait_until_finish(self, duration: Optional[int] = None) -> str:
        if self._state != PipelineState.RUNNING:
            return self._state
        try:
            for _ in distributed.as_completed(self._futures, loop=self._client.loop, with_results=True,
                                              timeout=None if duration is None else duration / 1000):
                pass
        except BaseException as e:
            if isinstance(e, TimeoutError) and duration is not None and not all(f.done() for f in self._futures):
                return self._state  # `duration` (milliseconds) passed: still running
            self._state = PipelineState.FAILED
            self._close()
            raise
        self._state = PipelineState.DONE
        self._close()
        return self._state

    def cancel(self) -> str:
        self._client.cancel(self._futures)
        self._state = PipelineState.CANCELLED
        self._close()
        return self._state

    def _close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            close_local_cluster(self._cluster)

    def metrics(self) -> Any:
        raise NotImplementedError("the DaskRunner does not collect Beam metrics")


#: What dask's nanny logs when a worker process of a closing cluster has not exited within its grace time
#: (4 s): a busy machine ends a large Python process slowly. The job is over by then; the kill is harmless.
_SLOW_EXIT = "Worker process still alive after"


def close_local_cluster(cluster: distributed.LocalCluster) -> None:
    """Closes a cluster this process started, without the nanny's warning for each worker it has to kill
    after the job (two `WARNING:distributed.nanny` lines at the end of a successful run on a busy machine)."""
    nanny_log = logging.getLogger("distributed.nanny")
    quiet = DropMessage(_SLOW_EXIT)
    nanny_log.addFilter(quiet)
    try:
        cluster.close()
    finally:
        nanny_log.removeFilter(quiet)


def _start_local_cluster(workers: Optional[int]) -> distributed.LocalCluster:
    return distributed.LocalCluster(n_workers=workers or usable_cores(), threads_per_worker=1, processes=True,
                                    dashboard_address=":0", silence_logs=logging.ERROR,
                                    preload=["beam_pipelines.dask.dask_worker"])


class ManagedDaskRunner(DaskRunner):
    """Beam's DaskRunner with a complete translation of the batch primitives (see module docstring).

    `uses_local_cluster(options)` says whether the job runs on a cluster this process starts (so its
    workers share this machine's files).
    """

    @staticmethod
    def check_options(options: PipelineOptions) -> None:
        """Raises `EasyDataError` for options that cannot work (before any work is prepared)."""
        workers = options.view_as(LocalDaskClusterOptions).dask_local_workers
        if workers is not None and workers < 1:
            raise EasyDataError(f"--dask_local_workers must be at least 1, got {workers}")
        if options.view_as(StandardOptions).streaming:
            raise EasyDataError("the DaskRunner runs batch pipelines only (no --streaming)")

    @staticmethod
    def uses_local_cluster(options: PipelineOptions) -> bool:
        dask_options = options.view_as(DaskOptions)
        return dask_options.address is None and dask_options.scheduler_file is None

    def run_pipeline(self, pipeline: Any, options: PipelineOptions) -> PipelineResult:
        self.check_options(options)
        client_kwargs = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = {k: client_kwargs.pop(k) for k in ("npartitions", "partition_size") if k in client_kwargs}
        primitives = dask_primitives()
        if primitives is None:
            raise EasyDataError("the DaskRunner translation was written against apache-beam 2.77 and this Beam's"
                                " DaskRunner no longer looks like it: install apache-beam>=2.77,<2.78")
        pipeline.replace_all(primitives.overrides())
        pipeline.visit(_SupportCheck(primitives))  # before any cluster starts
        cluster = None
        if self.uses_local_cluster(options):
            cluster = _start_local_cluster(options.view_as(LocalDaskClusterOptions).dask_local_workers)
            client_kwargs["address"] = cluster
        where = client_kwargs.get("address") or client_kwargs.get("scheduler_file")
        try:
            client = distributed.Client(set_as_default=False, **client_kwargs)
        except (OSError, TimeoutError, ValueError) as e:
            if cluster is not None:
                close_local_cluster(cluster)
            raise EasyDataError(f"cannot connect to the dask scheduler at {where}: {e}") from e
        try:
            threads = sum(client.nthreads().values())
            shuffle_partitions = bag_kwargs.get("npartitions") or (
                _SHUFFLES_PER_THREAD * threads if threads else _DEFAULT_SHUFFLE_PARTITIONS)
            translator = _Translator(bag_kwargs, shuffle_partitions, primitives)
            pipeline.visit(translator)
            futures = client.compute([sink.reduction(_count, sum) for sink in translator.sinks()])
        except BaseException:
            client.close()
            if cluster is not None:
                close_local_cluster(cluster)
            raise
        return _DaskJob(client, futures, cluster)
