"""Entry point of local Beam worker processes: one process imports once, then forks a quiet harness per worker.

Started by `beam_pipelines.local.worker_pool.StandbyWorkers` before the job needs it, this process imports
Beam's harness and the libraries the job's steps use (seconds of CPU), then serves requests on
stdin: each line is a JSON object of the environment variables Beam's harness reads (control and
logging endpoints, worker id, pipeline options), and for each one the process forks a child that runs
the harness until the runner closes it. The children share the imported modules, so N workers cost one
import instead of N (on 2 cores, two workers importing at once also slowed the launching process's
own start-up, which is the job's critical path). The job's tokenizers are loaded once too, before the
forks (named in `PRELOAD_TOKENIZERS_VARIABLE`; each worker's steps then find them loaded, see
`easydata.text.tokenizer.shared_tokenizer`). Nothing that starts threads (gRPC channels, a tokenizer's
encoding threads, Arrow's thread pools) runs before a fork; the harness creates them in the child. Where
forking such a process is unsafe (macOS: system frameworks), or with `EASYDATA_WORKER_START=spawn`,
each worker is a fresh interpreter instead (`python -m beam_pipelines.local.local_worker --worker`, its
endpoints in its environment), still a child of this process.

A request line `{"verify": {...}}` instead asks which tokenizer engine the job uses (planning's
verification, `easydata.text.engines.choose_engine`): a forked child (`verifier <pid>`) runs it with
the tokenizer and fast engines this process preloaded, writes the `EngineChoice` to the request's
`result` file and ends, so that the launching process need not load the same engine (a large
vocabulary's takes about a second) a second time; the child may start threads, this process still starts none.

Status lines go to the launcher on this process's original stdout, written with single `os.write`
calls: `started <pid>` after each worker's fork, `verifier <pid>` after a verifier's, and
`ended <pid> <code>` when a child is reaped (the exit code, negative for a signal, as `subprocess`
reports it). This process's own stdout is redirected to
stderr first, so nothing a worker prints can corrupt them. End-of-file on stdin (the pool was closed,
or its launcher ended) stops the forking; the process then waits for its children and exits at once.

The harness logs every gRPC channel at INFO on its own stderr before it has read any option, and
Beam logs warnings about optional GCP libraries at import; only errors reach stderr here (worker log
records still travel to the launching process, whose logging configuration decides what is shown).
Logging is set up before Beam is imported; this process and its workers run without the optional
libraries a local batch job never uses (`beam_pipelines.local.lean_import`). Bundles end without waiting
for Beam's state sampler (`transforms.beam_internals.short_state_sampling`).

Once the harness has shut down (every DoFn torn down), a child flushes its log stream and ends
without interpreter teardown: freeing every object of a process holding Beam, pyarrow and a
tokenizer took about a second, and the job's runner waited for it. Beam's log handler can wait for
ever for the log service to end its stream (seen after a 400 MB job: both workers blocked in
`FnApiLogRecordHandler.close` after the output was committed), so that flush is given
`LOG_CLOSE_SECONDS`.
"""

import json
import logging
import os
import random
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Optional

from beam_pipelines.local.lean_import import without_unused_libraries
from easydata.logs import quiet_local_worker

if TYPE_CHECKING:
    from easydata.config import TokenizerConfig

#: How long a finished worker waits for its log stream to close before it exits anyway.
LOG_CLOSE_SECONDS = 2.0

#: How the server starts each worker: `fork` (Linux) or `spawn` (a fresh interpreter that imports
#: everything again; the default elsewhere, where forking a process that loaded system frameworks
#: is unsafe). The environment variable `EASYDATA_WORKER_START` chooses.
START_METHOD_VARIABLE = "EASYDATA_WORKER_START"

#: The job's tokenizers (a JSON list of `TokenizerConfig` fields), loaded by a fork server before it
#: forks, so that every worker starts with them (`easydata.text.tokenizer.preload_tokenizers`).
PRELOAD_TOKENIZERS_VARIABLE = "EASYDATA_PRELOAD_TOKENIZERS"
#: The fast tokenizer engines (a JSON list of names) the server loads for each of those tokenizers.
PRELOAD_ENGINES_VARIABLE = "EASYDATA_PRELOAD_ENGINES"

