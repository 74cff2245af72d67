"""Local worker fork server: who needs it, that it is handed over once, forks the workers, ends, and reports how they died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import grpc
import pytest
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.local import worker_pool
from beam_pipelines.local.local_worker import START_METHOD_VARIABLE
from easydata.errors import EasyDataError
from beam_pipelines.runners import OfflineDirectRunner, make_runner_and_options
from beam_pipelines.local.worker_pool import StandbyWorkers, default_worker_count, discard_prestarted, job_tokenizers, \
    local_worker_count, prestart, take_prestarted
from easydata.config import PipelineConfig, TokenizerConfig
from easydata.text.tokenizer import load_tokenizer


def _children() -> set[int]:
    """Pids of this process's live children (every thread's list)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except FileNotFoundError:  # the thread ended since the listing (CI saw one): it has no children
            continue
        found.update(int(pid) for pid in text)
    return {pid for pid in found if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.parametrize("args", [
    [], ["--direct_num_workers=1"], ["--direct_num_workers=2"], ["--direct_num_workers=3"],
    ["--direct_num_workers=0"], ["--direct_num_workers=2", "--direct_running_mode=in_memory"],
    ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
    ["--direct_num_workers=1", "--direct_running_mode=multi_processing"],
    ["--runner=DirectRunner", "--direct_num_workers=2"], ["--runner=DataflowRunner", "--direct_num_workers=2"],
])
def test_worker_count_agrees_with_the_runner_choice(args):
    """The Beam-free reading of the flags must match what `make_runner_and_options` decides."""
    runner, options = make_runner_and_options(args)
    direct = options.view_as(DirectOptions)
    processes = isinstance(runner, OfflineDirectRunner) and direct.direct_running_mode == "multi_processing"
    expected = (direct.direct_num_workers or os.cpu_count()) if processes else 0
    assert local_worker_count(args) == expected


def test_streaming_and_malformed_flags_start_no_worker():
    assert local_worker_count(["--direct_num_workers=2", "--streaming"]) == 0
    assert local_worker_count(["--direct_num_workers=two"]) == 0


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and _state(pid) != "Z"


@pytest.mark.slow
def test_an_unused_fork_server_ends_when_closed():
    before = _children()
    workers = StandbyWorkers()
    started = _children() - before
    assert len(started) == 1  # one server, whatever the worker count
    workers.close()
    assert not (_children() & started)
    assert workers.worker_pids() == [] and workers.failures() == []


def _idle_log_stream_error(address: str, seconds: float) -> Any:
    """Opens a worker's log stream to `address` with keepalive pings every 0.2 s (Beam's workers: every 20 s),
    sends nothing, and returns the stream's error within `seconds` (None: it stayed open)."""
    import queue
    import threading

    channel = grpc.insecure_channel(address, options=[("grpc.keepalive_time_ms", 200),
                                                      ("grpc.keepalive_permit_without_calls", True),
                                                      ("grpc.http2.max_pings_without_data", 0)])
    entries: queue.Queue = queue.Queue()
    stream = beam_fn_api_pb2_grpc.BeamFnLoggingStub(channel).Logging(iter(entries.get, None))
    errors: list[Any] = []

    def consume() -> None:
        try:
            for _ in stream:
                pass
        except grpc.RpcError as e:
            errors.append(e)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    reader.join(seconds)
    found = errors[0] if errors else None  # before closing the channel, which cancels the stream
    entries.put(None)
    channel.close()
    return found


@pytest.mark.slow
def test_an_idle_worker_log_stream_is_not_cut_for_its_keepalive_pings():
    """Beam's workers ping their idle log stream; the pool's server takes the pings (gRPC's defaults answer the
    third with GOAWAY "too_many_pings", which a long quiet run printed as "Logging client failed")."""
    from apache_beam.runners.portability import local_job_service
    from apache_beam.utils import thread_pool_executor

    default = grpc.server(thread_pool_executor.shared_unbounded_instance())
    beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(local_job_service.BeamFnLoggingServicer(), default)
    port = default.add_insecure_port("localhost:0")
    default.start()
    try:
        cut = _idle_log_stream_error(f"localhost:{port}", 15)  # cut after ~4.5 s
        assert cut is not None and "Too many pings" in cut.details()  # what the check below guards against
    finally:
        default.stop(None)
    workers = StandbyWorkers()
    try:
        assert _idle_log_stream_error(workers.serve("{}"), 9) is None
    finally:
        workers.close()


@pytest.mark.slow
def test_prestarting_starts_one_server_that_is_taken_once():
    prestart(["--direct_num_workers=2"])
    first = worker_pool._prestarted
    assert first is not None
    prestart(["--direct_num_workers=3"])  # started already: any worker count forks from the same server
    assert worker_pool._prestarted is first
    taken = take_prestarted()
    assert taken is first and worker_pool._prestarted is None
    taken.close()

    other = take_prestarted()  # none prestarted: a new server
    assert other is not first and worker_pool._prestarted is None
    other.close()
    prestart(["--direct_num_workers=2"])
    prestart([])  # the default: worker processes when there are two usable cores
    assert (worker_pool._prestarted is not None) == (default_worker_count() > 1)
    prestart(["--direct_num_workers=2"])
    prestart(["--direct_num_workers=1"])  # in-process: a prestarted server is not needed, and ends
    assert worker_pool._prestarted is None
    prestart(["--direct_num_workers=2"])
    discard_prestarted()
    assert worker_pool._prestarted is None


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pipeline_runs_on_the_servers_workers_and_leaves_no_process(method, monkeypatch):
    monkeypatch.setenv(START_METHOD_VARIABLE, method)
    before = _children()
    args = ["--direct_num_workers=2"]
    prestart(args)
    prestarted = worker_pool._prestarted
    runner, options = make_runner_and_options(args)
    with beam.Pipeline(runner=runner, options=options) as p:
        pids = (p | beam.Create(range(40)) | beam.Reshuffle()
                | beam.Map(lambda _: os.getpid()) | beam.Distinct())
        assert_that(pids | beam.combiners.Count.Globally(), equal_to([2]))
    assert worker_pool._prestarted is None  # the runner took the server
    forked = prestarted.worker_pids()
    assert len(forked) == 2 and not any(map(_alive, forked))
    assert prestarted.failures() == []
    assert _children() == before


def assert_in_the_servers_workers(config: PipelineConfig, fn: Any, expected: tuple, elements: int = 4) -> None:
    """Runs `fn` on `elements` elements in a fresh local worker server's two workers (for `config`);
    every call must return `expected`."""
    args = ["--direct_num_workers=2"]
    prestart(args, config)
    runner, options = make_runner_and_options(args)
    with beam.Pipeline(runner=runner, options=options) as p:
        seen = p | beam.Create(range(elements)) | beam.Reshuffle() | beam.Map(fn) | beam.Distinct()
        assert_that(seen, equal_to([expected]))


@pytest.mark.slow
def test_the_servers_workers_start_with_the_jobs_tokenizers_loaded(tokenizer_dir, tmp_path):
    """The server loads each tokenizer the job names once, before forking; a worker's steps get that
    handle from `shared_tokenizer` (one it cannot load is left to the step, which reports it)."""
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir), "datasets": [
        {"name": "a", "data_files": str(tmp_path / "a.jsonl")},
        {"name": "b", "data_files": str(tmp_path / "b.jsonl"), "tokenizer": {"name_or_path": str(tokenizer_dir),
                                                                            "eos_token": "<pad>"}},
        {"name": "c", "data_files": str(tmp_path / "c.jsonl")},
        {"name": "d", "data_files": str(tmp_path / "d.jsonl"), "tokenizer": str(tmp_path / "nowhere")}],
        "save": {"output_dir": str(tmp_path / "out")}})
    expected = [TokenizerConfig(name_or_path=str(tokenizer_dir)),
                TokenizerConfig(name_or_path=str(tokenizer_dir), eos_token="<pad>"),
                TokenizerConfig(name_or_path=str(tmp_path / "nowhere"))]
    assert job_tokenizers(config) == expected
    texts = ["ids from the preloaded handle", "and a second document"]
    want = load_tokenizer(expected[0]).encode_batch(texts, add_bos=False, add_eos=True)[0].tolist()

    launcher = os.getpid()

    def in_the_worker(_):
        from easydata.text import tokenizer

        handle = tokenizer.shared_tokenizer(expected[0])
        return (os.getpid() != launcher, list(tokenizer._PRELOADED) == expected[:2],
                handle is tokenizer._PRELOADED.get(expected[0]),
                tuple(handle.encode_batch(texts, add_bos=False, add_eos=True)[0].tolist()))

    assert_in_the_servers_workers(config, in_the_worker, (True, True, True, tuple(want)), elements=20)


