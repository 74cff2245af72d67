"""Each guard of `transforms.beam_internals`: it recognises the Beam installed here, and when Beam
looks different it leaves Beam alone (the job then runs as Beam would run it)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory

from transforms.beam_internals import STATE_SAMPLING_PERIOD_MS, short_state_sampling, state_sampler_is_known


def _period() -> int:
    return statesampler.StateSampler("s", CounterFactory()).sampling_period_ms


def test_state_sampler_guard_knows_this_beam() -> None:
    assert state_sampler_is_known()
    with short_state_sampling():
        assert _period() == STATE_SAMPLING_PERIOD_MS
    assert _period() == statesampler.DEFAULT_SAMPLING_PERIOD_MS


def test_state_sampler_guard_leaves_an_unknown_beam_alone() -> None:
    init = statesampler.StateSampler.__init__
    saved = init.__defaults__
    init.__defaults__ = (123,)  # a Beam whose sampler takes another default
    try:
        assert not state_sampler_is_known()
        with short_state_sampling():
            assert _period() == 123
    finally:
        init.__defaults__ = saved


def test_control_connection_guard(monkeypatch) -> None:
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    from transforms.beam_internals import control_connection_is_known, fail_bundles_of_lost_workers

    connection = worker_handlers.ControlConnection
    original = connection.__dict__["_read"]
    assert control_connection_is_known()
    with fail_bundles_of_lost_workers():
        assert connection.__dict__["_read"] is not original  # hooked while the job runs
    assert connection.__dict__["_read"] is original
    monkeypatch.delattr(worker_handlers.ControlFuture, "abort")  # a Beam whose futures cannot abort
    assert not control_connection_is_known()
    with fail_bundles_of_lost_workers():
        assert connection.__dict__["_read"] is original  # left alone


def test_flag_names_guard(monkeypatch) -> None:
    from apache_beam.options import pipeline_options

    from transforms.beam_internals import beam_flag_names
    from beam_pipelines.runners import unknown_beam_flags

    names = beam_flag_names()
    assert {"runner", "direct_num_workers", "temp_location"} <= names
    assert unknown_beam_flags(["--runer=DirectRunner"]) == [("--runer", "--runner")]
    class OtherParser:  # a Beam whose private parser no longer keeps `_actions`
        def __init__(self, **options: object) -> None:
            pass

    with monkeypatch.context() as patched:
        patched.setattr(pipeline_options, "_BeamArgumentParser", OtherParser)
        assert beam_flag_names() is None
    import beam_pipelines.runners as runners

    monkeypatch.setattr(runners, "beam_flag_names", lambda: None)
    assert unknown_beam_flags(["--runer=DirectRunner"]) == []  # then no flag is called unknown


def test_dask_primitives_guard(monkeypatch, tmp_path, request) -> None:
    """The DaskRunner's primitives are known here; on a Beam without them the runner refuses in one line
    before any cluster starts (Beam's own translation would lose outputs: never a silent fallback)."""
    pytest.importorskip("dask", reason="the Dask extra is not installed (pip install -e '.[dask]')")
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dask import overrides

    from transforms.beam_internals import dask_primitives, side_input_view
    from beam_pipelines.dask.dask_runner import ManagedDaskRunner
    from easydata.errors import EasyDataError

    primitives = dask_primitives()
    assert primitives is not None and primitives.create is overrides._Create
    built = beam.Pipeline()
    request.addfinalizer(lambda: shutil.rmtree(built.local_tempdir, ignore_errors=True))  # Beam's, removed by a run
    assert side_input_view(beam.pvalue.AsList(built | beam.Create([1]))) is not None
    monkeypatch.delattr(overrides, "_Reshuffle")  # a Beam whose DaskRunner rewrites differently
    assert dask_primitives() is None
    pipeline = beam.Pipeline(options=PipelineOptions(["--dask_scheduler_file", str(tmp_path / "none.json")]))
    request.addfinalizer(lambda: shutil.rmtree(pipeline.local_tempdir, ignore_errors=True))
    _ = pipeline | beam.Create([1]) | beam.Map(str)
    with pytest.raises(EasyDataError, match="apache-beam>=2.77,<2.78"):
        ManagedDaskRunner().run_pipeline(pipeline, pipeline.options)
    with pytest.raises(RuntimeError, match="_view_options"):
        side_input_view(object())


def _private_beam_names(path: Path) -> list[str]:
    """Private Beam names a module touches: `from apache_beam... import _x`, attribute chains rooted at a
    name imported from Beam with a `_x` part, and `getattr(<Beam name>, "_x")`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    beam_names: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apache_beam"):
            for alias in node.names:
                beam_names.add(alias.asname or alias.name)
                if alias.name.startswith("_"):
                    found.append(f"{path}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Import):
            beam_names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("apache_beam"))

    def root(node: ast.AST) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Call)):
            node = node.value if isinstance(node, ast.Attribute) else node.func
        return node.id if isinstance(node, ast.Name) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and root(node) in beam_names:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and str(node.args[1].value).startswith("_") and root(node.args[0]) in beam_names:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_private_beam_names_only_in_beam_internals() -> None:
    root = Path(__file__).resolve().parents[1]
    internals = root / "transforms" / "beam_internals.py"
    assert _private_beam_names(internals), "the check finds the private names beam_internals does touch"
    touched = [hit for package in ("easydata", "transforms", "beam_pipelines")
               for path in sorted((root / package).rglob("*.py")) if path != internals
               for hit in _private_beam_names(path)]
    assert touched == []


#: Beam's runner and worker internals: modules that are no API (Beam changes them between releases). Used only by
#: the guard module and the two packages whose contract is to drive them (`beam_pipelines.local`: the local
#: worker machinery, `beam_pipelines.dask`: the Dask runner's translation).
INTERNAL_BEAM_MODULES = ("apache_beam.runners.portability", "apache_beam.runners.worker", "apache_beam.runners.dask",
                         "apache_beam.runners.common", "apache_beam.internal", "apache_beam.coders.coder_impl",
                         "apache_beam.utils.thread_pool_executor", "apache_beam.portability.api")
ALLOWED_INTERNAL_USERS = ("transforms/beam_internals.py", "beam_pipelines/local/", "beam_pipelines/dask/")


def _internal_beam_uses(path: Path) -> list[str]:
    """Imports of `INTERNAL_BEAM_MODULES` (at any depth of the module), and private methods (`_x`) defined in a
    class derived from a name imported from Beam (an override of Beam's internals, as `_create_impl` is)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    beam_names: set[str] = set()
    found = []
    for node in ast.walk(tree):
        modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for module in modules:
            if module.startswith(INTERNAL_BEAM_MODULES) or any(
                    f"{module}.{a.name}".startswith(INTERNAL_BEAM_MODULES) for a in getattr(node, "names", [])
                    if isinstance(node, ast.ImportFrom)):
                found.append(f"{path}:{node.lineno}: import from {module}")
            if module.startswith("apache_beam") and isinstance(node, ast.ImportFrom):
                beam_names.update(a.asname or a.name for a in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in beam_names or
                                                  isinstance(b, ast.Attribute) and b.attr in beam_names
                                                  for b in node.bases):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("_") and not item.name.startswith("__"):
                    found.append(f"{path}:{item.lineno}: {node.name}.{item.name} overrides a private Beam method")
    return found


def test_beam_internal_modules_only_in_the_guard_and_the_runner_packages(tmp_path) -> None:
    root = Path(__file__).resolve().parents[1]
    assert _internal_beam_uses(root / "beam_pipelines" / "local" / "offline_runner.py")  # the check finds them
    (tmp_path / "override.py").write_text("from apache_beam.coders.coders import FastCoder\n\n\n"
                                          "class C(FastCoder):\n    def _create_impl(self):\n        pass\n")
    assert _internal_beam_uses(tmp_path / "override.py") == [
        f"{tmp_path / 'override.py'}:5: C._create_impl overrides a private Beam method"]
    found = [hit for package in ("easydata", "transforms", "beam_pipelines")
             for path in sorted((root / package).rglob("*.py"))
             if not path.relative_to(root).as_posix().startswith(ALLOWED_INTERNAL_USERS)
             for hit in _internal_beam_uses(path)]
    assert found == []


def test_type_coders_guard(monkeypatch) -> None:
    """This Beam's coder internals are recognised; a Beam without `FastCoder._create_impl` is left alone (its own
    coders are used)."""
    from apache_beam.coders.coders import FastCoder

    from transforms.beam_internals import type_coders_are_known

    assert type_coders_are_known()
    monkeypatch.delattr(FastCoder, "_create_impl")
    assert not type_coders_are_known()


def test_bundle_descriptors_guard_and_lean_descriptors_are_beams_less_unused_pcollections(monkeypatch) -> None:
    """Each stage's descriptor held every PCollection of the pipeline (the square of the datasets: 120 of
    them took 90 s and 3.1 GB in a worker); the lean one is Beam's own but for the PCollections its
    transforms do not use, and the pipeline computes the same."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import execution, fn_runner
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.beam_internals import bundle_descriptors_are_known, lean_bundle_descriptors

    assert bundle_descriptors_are_known()
    beams = execution.BundleContextManager.__dict__["_build_process_bundle_descriptor"]
    compared = []
    with lean_bundle_descriptors():
        lean = execution.BundleContextManager.__dict__["_build_process_bundle_descriptor"]
        assert lean is not beams

        def both(self):
            ours, theirs = lean(self), beams(self)
            kept = set(ours.pcollections)
            for unused in [p for p in theirs.pcollections if p not in kept]:
                del theirs.pcollections[unused]
            assert ours == theirs
            compared.append(len(beams(self).pcollections) - len(kept))
            return ours

        monkeypatch.setattr(execution.BundleContextManager, "_build_process_bundle_descriptor", both)
        with beam.Pipeline(runner=fn_runner.FnApiRunner()) as p:
            for branch in range(4):  # independent branches, as the datasets of a job are
                numbers = (p | f"Create{branch}" >> beam.Create(range(10))
                           | f"Square{branch}" >> beam.Map(lambda x: x * x)
                           | f"Group{branch}" >> beam.GroupBy(lambda x: x % 3).aggregate_field(lambda x: x, sum, "s"))
                assert_that(numbers | f"Sums{branch}" >> beam.Map(lambda row: (row[0], row[1])),
                            equal_to([(0, 0 + 9 + 36 + 81), (1, 1 + 4 + 16 + 25 + 49 + 64)]), label=f"Check{branch}")
        monkeypatch.undo()
    assert execution.BundleContextManager.__dict__["_build_process_bundle_descriptor"] is beams
    assert compared and max(compared) > 0  # stages did leave other branches' PCollections out

    monkeypatch.setattr("transforms.beam_internals._DESCRIPTOR_FIELDS", {"id", "a field this Beam lacks"})
    assert not bundle_descriptors_are_known()
    with lean_bundle_descriptors():  # an unknown Beam is left alone
        assert execution.BundleContextManager.__dict__["_build_process_bundle_descriptor"] is beams
