"""`--runner=DaskRunner` on a real `distributed.LocalCluster` (2 worker processes, 1 thread each).

The end-to-end test runs the batch pipeline (two datasets, chat, dead letters, mix, pack) once on the local runner and once on the cluster: every output file must be
byte-identical and the manifests equal but for the run's own id, time and duration. The other tests
pin the Beam primitives whose translation `ManagedDaskRunner` corrects (tagged outputs, finish_bundle
outputs, every branch run, side inputs computed once), the errors a user can cause, and the local
cluster a run starts and closes itself when no scheduler address is given.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipelines.batch import run_batch
from beam_pipelines.runners import make_runner_and_options, runs_on_this_machine, unknown_beam_flags
from easydata.cli import main
from easydata.config import PipelineConfig
from easydata.errors import EasyDataError
from easydata.tools.validate import validate_output
from tests.conftest import REPO_ROOT, free_port, make_texts, write_jsonl

distributed = pytest.importorskip("distributed")  # the `dask` extra (part of `dev`)

from beam_pipelines.dask.dask_runner import ManagedDaskRunner  # noqa: E402 - needs dask

# Fields of the manifest that describe the run rather than the output.
_RUN_FIELDS = ("created_at", "run.run_id", "run.elapsed_seconds")


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[Any]:
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    try:
        yield cluster
    finally:
        cluster.close()


def _on(cluster: Any) -> list[str]:
    return ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]


def _run(cluster: Any, build: Any) -> None:
    with beam.Pipeline(runner=ManagedDaskRunner(), options=PipelineOptions(_on(cluster))) as p:
        build(p)


# ---- the batch pipeline: same bytes as the local runner -------------------------------------------------

def _corpus(root: Path) -> dict[str, str]:
    texts = make_texts(600, seed=21)
    web = [{"text": t} for t in texts]
    web.insert(7, {"text": ""})                    # rejected: empty
    web.insert(300, {"body": "no text field"})     # rejected: missing field
    write_jsonl(root / "web" / "a.jsonl", web[:300])
    write_jsonl(root / "web" / "b.jsonl", web[300:])
    with open(root / "web" / "b.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")                     # rejected: malformed
    chats = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
             for q, a in zip(make_texts(150, seed=22), make_texts(150, seed=23))]
    write_jsonl(root / "chat.jsonl", chats)
    return {"web": str(root / "web" / "*.jsonl"), "chat": str(root / "chat.jsonl")}


def _job(files: dict[str, str], tokenizer: Path, out: Path) -> PipelineConfig:
    return PipelineConfig.from_dict({
        "seed": 13,
        "default_tokenizer": str(tokenizer),
        "datasets": [{"name": name, "data_files": pattern} for name, pattern in files.items()],
        "chat": {"template": str(REPO_ROOT / "tests" / "chat_templates" / "chatml.jinja")},
        "tokenize": {"batch_size": 40},
        "mix": {"weights": {"web": 0.6, "chat": 0.4}},
        "pack": {"enabled": True, "seq_length": 256},
        "save": {"output_dir": str(out), "num_shards": 3, "row_group_size": 25},
    })


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _without_run_fields(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest = json.loads(json.dumps(manifest))
    for dotted in _RUN_FIELDS:
        *parents, leaf = dotted.split(".")
        node = manifest
        for key in parents:
            node = node[key]
        del node[leaf]
    return manifest


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_batch_output_is_byte_identical_to_the_local_runner(dask_cluster, chat_tokenizer_dir, tmp_path):
    files = _corpus(tmp_path / "in")
    out = tmp_path / "out"  # both runs write to the same path: the manifests' configs must be equal too
    plan = {"split_bytes": 8192, "group_bytes": 16384}  # several input units and groups: work spreads
    local = run_batch(_job(files, chat_tokenizer_dir, out), ["--direct_num_workers=1"], show_progress=False, **plan)
    shutil.move(out, tmp_path / "local")
    dask = run_batch(_job(files, chat_tokenizer_dir, out), _on(dask_cluster), show_progress=False, **plan)

    expected, got = _files(tmp_path / "local"), _files(out)
    expected_manifest, got_manifest = (json.loads(d.pop("manifest.json")) for d in (expected, got))
    shards = [name for name in expected if "/part-" in name]
    assert {n.rsplit("/", 1)[0] for n in shards} == {"mixed"} and len(shards) == 3
    assert any(name.startswith("rejected/") for name in expected), "the corpus has dead letters"
    assert sorted(got) == sorted(expected)
    assert [name for name in expected if got[name] != expected[name]] == []
    assert _without_run_fields(got_manifest) == _without_run_fields(expected_manifest)
    assert dask.manifest == got_manifest and local.manifest["documents_rejected"] == 3
    assert validate_output(str(out)).ok


# ---- the primitives Beam's own DaskRunner translation gets wrong ------------------------------------------

class _Parity(beam.DoFn):
    """Every element on the main output and on `odd` / `even`; one `-1` per bundle from finish_bundle."""

    def process(self, x: int) -> Iterator[Any]:
        yield x
        yield beam.pvalue.TaggedOutput("odd" if x % 2 else "even", x)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        yield WindowedValue(-1, 0, [GlobalWindow()])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tagged_outputs_finish_bundle_outputs_and_every_branch(dask_cluster):
    def build(p: beam.Pipeline) -> None:
        parts = p | beam.Create(range(10)) | beam.ParDo(_Parity()).with_outputs("odd", "even", main="all")
        assert_that(parts.all | "Real" >> beam.Filter(lambda x: x >= 0), equal_to(list(range(10))), label="All")
        assert_that(parts.all | "Flushed" >> beam.Filter(lambda x: x < 0) | beam.combiners.Count.Globally(),
                    equal_to([10]), label="OnePerBundle")  # one element per partition: 10 bundles
        assert_that(parts.odd, equal_to([1, 3, 5, 7, 9]), label="Odd")
        assert_that(parts.even | beam.Map(lambda x: (x % 4, x)) | beam.GroupByKey()
                    | beam.MapTuple(lambda k, vs: (k, sorted(vs))), equal_to([(0, [0, 4, 8]), (2, [2, 6])]),
                    label="Even")

    _run(dask_cluster, build)


class _Mark(beam.DoFn):
    """Leaves a file per element processed: counts how often an upstream step really ran."""

    def __init__(self, directory: str):
        self._directory = directory

    def process(self, x: int) -> Iterator[int]:
        with open(Path(self._directory) / f"{x}-{multiprocessing.current_process().pid}-{id(self)}", "w"):
            pass
        yield x


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_each_step_runs_once_when_its_output_is_also_a_side_input(dask_cluster, tmp_path):
    """As in the batch pipeline (read -> documents, and read -> counters -> commit's side input)."""
    def build(p: beam.Pipeline) -> None:
        marked = p | beam.Create(range(6)) | beam.ParDo(_Mark(str(tmp_path)))
        total = marked | beam.CombineGlobally(sum)
        shifted = marked | beam.Map(lambda x, t: x + t, beam.pvalue.AsSingleton(total))
        assert_that(shifted, equal_to([x + 15 for x in range(6)]))

    _run(dask_cluster, build)
    assert sorted(int(p.name.split("-")[0]) for p in tmp_path.iterdir()) == list(range(6))


def test_unsupported_primitives_are_refused_naming_the_step():
    # Translation happens before any connection: the address is never contacted.
    options = PipelineOptions(["--dask_client_address=tcp://127.0.0.1:1"])
    p = beam.Pipeline(runner=ManagedDaskRunner(), options=options)
    _ = p | "Pulse" >> beam.Impulse() | beam.Map(len)
    with pytest.raises(NotImplementedError, match="'Pulse'.*Impulse is not supported"):
        p.run()


# ---- choosing the runner, errors a user can cause ----------------------------------------------------------

def test_dask_runner_name_selects_the_managed_runner_and_its_flags_are_known():
    runner, options = make_runner_and_options(["--runner=DaskRunner"])
    assert isinstance(runner, ManagedDaskRunner)
    assert runs_on_this_machine(runner, options)  # no address: a local cluster on this machine
    runner, options = make_runner_and_options(["--runner=DaskRunner", "--dask_client_address=tcp://h:8786"])
    assert not runs_on_this_machine(runner, options)
    assert unknown_beam_flags(["--runner=DaskRunner", "--dask_client_address=tcp://h:8786", "--dask_npartitions=4",
                               "--dask_local_workers=2", "--dask_client_adress=x"]) == [
        ("--dask_client_adress", "--dask_client_address")]


def test_bad_local_worker_count_and_streaming_are_refused_before_any_work(tokenizer_dir, tmp_path, capsys):
    with pytest.raises(EasyDataError, match="--dask_local_workers must be at least 1, got 0"):
        make_runner_and_options(["--runner=DaskRunner", "--dask_local_workers=0"])
    with pytest.raises(EasyDataError, match="batch pipelines only"):
        make_runner_and_options(["--runner=DaskRunner", "--streaming"])
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                                  "datasets": [{"name": "d", "data_files": str(tmp_path / "none.jsonl")}]}))
    assert main(["run", str(config), "--streaming", "--runner=DaskRunner"]) == 2
    assert capsys.readouterr().err.strip() == ("easydata: error: the DaskRunner runs batch pipelines only: run"
                                               " --streaming locally or on Dataflow")
    assert not (tmp_path / "out").exists()