def second_large_block_is_mapped() -> bool:
    """Whether a 4 MiB block malloc'd after freeing one of the same size is mapped on its own (glibc's
    default raises its mmap threshold after the free, so the second comes from the heap)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                          "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    libc.free(libc.malloc(4 << 20))
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(4 << 20)
    mapped = libc.mallinfo2().hblkhd - before >= 4 << 20
    libc.free(block)
    return mapped


def heap_pages_returned_mib() -> float:
    """Frees nine in ten of 2,000 heap blocks of 100 KB (below any mmap threshold: what the kept tenth
    holds apart cannot leave by shrinking the heap's top), then calls `return_free_memory`: the MiB
    of resident memory that went back to the system."""
    from easydata.memory import return_free_memory

    def resident() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    blocks = [bytearray(b"x") * 100_000 for _ in range(2000)]  # written, so resident
    kept = blocks[::10]
    del blocks
    before = resident()
    return_free_memory()
    returned = (before - resident()) / 2**20
    del kept
    return returned


def scratch_faults() -> list[int]:
    """Page faults of ten rounds of a 16 MiB block allocated, written and freed (a tokenizer's scratch per
    call): outside `tokenizer_scratch`, inside it (nested twice, as concurrent callers share one window),
    and outside again after it."""
    import ctypes
    import resource

    from easydata.memory import tokenizer_scratch

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

    def rounds() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            block = libc.malloc(16 << 20)
            ctypes.memset(block, 1, 16 << 20)
            libc.free(block)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    outside = rounds()
    with tokenizer_scratch():
        with tokenizer_scratch():
            inside = rounds()
        inside_outer = rounds()  # the inner one left: the window stays open
    return [outside, inside, inside_outer, rounds()]


def scratch_faults_after_fork() -> int:
    """`scratch_faults`' rounds in a child forked while this process is inside `tokenizer_scratch`."""
    import ctypes
    import resource

    from easydata.memory import tokenizer_scratch

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    read, write = os.pipe()
    with tokenizer_scratch():
        pid = os.fork()
        if pid == 0:  # the child: ten rounds of a 16 MiB block, under whatever settings it started with
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            with tokenizer_scratch():  # and a window of its own opens and closes as in any process
                pass
            for _ in range(10):
                block = libc.malloc(16 << 20)
                ctypes.memset(block, 1, 16 << 20)
                libc.free(block)
            os.write(write, str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before).encode())
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    return int(os.read(read, 64))


