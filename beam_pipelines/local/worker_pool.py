"""Local worker processes forked from one server started before the job needs them, handed to Beam as an
external worker pool.

A local multi-process job (`--direct_num_workers=N`) used to start its N SDK worker processes when
its first stage ran: each then spent about two seconds importing Beam, pyarrow and the tokenizer
library while the job waited (py-spy and a per-process CPU trace of the 48 MB benchmark job,
docs/performance.md). `StandbyWorkers` starts one fork server (`beam_pipelines.local.local_worker`, with the
launcher's `sys.path`: `python_command`) as
early as the launching process knows it needs workers (the `easydata` command: right after parsing
its arguments, before it imports Beam itself), so its import overlaps the launcher's own start-up and
planning, and happens once however many workers the job has: each worker is a fork of it.

`serve` makes the pool a Beam external worker pool (the `BeamFnExternalWorkerPool` gRPC service that
Beam's `EXTERNAL` environment asks for workers, as Flink and Spark job servers do): each
`StartWorker` request sends the server one line with the worker's control and logging endpoints,
worker id and pipeline options, and the forked child runs Beam's SDK harness until the runner closes
it. The server reports each child's pid when it starts and its exit code when it ends, so a worker
killed during the job is named in the error. The pool also serves the workers' log stream (Beam's
local log service, so worker records are logged under `apache_beam` as with Beam's own subprocess
workers, and `easydata`'s log levels apply). A server whose launcher goes away reads end-of-file,
waits for its children (they end when the runner's connection drops) and exits: none is left behind.

This module imports no Beam at module level: the `easydata` command starts the server first.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import threading
from typing import Any, Optional, Sequence

from easydata.config import PipelineConfig, TokenizerConfig
from easydata.errors import EasyDataError
from easydata.run.machine import physical_memory_bytes, usable_cores

__all__ = ["StandbyWorkers", "LOCAL_RUNNERS", "local_worker_count", "default_worker_count",
           "tokenizer_threads_per_worker", "runs_locally", "prestart", "job_tokenizers", "take_prestarted",
           "prestarted_engine_chooser", "SERVER_OPTIONS",
           "discard_prestarted", "WORKER_EXIT_SECONDS", "FAILURE_REPORT_SECONDS", "WORKER_MEMORY_BYTES"]

#: How long `StandbyWorkers.close` waits for the workers that were handed a job to exit before killing them.
WORKER_EXIT_SECONDS = 30.0

#: How long `StandbyWorkers.failures` waits for a worker's abnormal end to be reported.
FAILURE_REPORT_SECONDS = 2.0
#: How long planning waits for the fork server's engine choice before making it itself.
VERIFY_SECONDS = 300.0

#: Memory to allow per default worker process: its tokenizer, Beam, a few batches and one hash group
#: being packed (~0.35 GB at rest plus 2-3x a 48 MB group, docs/performance.md).
WORKER_MEMORY_BYTES = 2**30

#: The pool's gRPC server options. It serves the workers' log stream, on which Beam's workers send a keepalive
#: ping every 20 s while it is idle (`apache_beam/runners/worker/channel_factory.py`); gRPC's defaults answer
#: the third such ping with GOAWAY "too_many_pings", so a run whose workers logged nothing for about a minute
#: printed "Logging client failed ... Too many pings" under `--quiet`. Beam's own servers take the same.
SERVER_OPTIONS = (("grpc.http2.max_ping_strikes", 0), ("grpc.http2.min_ping_interval_without_data_ms", 20_000),
                  ("grpc.http2.max_pings_without_data", 0))

#: The tokenizer library's thread-pool size variable; left alone when the user sets it.
TOKENIZER_THREADS_VARIABLE = "RAYON_NUM_THREADS"
#: The same for the tokenizer engines that size their own pool (`easydata.text.engines`): fastokens reads
#: it at its first batch. With one worker per core its default (a helper thread per core) oversubscribed
#: the cores: on the 1 GB Qwen3 benchmark one thread per worker ran 4 % faster and each worker peaked
#: 33 MiB lower.
ENGINE_THREADS_VARIABLES = ("FASTOKENS_BPE_THREADS",)

#: Runner names that run on this machine's FnApiRunner (None: no `--runner`).
LOCAL_RUNNERS = {None, "DirectRunner", "FnApiRunner", "OfflineDirectRunner", "BundleBasedDirectRunner",
                  "SwitchingDirectRunner"}


def default_worker_count() -> int:
    """Local worker processes when no `--direct_num_workers` is given: one per usable core, at most one
    per `WORKER_MEMORY_BYTES` of physical memory (1: the job runs in-process)."""
    memory = physical_memory_bytes()  # None: not reported, cores decide
    by_memory = usable_cores() if memory is None else max(1, memory // WORKER_MEMORY_BYTES)
    return max(1, min(usable_cores(), by_memory))


def tokenizer_threads_per_worker(workers: int) -> int:
    """Tokenizer threads for each of `workers` worker processes: the usable cores shared out, at least one."""
    return max(1, usable_cores() // max(1, workers))


def local_worker_count(beam_args: list[str]) -> int:
    """How many local worker processes `beam_args` ask for (0: the job runs in-process or elsewhere).

    The same decision as `beam_pipelines.runners.make_runner_and_options`, read without Beam: a
    local runner in batch mode, with `--direct_num_workers=N` (N > 1; 0 means one per core), or
    without it `default_worker_count()` (when more than 1), and no `--direct_running_mode` other
    than `multi_processing`.
    """
    known = _local_flags(beam_args)
    if not _is_local_batch(known):
        return 0
    count = default_worker_count() if known.direct_num_workers is None else \
        known.direct_num_workers or usable_cores()
    mode = known.direct_running_mode or ("in_memory" if count == 1 else "multi_processing")
    return count if mode == "multi_processing" else 0


def runs_locally(beam_args: list[str]) -> bool:
    """Whether `beam_args` run a batch job on this machine's FnApiRunner (in-process or on worker processes)."""
    return _is_local_batch(_local_flags(beam_args))