_CHILD_SIGNALS = {signal.SIGCHLD}


def _tokenizers_to_preload() -> list["TokenizerConfig"]:
    """The `TokenizerConfig`s named by `PRELOAD_TOKENIZERS_VARIABLE` (none when unset)."""
    from easydata.config import TokenizerConfig

    return [TokenizerConfig(**fields) for fields in json.loads(os.environ.pop(PRELOAD_TOKENIZERS_VARIABLE, "[]"))]


def _status(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())


def _reap(status_fd: int, block: bool) -> None:
    """Reports every child that has ended (with `block`, waits until all have)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:  # no child left
            return
        if pid == 0:
            return
        _status(status_fd, f"ended {pid} {os.waitstatus_to_exitcode(status)}")


def _run_harness(env: dict[str, str]) -> None:
    """Beam's SDK harness with `env` until the runner closes it, then a bounded log flush."""
    from apache_beam.runners.worker import sdk_worker_main
    from transforms.beam_internals import short_state_sampling

    os.environ.update(env)
    log_handler, harness, _ = sdk_worker_main.create_harness(os.environ)
    quiet_local_worker()
    with short_state_sampling():
        harness.run()
    if log_handler is not None:  # flush the log stream, but do not wait on it for ever
        closing = threading.Thread(target=log_handler.close, daemon=True)
        closing.start()
        closing.join(LOG_CLOSE_SECONDS)


def start_method() -> str:
    """`fork` or `spawn` (see `START_METHOD_VARIABLE`)."""
    chosen = os.environ.get(START_METHOD_VARIABLE) or ("fork" if sys.platform.startswith("linux") else "spawn")
    if chosen not in ("fork", "spawn"):
        raise ValueError(f"{START_METHOD_VARIABLE} must be fork or spawn, got {chosen!r}")
    return chosen


def _worker(env: dict[str, str], stderr_handler: logging.Handler, status_fd: Optional[int] = None) -> None:
    """A worker process's whole life: the harness, then an exit without teardown; never returns.

    With `status_fd`, the process is a fork of the server: it first leaves the server's state
    behind (signal handling, the status and request streams, the random state it shares with its
    siblings).
    """
    code = 0
    try:
        if status_fd is not None:
            _leave_server_state(status_fd)
        _run_harness(env)
    except BaseException:  # noqa: BLE001 - a forked worker must never return into the server's loop
        traceback.print_exc()
        code = 1
    finally:
        stderr_handler.flush()  # not logging.shutdown(): it would close Beam's log handler again, waiting
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _leave_server_state(status_fd: int) -> None:
    """In a forked child: the server's signal handling, status and request streams and random state
    are not the child's."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _CHILD_SIGNALS)
    os.close(status_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the requests are the server's, not this child's
    os.close(devnull)
    random.seed()


def _start_verifier(request: dict[str, Any], status_fd: int, stderr_handler: logging.Handler) -> int:
    """Forks a child that chooses a tokenizer engine for `request` (see the module docstring) and writes
    the choice, as JSON, to `request["result"]` (atomically); returns its pid."""
    pid = os.fork()
    if pid != 0:
        return pid
    code = 0
    try:
        _leave_server_state(status_fd)
        import dataclasses

        from easydata.config import TokenizerConfig
        from easydata.io.filesystems import write_atomic
        from easydata.text.tokenizer import choose_engine_here

        with open(request["sample"], encoding="utf-8") as f:
            sample = json.load(f)
        choice = choose_engine_here(TokenizerConfig(**request["tokenizer"]), request["requested"], sample,
                                    request["add_special_tokens"])
        write_atomic(request["result"], json.dumps(dataclasses.asdict(choice)).encode())
    except BaseException:  # noqa: BLE001 - a forked child must never return into the server's loop
        traceback.print_exc()
        code = 1
    finally:
        stderr_handler.flush()
        sys.stderr.flush()
        os._exit(code)


#: Carries a process's `sys.path` to the Python processes it starts (`python_command`).
SYS_PATH_VARIABLE = "EASYDATA_SYS_PATH"


def python_command(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command (and what to add to its environment) that runs `module` as `python -m module args` would,
    importing what this process imports: this process's `sys.path` replaces the child's before anything is
    imported. `-m` puts the working directory first, so an `easydata/` or `beam_pipelines/` there (a source
    checkout of another version) shadowed the installed package the launcher runs, in the workers only."""
    code = (f"import json, os, runpy, sys; sys.path[:] = json.loads(os.environ.pop({SYS_PATH_VARIABLE!r}));"
            f" runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", code, *args], {SYS_PATH_VARIABLE: json.dumps(sys.path)}