needs_glibc = pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"), reason="glibc >= 2.33 only")


@pytest.mark.slow
@needs_glibc
@pytest.mark.parametrize("user_setting", [None, "999999999"])
def test_map_large_blocks_returns_freed_blocks_unless_the_user_set_the_threshold(user_setting):
    """Measured in fresh processes (a block already in the heap would be reused whatever the threshold),
    with only the environment they need: other tests leave variables behind, and in one full-suite run
    the child's unchanged glibc mapped the second block too."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    if user_setting:
        env["MALLOC_MMAP_THRESHOLD_"] = user_setting

    def run(call: bool) -> list[str]:
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.test_worker_pool import second_large_block_is_mapped;"
                " from easydata.memory import map_large_blocks;"
                f" print({'map_large_blocks()' if call else 'None'}, second_large_block_is_mapped())")
        return subprocess.run([sys.executable, "-c", code, str(Path(__file__).parents[1])], env=env, capture_output=True,
                              text=True, check=True).stdout.split()

    assert run(False) == ["None", "False"]  # glibc's default
    assert run(True) == (["True", "True"] if user_setting is None else ["False", "False"])


@needs_glibc
def test_tokenizer_scratch_keeps_large_blocks_in_the_heap_between_calls():
    """In a local job's process (`map_large_blocks`) a 16 MiB block is mapped, faulted in page by page and
    unmapped at every round outside the window (~4,096 faults each); inside, the first round's pages serve the
    next nine, also after a nested window left; after the window the job's settings are back."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.test_worker_pool import scratch_faults;"
            " from easydata.memory import map_large_blocks; assert map_large_blocks(); print(*scratch_faults())")
    outside, inside, inside_outer, after = map(int, subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parents[1])], env=env, capture_output=True, text=True,
        check=True).stdout.split())
    assert outside > 10 * 4000 and after > 8 * 4000  # (its first round may still find the heap's pages)
    assert inside < 2 * 4096 + 1000 and inside_outer < 1000