def _local_flags(beam_args: list[str]) -> Optional[argparse.Namespace]:
    """The flags that choose a local run, read without Beam (None: a malformed flag, which Beam reports
    when it parses the options)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner", default=None)
    parser.add_argument("--direct_num_workers", type=int, default=None)
    parser.add_argument("--direct_running_mode", default=None)
    parser.add_argument("--streaming", action="store_true")
    try:
        return parser.parse_known_args(beam_args)[0]
    except SystemExit:
        return None


def _is_local_batch(known: Optional[argparse.Namespace]) -> bool:
    return known is not None and known.runner in LOCAL_RUNNERS and not known.streaming


class StandbyWorkers:
    """A worker fork server waiting for a job; `serve` offers its workers to Beam as an external worker pool."""

    def __init__(self, tokenizers: Sequence[TokenizerConfig] = (), engines: Sequence[str] = ()) -> None:
        """Starts the fork server; it loads `tokenizers` (the job's), and for each the fast `engines` the job
        may use (`easydata.text.engines`; loading one starts no thread), before forking any worker."""
        from beam_pipelines.local.local_worker import (PRELOAD_ENGINES_VARIABLE, PRELOAD_TOKENIZERS_VARIABLE,
                                                       python_command, start_method)

        try:
            self._method = start_method()  # the server's choice, checked here to fail in one line
        except ValueError as e:
            raise EasyDataError(str(e)) from None
        preload = json.dumps([dataclasses.asdict(config) for config in tokenizers])
        command, path_env = python_command("beam_pipelines.local.local_worker")  # the launcher's code, whatever the cwd
        self._server_process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                env={**os.environ, **path_env, PRELOAD_TOKENIZERS_VARIABLE: preload,
                                                     PRELOAD_ENGINES_VARIABLE: json.dumps(list(engines))})
        self._started: list[int] = []
        self._verifiers: list[int] = []
        self._ended: dict[int, int] = {}
        self._changed = threading.Condition()
        self._status_reader = threading.Thread(target=self._read_status, name="easydata-worker-status", daemon=True)
        self._status_reader.start()
        self._pipeline_options: Optional[str] = None
        self._worker_env: dict[str, str] = {}
        self._server: Any = None
        self._address = ""
        self._lock = threading.Lock()
        _running.append(self)

    def _read_status(self) -> None:
        for line in self._server_process.stdout:
            kind, pid, *code = line.split()
            with self._changed:
                if kind == b"started":
                    self._started.append(int(pid))
                elif kind == b"verifier":
                    self._verifiers.append(int(pid))
                elif kind == b"ended":
                    self._ended[int(pid)] = int(code[0])
                self._changed.notify_all()
        with self._changed:  # the server ended: nothing more will be reported
            self._changed.notify_all()

    def choose_engine(self, tokenizer: TokenizerConfig, requested: str, sample: Sequence[str],
                      add_special_tokens: Optional[bool]) -> Optional[Any]:
        """Planning's engine choice (`easydata.text.engines.choose_engine`), made by a child of the fork
        server with the tokenizer and engines it preloaded: this process then never loads the engine.
        None (the caller chooses itself) where the server does not fork, or it failed to answer."""
        if self._method != "fork":
            return None
        import tempfile

        from easydata.text.engines import EngineChoice

        with tempfile.TemporaryDirectory(prefix="easydata-verify-") as tmp:
            sample_file, result_file = os.path.join(tmp, "sample.json"), os.path.join(tmp, "choice.json")
            with open(sample_file, "w", encoding="utf-8") as f:
                json.dump(list(sample), f)
            request = {"verify": {"tokenizer": dataclasses.asdict(tokenizer), "requested": requested,
                                  "sample": sample_file, "add_special_tokens": add_special_tokens,
                                  "result": result_file}}
            with self._changed:
                asked = len(self._verifiers)
            try:
                with self._lock:
                    self._server_process.stdin.write((json.dumps(request) + "\n").encode())
                    self._server_process.stdin.flush()
            except (OSError, ValueError):  # the server died: the job's start reports it
                return None
            with self._changed:
                answered = self._changed.wait_for(
                    lambda: self._server_process.poll() is not None
                    or (len(self._verifiers) > asked and self._verifiers[asked] in self._ended), timeout=VERIFY_SECONDS)
                code = self._ended.get(self._verifiers[asked]) if answered and len(self._verifiers) > asked else None
            if code != 0:
                return None
            try:
                with open(result_file, encoding="utf-8") as f:
                    return EngineChoice(**json.load(f))
            except (OSError, ValueError, TypeError):
                return None

    def worker_pids(self) -> list[int]:
        """Pids of the workers started so far (forked by the server), in start order."""
        with self._changed:
            return list(self._started)

    def serve(self, pipeline_options_json: str, tokenizer_threads: Optional[int] = None) -> str:
        """Starts the worker pool service on localhost; returns its address for an `ExternalEnvironment`.

        Args:
          pipeline_options_json: the job's options as Beam's workers read them (`PIPELINE_OPTIONS`).
          tokenizer_threads: each worker's tokenizer thread-pool size (`RAYON_NUM_THREADS`, and the fast
            engines' `ENGINE_THREADS_VARIABLES`), unless the user set that variable; None: the libraries'
            defaults (one per core).
        """
        self._worker_env = {} if tokenizer_threads is None else \
            {name: str(tokenizer_threads) for name in (TOKENIZER_THREADS_VARIABLE, *ENGINE_THREADS_VARIABLES)
             if name not in os.environ}
        import grpc
        from apache_beam.portability.api import beam_fn_api_pb2_grpc
        from apache_beam.runners.portability import local_job_service
        from apache_beam.utils import thread_pool_executor

        self._pipeline_options = pipeline_options_json
        pool = self

        class _Servicer(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
            def StartWorker(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                return pool._start_worker(request)

            def StopWorker(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                from apache_beam.portability.api import beam_fn_api_pb2

                return beam_fn_api_pb2.StopWorkerResponse()  # a worker ends when the runner closes it

        logging.getLogger(local_job_service.__name__).addFilter(self._after_a_death)
        self._server = grpc.server(thread_pool_executor.shared_unbounded_instance(), options=SERVER_OPTIONS)
        port = self._server.add_insecure_port("localhost:0")
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(_Servicer(), self._server)
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(local_job_service.BeamFnLoggingServicer(), self._server)
        self._server.start()
        self._address = f"localhost:{port}"
        return self._address

    def _start_worker(self, request: Any) -> Any:
        from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2
        from google.protobuf import text_format

        def descriptor(url: str) -> str:
            return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

        env = {"CONTROL_API_SERVICE_DESCRIPTOR": descriptor(request.control_endpoint.url),
               "LOGGING_API_SERVICE_DESCRIPTOR": descriptor(self._address),
               "PIPELINE_OPTIONS": self._pipeline_options, "WORKER_ID": request.worker_id, **self._worker_env}
        try:
            with self._lock:
                self._server_process.stdin.write((json.dumps(env) + "\n").encode())
                self._server_process.stdin.flush()
        except (OSError, ValueError) as e:  # the fork server died, or the pool is closed
            return beam_fn_api_pb2.StartWorkerResponse(
                error=f"local worker server process {self._server_process.pid} is gone: {e}")
        return beam_fn_api_pb2.StartWorkerResponse()

    def _abnormal_ends(self) -> list[tuple[int, int]]:
        """`(pid, exit code)` of the workers, and the server, that ended abnormally; call holding `_changed`."""
        ended = [(pid, self._ended[pid]) for pid in self._started if self._ended.get(pid)]
        server = self._server_process.poll()
        return ended + ([(self._server_process.pid, server)] if server else [])

    def _after_a_death(self, record: logging.LogRecord) -> bool:
        """A log filter for the workers' records: none once a worker ended abnormally (the survivors'
        errors are consequences; the job's error names the worker that ended)."""
        with self._changed:
            return not self._abnormal_ends()

    def failures(self) -> list[str]:
        """How each worker (or the fork server) that ended abnormally ended, e.g. `pid 123 killed by SIGKILL`.

        Called after a job failed: a worker's end reaches the server a moment after the runner saw
        its connection drop, so this waits up to `FAILURE_REPORT_SECONDS` for one to be reported.
        """
        with self._changed:
            self._changed.wait_for(self._abnormal_ends, timeout=FAILURE_REPORT_SECONDS)
            found = self._abnormal_ends()
        return [f"pid {pid} killed by {_signal_name(-code)}" if code < 0 else f"pid {pid} exited with status {code}"
                for pid, code in found]

    def kill(self) -> None:
        """Ends the server and every worker it started at once (the run was interrupted)."""
        with self._changed:
            alive = [pid for pid in self._started if pid not in self._ended]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self._server_process.kill()
        self._server_process.wait()

    def close(self) -> None:
        """Ends the fork server (unused, it exits at once), waits for the workers it started to exit,
        then stops the service (their log streams end last)."""
        if self in _running:
            _running.remove(self)
        with self._lock:
            if not self._server_process.stdin.closed:
                try:
                    self._server_process.stdin.close()  # end-of-file: no more workers
                except OSError:  # the server died
                    pass
        try:
            self._server_process.wait(timeout=WORKER_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            with self._changed:
                stuck = [pid for pid in self._started if pid not in self._ended]
            for pid in stuck:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._server_process.kill()
            self._server_process.wait()
        self._status_reader.join(timeout=WORKER_EXIT_SECONDS)
        if self._server is not None:
            self._server.stop(0)
            self._server = None
            from apache_beam.runners.portability import local_job_service

            logging.getLogger(local_job_service.__name__).removeFilter(self._after_a_death)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_prestarted: Optional[StandbyWorkers] = None
_running: list[StandbyWorkers] = []  # fork servers not closed yet (`stop_all_workers`)


def stop_all_workers() -> None:
    """Kills every local worker process this process started (Ctrl-C, SIGTERM): none outlives the run."""
    global _prestarted
    _prestarted = None
    for workers in list(_running):
        workers.kill()
        _running.remove(workers)


def prestart(beam_args: list[str], config: Optional[PipelineConfig] = None) -> None:
    """Starts the worker fork server if `beam_args` ask for local worker processes (see module docstring);
    ends a prestarted one they do not need. The server loads `config`'s tokenizers before its forks."""
    global _prestarted
    if not local_worker_count(beam_args):
        discard_prestarted()
    elif _prestarted is None:
        _prestarted = StandbyWorkers(job_tokenizers(config) if config is not None else (),
                                     job_engines(config) if config is not None else ())


def job_tokenizers(config: PipelineConfig) -> list[TokenizerConfig]:
    """The tokenizers `config`'s datasets name, each once (a dataset without one is skipped: planning
    reports it)."""
    found: list[TokenizerConfig] = []
    for dataset in config.datasets:
        try:
            tokenizer = config.tokenizer_for(dataset)
        except EasyDataError:
            continue
        if tokenizer not in found:
            found.append(tokenizer)
    return found


def job_engines(config: PipelineConfig) -> list[str]:
    """The fast tokenizer engines `config`'s datasets may use (`tokenize.engine`: `auto` may use any)."""
    from easydata.text.engines import fast_candidates

    found: list[str] = []
    for dataset in config.datasets:
        for name in fast_candidates(config.tokenize_for(dataset).engine):
            if name not in found:
                found.append(name)
    return found


def prestarted_engine_chooser() -> Optional[Any]:
    """`StandbyWorkers.choose_engine` of the prestarted fork server, for `prepare_run`; None without one."""
    return _prestarted.choose_engine if _prestarted is not None else None


def take_prestarted() -> StandbyWorkers:
    """The prestarted fork server, else a new one; the caller closes it."""
    global _prestarted
    workers, _prestarted = _prestarted, None
    return workers if workers is not None else StandbyWorkers()


def discard_prestarted() -> None:
    """Ends a prestarted fork server no job took (a job that failed before it ran)."""
    global _prestarted
    workers, _prestarted = _prestarted, None
    if workers is not None:
        workers.close()
