"""One run at a time per output directory: an exclusive lock file with an owner and a lease.

Two runs into one output (neither with `--overwrite`) used to both exit 0, one silently replacing the
other. A run now holds `OUT/.easydata-lock` from planning to the end of its commit. The file says who
holds it (`run_id`, `host`, `pid`, `started_at`) and when the holder last said it was alive
(`heartbeat_at`, renewed every `HEARTBEAT_SECONDS` by a thread of the launching process). A second
run finds it and fails with one line naming the holder. A lock is stale, and a new run (a rerun or
`--resume`) takes it over, when its holder's process is gone (same host) or its heartbeat is older
than `LEASE_SECONDS` (any host).

Creating the file is atomic where the filesystem offers create-if-absent: `O_EXCL` on local disks and
`memory://`, `ifGenerationMatch=0` on Google Cloud Storage and `If-None-Match: *` on S3 (through
fsspec's `xb` mode); on a filesystem without it the check and the create are two steps, and two runs
started within the same instant could both pass (said in docs/operations.md).

Taking a stale lock over is atomic too: the taker moves the lock file aside under a name of its own
(a rename: only one mover gets a given file) and compares what it moved with the stale content it
judged. Equal, the stale lock is gone and the taker creates its own lock as above (create-if-absent:
one winner). Different, it moved a live lock that another run had just taken: it puts that lock back
(create-if-absent) and fails as a second run. The commit checks that the lock is still this run's
(`check_owner`), so a run that lost its lock never commits.

A job submitted to a remote runner and left running (the Dataflow Flex Template launcher exits once the
job is accepted) holds a *detached* lock: taken the same way at launch, with no heartbeat and a lease of
`DETACHED_LEASE_SECONDS`, never judged by its launcher's process (which has ended), and released by the
job's own commit (`release_lock`). A second launch into the output meanwhile fails in one line; a job
that died without committing leaves the lock until its lease ends or the user removes it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Optional

from easydata.errors import InputError, OutputError, OutputInUse
from easydata.io.filesystems import get_fs, join, open_regular, require_bucket

__all__ = ["LOCK_NAME", "LEASE_SECONDS", "HEARTBEAT_SECONDS", "DETACHED_LEASE_SECONDS", "OutputLock", "read_lock",
           "check_owner", "release_lock"]

LOCK_NAME = ".easydata-lock"
HEARTBEAT_SECONDS = 30.0
LEASE_SECONDS = 300.0
#: How long a detached lock (a submitted job's) holds the output without its commit: a batch job's longest run.
DETACHED_LEASE_SECONDS = 3 * 24 * 3600.0


def _read_raw(output_dir: str) -> Optional[bytes]:
    fs, root = get_fs(output_dir)
    try:
        with open_regular(fs, join(root, LOCK_NAME), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except (OSError, InputError):  # unreadable, or a special file in its place: held (never taken over)
        return b""


def _parse(raw: Optional[bytes]) -> Optional[dict[str, Any]]:
    if raw is None:
        return None
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # being written, or corrupt (deeply nested): unreadable, so held
        return {}
    if not isinstance(data, dict):
        return {}
    # A field of the wrong type reads as unknown: a corrupt lock is still held, never a traceback.
    return {k: v for k, v in data.items() if k in _FIELDS and isinstance(v, _FIELDS[k])
            and (isinstance(v, bool) == (_FIELDS[k] is bool))}


#: The lock's fields and their JSON types.
_FIELDS: dict[str, Any] = {"run_id": str, "host": str, "pid": int, "started_at": (int, float),
                           "heartbeat_at": (int, float), "lease_seconds": (int, float), "detached": bool}


def read_lock(output_dir: str) -> Optional[dict[str, Any]]:
    """The lock's content, `{}` when it is unreadable (being written), or None when there is none."""
    return _parse(_read_raw(output_dir))


def check_owner(output_dir: str, run_id: Optional[str]) -> None:
    """Raises OutputError unless the output's lock is still held by `run_id` (None: no lock to check).

    A run presumed dead whose lock another run took over must not commit over that run's output.
    """
    if run_id is None:
        return
    holder = read_lock(output_dir)
    if holder is not None and holder.get("run_id") != run_id:
        raise OutputError(f"this run lost its lock on output '{output_dir}' to run {holder.get('run_id', '?')}"
                          " (it was presumed dead); nothing was committed")