@needs_glibc
def test_a_child_forked_inside_the_scratch_window_starts_outside_it():
    """A worker forked while its server's other thread is inside `tokenizer_scratch` gets the job's settings back
    (its 16 MiB blocks are mapped and faulted in every round), not the window's for good."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.test_worker_pool import scratch_faults_after_fork;"
            " from easydata.memory import map_large_blocks; assert map_large_blocks(); print(scratch_faults_after_fork())")
    faults = int(subprocess.run([sys.executable, "-c", code, str(Path(__file__).parents[1])], env=env,
                                capture_output=True, text=True, check=True).stdout)
    assert faults > 8 * 4000


@pytest.mark.slow
@needs_glibc
def test_return_free_memory_hands_the_heaps_free_pages_back_in_a_local_jobs_processes():
    """Where `map_large_blocks` applied (a local job's processes) the ~170 MiB freed between kept blocks
    goes back to the system; elsewhere (a Dataflow or dask worker) the call leaves memory alone."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}

    def returned(local: bool) -> float:
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.test_worker_pool import heap_pages_returned_mib;"
                f" from easydata.memory import map_large_blocks; {'map_large_blocks();' if local else ''}"
                " print(heap_pages_returned_mib())")
        return float(subprocess.run([sys.executable, "-c", code, str(Path(__file__).parents[1])], env=env,
                                    capture_output=True, text=True, check=True).stdout)

    assert returned(True) > 100
    assert returned(False) < 20


@pytest.mark.slow
@needs_glibc
def test_the_servers_workers_map_large_blocks_and_return_free_memory(tokenizer_dir, tmp_path):
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir), "datasets": [
        {"name": "a", "data_files": str(tmp_path / "a.jsonl")}], "save": {"output_dir": str(tmp_path / "out")}})
    launcher = os.getpid()
    assert_in_the_servers_workers(config, lambda _: (os.getpid() != launcher, second_large_block_is_mapped()),
                                  (True, True))
    # In other workers: the freed heap blocks above leave room for a later large block at the heap's top.
    assert_in_the_servers_workers(config, lambda _: (os.getpid() != launcher, heap_pages_returned_mib() > 100),
                                  (True, True))


#: Run in a fresh process that applied `map_large_blocks`, as the `easydata` command does: builds a job (planning
#: loads the tokenizer and verifies the fast engine) and prints the process's anonymous memory before and after.
_LAUNCHER_MEMORY = """
import json, sys
from easydata.memory import map_large_blocks
assert map_large_blocks()
import beam_pipelines.batch
from easydata.config import PipelineConfig

def anonymous_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) / 1024

before = anonymous_mib()
beam_pipelines.batch.build_batch_job(PipelineConfig.from_dict(json.loads(sys.argv[1])), ["--direct_num_workers=1"])
print(json.dumps([before, anonymous_mib()]))
"""


@pytest.mark.slow
@needs_glibc
def test_the_launcher_hands_planning_tokenizer_memory_back_before_the_job_runs(qwen3_tokenizer_dir, tmp_path):
    """The launching process runs a local job's runner for the whole job: what planning loaded (Qwen3's `hf`
    tokenizer and its fast engine, ~190 MiB) must not stay in its heap. Measured: +187 MiB when the freed
    pages stayed with glibc, +15 MiB when they are handed back."""
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(f'{{"text": "document {i}: the quick brown fox jumps over the lazy dog"}}\n'
                            for i in range(300)))
    config = {"default_tokenizer": str(qwen3_tokenizer_dir), "datasets": [{"name": "d", "data_files": str(data)}],
              "save": {"output_dir": str(tmp_path / "out")}}
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "HF_HUB_OFFLINE") if k in os.environ}
    out = subprocess.run([sys.executable, "-c", _LAUNCHER_MEMORY, json.dumps(config)], env=env, capture_output=True,
                         text=True, cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = json.loads(out.stdout.splitlines()[-1])
    assert after - before < 60, (before, after)


@pytest.mark.slow
def test_a_killed_worker_is_reported_by_pid_and_signal():
    workers = StandbyWorkers()
    try:
        address = workers.serve("{}")
        # Nothing listens on the control endpoint: the forked harness waits for it until killed.
        url = endpoints_pb2.ApiServiceDescriptor(url="localhost:9")
        stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(grpc.insecure_channel(address))
        response = stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
            worker_id="w1", control_endpoint=url, logging_endpoint=url))
        assert response.error == ""
        deadline = time.time() + 30
        while not workers.worker_pids() and time.time() < deadline:
            time.sleep(0.05)
        (pid,) = workers.worker_pids()
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        assert workers.failures() == [f"pid {pid} killed by SIGKILL"]
    finally:
        workers.close()


