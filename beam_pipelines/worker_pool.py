"""Local worker processes started before the job needs them, handed to Beam as an external worker pool.

A local multi-process job (`--direct_num_workers=N`) used to start its N SDK worker processes when
its first stage ran: each then spent about two seconds importing Beam, pyarrow and the tokenizer
library while the job waited (py-spy and a per-process CPU trace of the 48 MB benchmark job, README
"Performance"). `StandbyWorkers` starts them as early as the launching process knows it needs them
(the `easydata` command: right after parsing its arguments, before it imports Beam itself), so
that import overlaps the launcher's own start-up and planning.

The processes (`python -m beam_pipelines.local_worker`) import everything, then wait for their
endpoints on stdin. `serve` makes the pool a Beam external worker pool (the `BeamFnExternalWorkerPool`
gRPC service that Beam's `EXTERNAL` environment asks for workers, as Flink and Spark job servers
do): each `StartWorker` request hands one waiting process its control and logging endpoints, worker
id and pipeline options, and the process runs Beam's SDK harness until the runner closes it. The
pool also serves the workers' log stream (Beam's local log service, so worker records are logged
under `apache_beam` as with Beam's own subprocess workers, and `easydata`'s log levels apply). A
standby process whose launcher goes away reads end-of-file and exits, so none is left behind.

This module imports no Beam at module level: the `easydata` command starts the processes first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Optional

__all__ = ["StandbyWorkers", "LOCAL_RUNNERS", "local_worker_count", "prestart", "take_prestarted", "discard_prestarted",
           "WORKER_EXIT_SECONDS"]

#: How long `StandbyWorkers.close` waits for a worker that was handed a job to exit before killing it.
WORKER_EXIT_SECONDS = 30.0

#: Runner names that run on this machine's FnApiRunner (None: no `--runner`).
LOCAL_RUNNERS = {None, "DirectRunner", "FnApiRunner", "OfflineDirectRunner", "BundleBasedDirectRunner",
                  "SwitchingDirectRunner"}


def local_worker_count(beam_args: list[str]) -> int:
    """How many local worker processes `beam_args` ask for (0: the job runs in-process or elsewhere).

    The same decision as `beam_pipelines.runners.make_runner_and_options`, read without Beam: a
    local runner with `--direct_num_workers=N` (N > 1; 0 means one per core) and no
    `--direct_running_mode` other than `multi_processing`, in batch mode.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner", default=None)
    parser.add_argument("--direct_num_workers", type=int, default=1)
    parser.add_argument("--direct_running_mode", default=None)
    parser.add_argument("--streaming", action="store_true")
    try:
        known, _ = parser.parse_known_args(beam_args)
    except SystemExit:  # a malformed flag: Beam reports it when the options are parsed
        return 0
    if known.runner not in LOCAL_RUNNERS or known.streaming:
        return 0
    count = known.direct_num_workers or os.cpu_count() or 1
    mode = known.direct_running_mode or ("in_memory" if known.direct_num_workers == 1 else "multi_processing")
    return count if mode == "multi_processing" else 0


class StandbyWorkers:
    """Worker processes waiting for a job; `serve` offers them to Beam as an external worker pool."""

    def __init__(self, count: int):
        self.count = count
        self._waiting = [self._spawn() for _ in range(count)]
        self._running: list[subprocess.Popen] = []
        self._pipeline_options: Optional[str] = None
        self._server: Any = None
        self._address = ""
        self._lock = threading.Lock()

    @staticmethod
    def _spawn() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "beam_pipelines.local_worker"], stdin=subprocess.PIPE)

    def serve(self, pipeline_options_json: str) -> str:
        """Starts the worker pool service on localhost; returns its address for an `ExternalEnvironment`.

        Args:
          pipeline_options_json: the job's options as Beam's workers read them (`PIPELINE_OPTIONS`).
        """
        import grpc
        from apache_beam.portability.api import beam_fn_api_pb2_grpc
        from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer
        from apache_beam.utils import thread_pool_executor

        self._pipeline_options = pipeline_options_json
        pool = self

        class _Servicer(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
            def StartWorker(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                return pool._start_worker(request)

            def StopWorker(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                from apache_beam.portability.api import beam_fn_api_pb2

                return beam_fn_api_pb2.StopWorkerResponse()  # a worker ends when the runner closes it

        self._server = grpc.server(thread_pool_executor.shared_unbounded_instance())
        port = self._server.add_insecure_port("localhost:0")
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(_Servicer(), self._server)
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(BeamFnLoggingServicer(), self._server)
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
               "PIPELINE_OPTIONS": self._pipeline_options, "WORKER_ID": request.worker_id}
        with self._lock:
            process = self._waiting.pop(0) if self._waiting else self._spawn()
            self._running.append(process)
        try:
            process.stdin.write((json.dumps(env) + "\n").encode())
            process.stdin.close()
        except OSError as e:  # the process died while waiting
            return beam_fn_api_pb2.StartWorkerResponse(error=f"local worker process {process.pid} is gone: {e}")
        return beam_fn_api_pb2.StartWorkerResponse()

    def failures(self) -> list[str]:
        """How each handed-off process that ended abnormally ended, e.g. `pid 123 killed by SIGKILL`."""
        with self._lock:
            ended = [(p.pid, p.poll()) for p in self._running]
        found = []
        for pid, code in ended:
            if code is not None and code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                found.append(f"pid {pid} killed by {name}")
            elif code:
                found.append(f"pid {pid} exited with status {code}")
        return found

    def close(self) -> None:
        """Ends the processes no job used, waits for the others to exit, then stops the service (their
        log streams end last)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            running, self._running = self._running, []
        for process in waiting:  # end-of-file: the process exits without starting a harness
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
        for process in [*waiting, *running]:
            try:
                process.wait(timeout=WORKER_EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._server is not None:
            self._server.stop(0)
            self._server = None


_prestarted: Optional[StandbyWorkers] = None


def prestart(beam_args: list[str]) -> None:
    """Starts the worker processes `beam_args` will need, unless started already (see module docstring)."""
    global _prestarted
    count = local_worker_count(beam_args)
    if _prestarted is not None and _prestarted.count != count:
        discard_prestarted()
    if count and _prestarted is None:
        _prestarted = StandbyWorkers(count)


def take_prestarted(count: int) -> StandbyWorkers:
    """The prestarted workers if there are `count` of them, else `count` new ones; the caller closes them."""
    global _prestarted
    if _prestarted is not None and _prestarted.count == count:
        workers, _prestarted = _prestarted, None
        return workers
    discard_prestarted()
    return StandbyWorkers(count)


def discard_prestarted() -> None:
    """Ends prestarted workers no job took (a job that failed before it ran)."""
    global _prestarted
    workers, _prestarted = _prestarted, None
    if workers is not None:
        workers.close()