def release_lock(output_dir: str, run_id: Optional[str], *, detached_only: bool = False) -> None:
    """Removes the output's lock if `run_id` holds it (with `detached_only`, only a detached lock: a
    submitted job's commit ends its hold this way, while a local run's launcher releases its own)."""
    if run_id is None:
        return
    holder = read_lock(output_dir)
    if holder is not None and holder.get("run_id") == run_id and (holder.get("detached") or not detached_only):
        fs, root = get_fs(output_dir)
        try:
            fs.rm(join(root, LOCK_NAME))
        except FileNotFoundError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def stale_reason(holder: dict[str, Any], now: Optional[float] = None) -> Optional[str]:
    """Why a lock no longer protects a run (None: its holder may still be running)."""
    now = time.time() if now is None else now
    heartbeat = holder.get("heartbeat_at")
    if not isinstance(heartbeat, (int, float)):
        return "it holds no heartbeat"
    if not holder.get("detached") and holder.get("host") == socket.gethostname() and \
            isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):  # a detached job outlives its launcher
        return f"process {holder['pid']} on this host has ended"
    if now - heartbeat > float(holder.get("lease_seconds") or LEASE_SECONDS):
        return f"its last heartbeat is {now - heartbeat:.0f} s old"
    return None


def _describe(output_dir: str, holder: dict[str, Any]) -> str:
    if not holder:  # unreadable (corrupt, or a special file in its place): held, and it never expires by itself
        return (f"output '{output_dir}' is locked by '{LOCK_NAME}', which cannot be read (corrupt, being written,"
                " or not a regular file); if no run is writing there, remove it and run again")
    started = holder.get("started_at")
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if isinstance(started, (int, float)) \
        else "an unknown time"
    if holder.get("detached"):
        return (f"output '{output_dir}' is held by job {holder.get('run_id', '?')}, launched from host"
                f" {holder.get('host', '?')} at {since}, until it commits; if that job is no longer running, remove"
                f" '{join(output_dir, LOCK_NAME)}' and launch again")
    return (f"output '{output_dir}' is in use by run {holder.get('run_id', '?')} (host {holder.get('host', '?')},"
            f" pid {holder.get('pid', '?')}, since {since}); wait for it to end, or choose another --output"
            f" (if that run is gone, its lock expires {LEASE_SECONDS:.0f} s after its last heartbeat)")