def test_missing_dask_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail
    with pytest.raises(EasyDataError, match=r"pip install -e '\.\[dask\]'"):
        make_runner_and_options(["--runner=DaskRunner"])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unreachable_scheduler_is_one_line(tokenizer_dir, tmp_path, capsys):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in make_texts(20, seed=1)])
    code = main(["tokenize", "--data-files", str(tmp_path / "in.jsonl"), "--tokenizer", str(tokenizer_dir),
                 "--output", str(tmp_path / "out"), "--quiet", "--runner=DaskRunner",
                 f"--dask_client_address=tcp://127.0.0.1:{free_port()}", "--dask_connection_timeout=1"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("easydata: error: cannot connect to the dask scheduler at tcp://127.0.0.1:")
    assert "\n" not in err


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_without_an_address_a_run_starts_and_closes_its_own_cluster(tokenizer_dir, tmp_path, capsys):
    texts = make_texts(50, seed=2)
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    before = set(multiprocessing.active_children())
    code = main(["tokenize", "--data-files", str(tmp_path / "in.jsonl"), "--tokenizer", str(tokenizer_dir),
                 "--output", str(tmp_path / "out"), "--quiet", "--runner=DaskRunner", "--dask_local_workers=1"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["documents_written"] == len(texts)
    assert set(multiprocessing.active_children()) <= before  # the cluster's worker processes are gone


# ---- a real engine fault: a worker killed mid-job ----------------------------------------------------------

def _staged(out: Path, pattern: str) -> bool:
    return any(out.glob(f".easydata-tmp-*/{pattern}"))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("moment, ready", [
    ("at once", lambda out: True),
    ("while tokenizing", lambda out: _staged(out, "checkpoints/*/*/b*.arrow")),
    ("while sorting and writing", lambda out: _staged(out, "sorted/*/*.arrow") or _staged(out, "mixed/*")),
])
def test_a_worker_killed_mid_job_never_changes_the_bytes(chat_tokenizer_dir, tmp_path, moment, ready):
    """SIGKILL one of the two dask workers at a moment of the job: dask reschedules its tasks on the
    other (and on the restarted one); every side effect is safe to run twice, so the job completes with
    the local runner's bytes, or fails in one line with no manifest. Never other bytes."""
    import os
    import signal
    import threading
    import time

    files = _corpus(tmp_path / "in")
    plan = {"split_bytes": 8192, "group_bytes": 16384}
    out = tmp_path / "out"
    run_batch(_job(files, chat_tokenizer_dir, out), ["--direct_num_workers=1"], show_progress=False, **plan)
    shutil.move(out, tmp_path / "local")
    expected = _files(tmp_path / "local")
    expected_manifest = json.loads(expected.pop("manifest.json"))

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = distributed.Client(cluster)
    outcome: dict[str, Any] = {}

    def job() -> None:
        try:
            outcome["manifest"] = run_batch(_job(files, chat_tokenizer_dir, out), _on(cluster), show_progress=False,
                                            **plan).manifest
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    try:
        pids = sorted(client.run(os.getpid).values())
        thread = threading.Thread(target=job)
        thread.start()
        deadline = time.monotonic() + 240
        while not ready(out) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        killed = thread.is_alive()
        if killed:
            os.kill(pids[0], signal.SIGKILL)
        thread.join(timeout=300)
        assert not thread.is_alive(), "the job hangs after a worker was killed"
    finally:
        client.close()
        cluster.close()
    if "error" in outcome:  # a clean failure: one line, nothing committed
        message = str(outcome["error"]).strip()
        assert not (out / "manifest.json").exists(), message
        pytest.fail(f"the job failed after the kill {moment} (allowed only in one line): {message.splitlines()[0]}")
    got = _files(out)
    got_manifest = json.loads(got.pop("manifest.json"))
    assert sorted(got) == sorted(expected)
    assert [name for name in expected if got[name] != expected[name]] == [], f"other bytes after the kill {moment}"
    assert _without_run_fields(got_manifest) == _without_run_fields(expected_manifest)
    assert killed, f"the job ended before the moment \"{moment}\" was seen: nothing was killed"


@pytest.mark.slow
def test_closing_a_local_cluster_whose_workers_exit_slowly_logs_no_warning(caplog):
    """At the end of a job on a busy machine dask's nanny killed each worker still exiting after 4 s and said
    so in a `WARNING:distributed.nanny: Worker process still alive after 4.0 seconds, killing` line per worker,
    after the run's summary. The job is over then: the cluster closes without it."""
    from beam_pipelines.dask.dask_runner import close_local_cluster

    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                       preload=["tests.dask_slow_exit"])
    with caplog.at_level(logging.WARNING, logger="distributed.nanny"):
        close_local_cluster(cluster)
    assert not [r for r in caplog.records if "still alive" in r.getMessage()], caplog.text
    assert cluster.status.name == "closed"
