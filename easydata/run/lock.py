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
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Optional

from easydata.errors import OutputError
from easydata.io.filesystems import get_fs, join

__all__ = ["LOCK_NAME", "LEASE_SECONDS", "HEARTBEAT_SECONDS", "OutputLock", "read_lock"]

LOCK_NAME = ".easydata-lock"
HEARTBEAT_SECONDS = 30.0
LEASE_SECONDS = 300.0


def read_lock(output_dir: str) -> Optional[dict[str, Any]]:
    """The lock's content, `{}` when it is unreadable (being written), or None when there is none."""
    fs, root = get_fs(output_dir)
    try:
        with fs.open(join(root, LOCK_NAME), "rb") as f:
            data = json.loads(f.read() or b"{}")
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


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
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) and \
            not _alive(holder["pid"]):
        return f"process {holder['pid']} on this host has ended"
    if now - heartbeat > float(holder.get("lease_seconds") or LEASE_SECONDS):
        return f"its last heartbeat is {now - heartbeat:.0f} s old"
    return None


def _describe(output_dir: str, holder: dict[str, Any]) -> str:
    started = holder.get("started_at")
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if isinstance(started, (int, float)) \
        else "an unknown time"
    return (f"output '{output_dir}' is in use by run {holder.get('run_id', '?')} (host {holder.get('host', '?')},"
            f" pid {holder.get('pid', '?')}, since {since}); wait for it to end, or choose another --output"
            f" (if that run is gone, its lock expires {LEASE_SECONDS:.0f} s after its last heartbeat)")


class OutputLock:
    """The exclusive lock of one run on one output directory; a context manager.

    Args:
      output_dir: the output directory (created if absent).
      run_id: this run's id, written into the lock.
      heartbeat_seconds: how often the lease is renewed (0: never, for tests).
    """

    def __init__(self, output_dir: str, run_id: str, *, heartbeat_seconds: float = HEARTBEAT_SECONDS):
        self.output_dir, self.run_id, self.heartbeat_seconds = output_dir, run_id, heartbeat_seconds
        self.took_over: Optional[str] = None  # why a stale lock was taken over, if one was
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _content(self, started: float) -> bytes:
        return json.dumps({"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "started_at": started, "heartbeat_at": time.time(),
                           "lease_seconds": LEASE_SECONDS}).encode()

    def acquire(self) -> "OutputLock":
        """Takes the lock (or a stale one over).

        Raises:
          OutputError: another live run holds it (one line naming it), or the output is not writable.
        """
        fs, root = get_fs(self.output_dir)
        path = join(root, LOCK_NAME)
        self._started = time.time()
        self._created_dir = not fs.exists(root)
        for _ in range(3):
            try:
                fs.makedirs(root, exist_ok=True)
                _create_exclusive(fs, path, self._content(self._started))
                break
            except FileExistsError:
                holder = read_lock(self.output_dir)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder.get("run_id") == self.run_id and holder.get("host") == socket.gethostname() \
                        and holder.get("pid") == os.getpid():
                    break  # ours already (acquired twice in one process)
                reason = stale_reason(holder) if holder else None
                if reason is None:
                    raise OutputError(_describe(self.output_dir, holder or {})) from None
                self.took_over = f"run {holder.get('run_id', '?')}'s lock is stale: {reason}"
                fs.rm(path)
            except OutputError:
                raise
            except OSError as e:
                raise OutputError(f"cannot lock output '{self.output_dir}': {e.strerror or e}") from None
        else:
            raise OutputError(_describe(self.output_dir, read_lock(self.output_dir) or {}))
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