def _start_worker(env: dict[str, str], method: str, status_fd: int, stderr_handler: logging.Handler) -> int:
    """Starts one worker for `env`; returns its pid (a child of this process either way)."""
    if method == "spawn":  # the harness reads its endpoints from the environment
        command, path_env = python_command(__spec__.name, "--worker")
        return os.posix_spawn(sys.executable, command, {**os.environ, **env, **path_env},
                              setsigmask=(),  # not the server's mask: SIGCHLD blocked
                              file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)])
    pid = os.fork()
    if pid == 0:
        _worker(env, stderr_handler, status_fd)
    return pid


def serve(requests: Any, status_fd: int, stderr_handler: logging.Handler, method: str = "fork") -> None:
    """Starts one worker per JSON line of `requests` (or a verifier, for a `verify` request) until
    end-of-file, then waits for the children."""
    signal.signal(signal.SIGCHLD, lambda *_: _reap(status_fd, block=False))
    for line in requests:
        if not line.strip():
            continue
        env = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_SIGNALS)  # report `started` before its `ended`
        if "verify" in env:  # sent only to a fork server (`StandbyWorkers.choose_engine`)
            _status(status_fd, f"verifier {_start_verifier(env['verify'], status_fd, stderr_handler)}")
        else:
            pid = _start_worker(env, method, status_fd, stderr_handler)
            _status(status_fd, f"started {pid}")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _CHILD_SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_SIGNALS)
    _reap(status_fd, block=True)


def main() -> None:
    with without_unused_libraries():  # this process and its workers run one local batch job
        _serve_or_work()


def _exit_quietly_on_signals() -> None:
    """Ctrl-C reaches every process of the terminal's group, and SIGTERM and SIGHUP may reach the workers too:
    they end at once, without tracebacks (the launcher reports the interruption in one or two lines). A signal
    the launcher was started ignoring (SIGHUP under `nohup`, SIGINT for a script's `easydata ... &`) stays
    ignored here, as in the launcher."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, lambda number, _: os._exit(128 + number))


def _serve_or_work() -> None:
    from easydata.memory import map_large_blocks

    map_large_blocks()  # before this process allocates much; forked workers inherit it
    _exit_quietly_on_signals()  # inherited by forked workers; spawned ones run this too
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    logging.basicConfig(handlers=[handler], format="%(levelname)s:%(name)s:%(message)s")
    if sys.argv[1:] == ["--worker"]:  # a spawned worker: its endpoints are in the environment
        _worker({}, handler)
    method = start_method()
    status_fd = os.dup(1)  # not inherited by spawned workers
    os.dup2(2, 1)  # prints of this process and its children go to stderr, not into the status lines
    if method == "fork":  # import once, before any fork
        import easydata.text.tokenizer  # the job's steps need these

        # The tokenizers load (their Rust parts without the GIL) while Beam is imported; the thread
        # has ended before any fork.
        loading = threading.Thread(target=easydata.text.tokenizer.preload_tokenizers, name="easydata-preload",
                                   args=(_tokenizers_to_preload(),
                                         json.loads(os.environ.pop(PRELOAD_ENGINES_VARIABLE, "[]"))))
        loading.start()
        from apache_beam.runners.worker import sdk_worker_main  # noqa: F401

        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401
        import transforms  # noqa: F401
        import transforms.beam_internals  # noqa: F401

        loading.join()
    serve(sys.stdin, status_fd, handler, method)
    # Every worker has ended and been reported: leave without the interpreter's teardown (freeing
    # Beam's, Arrow's and the tokenizer's modules takes most of a second, and the launcher waits for this exit).
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