def test_a_fork_server_gone_before_the_job_is_an_error_response():
    workers = StandbyWorkers()
    try:
        address = workers.serve("{}")
        workers._server_process.kill()
        workers._server_process.wait()
        url = endpoints_pb2.ApiServiceDescriptor(url="localhost:9")
        stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(grpc.insecure_channel(address))
        response = stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
            worker_id="w1", control_endpoint=url, logging_endpoint=url))
        assert "is gone" in response.error
        assert workers.failures() == [f"pid {workers._server_process.pid} killed by SIGKILL"]
    finally:
        workers.close()


def _die_on_seven(x: int) -> int:
    if x == 7:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


@pytest.mark.slow
def test_a_worker_killed_during_a_job_ends_it_with_one_line_naming_it():
    runner, options = make_runner_and_options(["--direct_num_workers=2"])
    with pytest.raises(EasyDataError, match=r"a local worker process ended during the job \(pid \d+ killed by"
                                            r" SIGKILL; .*run again, with --resume") as caught:
        with beam.Pipeline(runner=runner, options=options) as p:
            _ = p | beam.Create(range(20)) | beam.Reshuffle() | beam.Map(_die_on_seven)
    assert "\n" not in str(caught.value)


def test_an_unknown_worker_start_method_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(START_METHOD_VARIABLE, "vfork")
    with pytest.raises(EasyDataError, match="EASYDATA_WORKER_START must be fork or spawn, got 'vfork'"):
        StandbyWorkers()


def test_a_workers_user_error_is_not_logged_or_printed_but_other_errors_are():
    """A step's `easydata.errors` exception is reported by the launcher in one line, so the worker
    drops Beam's records and printed traceback of it; any other failure keeps its traceback."""
    import io
    import logging

    from easydata.logs import DropUserErrors as _QuietUserErrors, _StderrWithoutUserErrorTracebacks
    from easydata.errors import InputError

    marker = InputError("bad input").mark().__notes__[-1]  # the error's marker, added as it left the step
    user = f"Traceback (most recent call last):\n  File \"x.py\", line 1\neasydata.errors.InputError: bad input\n{marker}\n"
    other = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'text'\n"
    stream = io.StringIO()
    stderr = _StderrWithoutUserErrorTracebacks(stream)
    for text in (user, "\n", other, "\n", "plain line\n"):  # as `print(traceback, file=sys.stderr)` writes
        assert stderr.write(text) == len(text)
    assert stream.getvalue() == other + "\n" + "plain line\n"

    def record(name: str, message: str, exc: BaseException | None = None) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None,
                                 (type(exc), exc, None) if exc else None)

    quiet = _QuietUserErrors()
    assert not quiet.filter(record("apache_beam.runners.common", "bad input", InputError("bad input")))
    assert not quiet.filter(record("apache_beam.runners.worker.sdk_worker", "Error processing instruction 1.\n" + user))
    assert quiet.filter(record("apache_beam.runners.common", "boom", KeyError("text")))
    assert quiet.filter(record("apache_beam.runners.worker.sdk_worker", "Error processing instruction 1.\n" + other))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_import_the_launchers_code_whatever_the_working_directory(tmp_path, tokenizer_dir, method):
    """Run from a directory holding another `easydata/` (a source checkout of another version), the
    launcher ran the installed package and its workers the directory's: `python -m` puts the working
    directory first. The workers now get the launcher's `sys.path`."""
    from tests.conftest import write_jsonl

    shadow = tmp_path / "checkout"
    (shadow / "easydata").mkdir(parents=True)
    (shadow / "easydata" / "__init__.py").write_text("raise ImportError('the shadowing checkout was imported')\n")
    write_jsonl(tmp_path / "in.jsonl", [{"text": f"document {i} of the job"} for i in range(40)])
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir),
                                  "datasets": [{"name": "d", "data_files": str(tmp_path / "in.jsonl")}],
                                  "save": {"output_dir": str(tmp_path / "out")}}))
    command = Path(sys.executable).parent / "easydata"
    assert command.is_file(), "the console script pip installs beside the interpreter"
    done = subprocess.run([str(command), "run", str(config), "--quiet", "--direct_num_workers=2"], cwd=shadow,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, START_METHOD_VARIABLE: method})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["documents_written"] == 40