class OutputLock:
    """The exclusive lock of one run on one output directory; a context manager.

    Args:
      output_dir: the output directory (created if absent).
      run_id: this run's id, written into the lock.
      heartbeat_seconds: how often the lease is renewed (0: never, for tests).
      detached: a submitted job's lock (see the module docstring): no heartbeat, the long lease, and
        its holder's process is not watched; the job's commit releases it.
    """

    def __init__(self, output_dir: str, run_id: str, *, heartbeat_seconds: float = HEARTBEAT_SECONDS,
                 detached: bool = False):
        self.output_dir, self.run_id, self.detached = output_dir, run_id, detached
        self.heartbeat_seconds = 0.0 if detached else heartbeat_seconds
        self.took_over: Optional[str] = None  # why a stale lock was taken over, if one was
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _content(self, started: float) -> bytes:
        content = {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                   "started_at": started, "heartbeat_at": time.time(),
                   "lease_seconds": DETACHED_LEASE_SECONDS if self.detached else LEASE_SECONDS}
        if self.detached:
            content["detached"] = True
        return json.dumps(content).encode()

    def acquire(self) -> "OutputLock":
        """Takes the lock (or a stale one over).

        Raises:
          OutputInUse: another live run holds it (one line naming it).
          OutputError: the output is not a directory or not writable, or its bucket does not exist.
        """
        require_bucket(self.output_dir)  # the lock is an output's first write: makedirs would create a bucket
        fs, root = get_fs(self.output_dir)
        path = join(root, LOCK_NAME)
        self._started = time.time()
        self._created_dir = not fs.exists(root)
        if not self._created_dir and not fs.isdir(root):  # a file, a FIFO, a device: makedirs says "exists"
            raise OutputError(f"output '{self.output_dir}' exists and is not a directory: choose another --output")
        try:
            fs.makedirs(root, exist_ok=True)
        except FileExistsError:
            pass  # there: s3fs says so where it tried to create a bucket it cannot see (anonymous access)
        except OSError as e:
            raise OutputError(f"cannot lock output '{self.output_dir}': {e.strerror or e}") from None
        for _ in range(3):
            try:  # only the lock's own creation may say FileExistsError here: another run holds it
                _create_exclusive(fs, path, self._content(self._started))
                break
            except FileExistsError:
                raw = _read_raw(self.output_dir)
                holder = _parse(raw)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder.get("run_id") == self.run_id and holder.get("host") == socket.gethostname() \
                        and holder.get("pid") == os.getpid():
                    break  # ours already (acquired twice in one process)
                reason = stale_reason(holder) if holder else None
                if reason is None:
                    raise OutputInUse(_describe(self.output_dir, holder or {})) from None
                if not _move_aside_if_unchanged(fs, path, raw or b""):
                    live = read_lock(self.output_dir)  # another run took it over first
                    raise OutputInUse(_describe(self.output_dir, live or holder)) from None
                self.took_over = f"run {holder.get('run_id', '?')}'s lock is stale: {reason}"
            except OutputError:
                raise
            except OSError as e:
                raise OutputError(f"cannot lock output '{self.output_dir}': {e.strerror or e}") from None
        else:
            raise OutputInUse(_describe(self.output_dir, read_lock(self.output_dir) or {}))
        holder = read_lock(self.output_dir)
        if holder == {}:  # the lock just written does not read back: not "held by an unreadable lock" (left as it is:
            # it may be another run's, mid-write; a run that can read it finds ours stale once this process ends)
            raise OutputError(f"output '{self.output_dir}': the lock this run wrote cannot be read back (credentials"
                              " that may write there but not read, or another run writing it at once); a run reads"
                              " its output as it writes it")
        if holder is not None and holder.get("run_id") != self.run_id:  # lost in a takeover race after all
            raise OutputInUse(_describe(self.output_dir, holder))
        if self.heartbeat_seconds > 0:
            self._thread = threading.Thread(target=self._beat, name="easydata-lock-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        fs, root = get_fs(self.output_dir)
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                holder = read_lock(self.output_dir)
                if holder and holder.get("run_id") != self.run_id:
                    return  # taken over (this run was presumed dead): never write over the new holder
                with fs.open(join(root, LOCK_NAME), "wb") as f:
                    f.write(self._content(self._started))
            except Exception:  # a missed heartbeat is retried; the lease covers several
                continue

    def release(self) -> None:
        """Stops the heartbeat and removes the lock if it is still this run's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder = read_lock(self.output_dir)
        fs, root = get_fs(self.output_dir)
        if holder is not None and holder.get("run_id") == self.run_id:
            try:
                fs.rm(join(root, LOCK_NAME))
            except FileNotFoundError:
                pass
        try:  # a run that failed before writing anything leaves no empty output directory behind
            if getattr(self, "_created_dir", False) and not fs.ls(root, detail=False):
                fs.rmdir(root)
        except OSError:
            pass

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _move_aside_if_unchanged(fs: Any, path: str, stale: bytes) -> bool:
    """Removes the lock at `path` if it still holds the `stale` bytes; False (the lock left as it was) when
    another run changed or took it meanwhile.

    The move is a rename to a name of this attempt's own, so of two runs taking over one stale lock only
    one moves it; the other moves nothing, or the winner's new lock, which it puts back at once.
    """
    aside = f"{path}.stale-{uuid.uuid4().hex[:12]}"
    try:
        fs.mv(path, aside)
    except FileNotFoundError:
        return False  # someone else moved or released it first
    try:
        with open_regular(fs, aside, "rb") as f:
            moved = f.read()
        if moved == stale:
            return True
        try:
            _create_exclusive(fs, path, moved)  # a live lock: back where it was, unless yet another run took the place
        except FileExistsError:
            pass
        return False
    finally:
        try:
            fs.rm(aside)
        except FileNotFoundError:
            pass


def _create_exclusive(fs: Any, path: str, data: bytes) -> None:
    """Writes `data` to a new file at `path`; FileExistsError when there is one (atomically where the
    filesystem supports fsspec's `xb` mode, else by checking first)."""
    try:
        with fs.open(path, "xb") as f:
            f.write(data)
        return
    except (ValueError, NotImplementedError, TypeError):  # no exclusive mode on this filesystem
        pass
    if fs.exists(path):
        raise FileExistsError(path)
    with fs.open(path, "wb") as f:
        f.write(data)
