"""The output directory's life cycle: refuse or replace an existing output, stage, commit.

A run writes everything under `OUT/.easydata-tmp-<run_id>/` first. `commit_output` then writes the
commit marker `OUT/.easydata-committing` (a journal of the moves and the new manifest), removes the
previous output's manifest (from that moment the old output no longer looks complete), replaces the
dataset folders with the staged ones, writes `manifest.json` last and removes the marker. A crash at
any point leaves either no manifest or the complete new output, and the journal lets any later
attempt (a retried bundle, `--resume`, a rerun: `recover_commit`) finish the same commit to the same
bytes.

Readers see the old or the new complete output, never a mix: one that opened the old output before
the commit keeps its open shard files (local files stay readable after they are replaced); one that
starts during the commit finds the marker instead of a manifest and waits for the new manifest
(`easydata.run.manifest.read_manifest(wait_for_commit=...)`).
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid
from typing import Any, Iterable, Optional

from easydata.errors import OutputError
from easydata.io.filesystems import get_fs, join
from easydata.run.lock import LOCK_NAME
from easydata.run.manifest import COMMIT_MARKER, MANIFEST_NAME, write_manifest

__all__ = ["TEMP_PREFIX", "new_run_id", "prepare_output", "staging_dir", "commit_output", "recover_commit",
           "finish_commit", "move_into_place"]

TEMP_PREFIX = ".easydata-tmp-"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def staging_dir(output_dir: str, run_id: str) -> str:
    return join(output_dir, TEMP_PREFIX + run_id)


def prepare_output(output_dir: str, overwrite: bool) -> None:
    """Checks that `output_dir` may be written and creates it.

    Raises:
      OutputError: when it exists and is not empty without `overwrite` (a directory holding only
        unfinished runs' staging directories does not count), or when `overwrite` would delete a
        directory that is not an easydata output.
    """
    fs, root = get_fs(output_dir)
    recover_commit(output_dir)  # a commit a killed run left half done is finished first, never mixed with ours
    try:
        exists = fs.exists(root)
        if exists and not fs.isdir(root):
            raise OutputError(f"output '{output_dir}' exists and is a file")
        entries = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)] if exists else []
        entries = [e for e in entries if e != LOCK_NAME]  # the lock of this run (easydata.run.lock)
    except OutputError:
        raise
    except Exception as e:
        raise OutputError(f"cannot access output '{output_dir}': {e}") from None
    unfinished_only = entries and all(e.startswith(TEMP_PREFIX) and e != TEMP_PREFIX for e in entries)
    if entries and not unfinished_only:  # (only unfinished runs' staging: not an output, may be resumed)
        if not overwrite:
            raise OutputError(f"output '{output_dir}' already exists; set save.overwrite: true (or"
                              " --set save.overwrite=true) to replace it, or choose another --output")
        ours = MANIFEST_NAME in entries or COMMIT_MARKER in entries or any(e.startswith(TEMP_PREFIX) for e in entries)
        if not ours:
            raise OutputError(f"refusing to overwrite '{output_dir}': it is not an easydata output"
                              f" (no {MANIFEST_NAME}); remove it yourself or choose another --output")
    try:
        fs.makedirs(root, exist_ok=True)
    except Exception as e:
        raise OutputError(f"cannot create output '{output_dir}': {e}") from None


def commit_output(output_dir: str, staging: str, moves: Iterable[tuple[str, str]],
                  manifest: Optional[dict[str, Any]] = None) -> None:
    """Replaces the previous output with staged files (and, given `manifest`, writes it and ends the
    commit; without it the caller writes the manifest, then calls `finish_commit`).

    The commit is journaled: the marker `OUT/.easydata-committing` records the moves and the manifest
    before anything changes, and every step checks what is already done. Run again after failing at
    any point (a runner's retry, a `--resume` or a rerun after a kill), it completes the same commit to
    the same bytes instead of deleting what it had already moved (`recover_commit`).

    Args:
      output_dir: the output directory.
      staging: this run's staging directory (removed once its files are in place).
      moves: `(staged_path, relative_final_path)` pairs.
      manifest: the new manifest, written last.

    Raises:
      OutputError: a staged file is neither in staging nor in place (nothing is changed then).
    """
    fs, root = get_fs(output_dir)
    _, staging_root = get_fs(staging)
    staging_name = posixpath.basename(staging_root.rstrip("/"))
    run_id = staging_name[len(TEMP_PREFIX):]
    moves = [(src, rel) for src, rel in moves]
    previous = _read_journal(fs, root)
    retry = bool(previous) and previous.get("run_id") == run_id
    # Before the journal: a broken commit must not touch the old output. On a first attempt every file
    # is still staged; a retry may find some already in place.
    _check_staged(fs, root, moves, in_place_counts=retry)
    started = previous["started_at"] if retry else time.time()
    journal = {"run_id": run_id, "started_at": started, "staging": staging_name,
               "moves": [[src, rel] for src, rel in moves], "manifest": manifest}
    _write_atomic(fs, join(root, COMMIT_MARKER), json.dumps(journal).encode())
    _complete(fs, root, output_dir, journal)


def recover_commit(output_dir: str) -> Optional[str]:
    """Completes a commit that a killed or failed run left half done (its journal names every move and
    the manifest); returns that run's id, or None when there was nothing to complete."""
    fs, root = get_fs(output_dir)
    try:
        journal = _read_journal(fs, root)
    except Exception:  # an unreadable or foreign directory: left to the caller's own checks
        return None
    if not journal or not isinstance(journal.get("moves"), list) or not isinstance(journal.get("manifest"), dict):
        return None
    _complete(fs, root, output_dir, journal)
    return str(journal.get("run_id"))


def _read_journal(fs: Any, root: str) -> Optional[dict[str, Any]]:
    try:
        with fs.open(join(root, COMMIT_MARKER), "rb") as f:
            data = json.loads(f.read() or b"{}")
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def _write_atomic(fs: Any, path: str, data: bytes) -> None:
    temp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(temp, "wb") as f:
        f.write(data)
    fs.mv(temp, path)


def _check_staged(fs: Any, root: str, moves: list[tuple[str, str]], in_place_counts: bool = True) -> None:
    for src, rel in moves:
        if not fs.exists(get_fs(src)[1]) and not (in_place_counts and fs.exists(join(root, rel))):
            raise OutputError(f"cannot commit: staged file '{src}' is missing (and '{rel}' is not in place);"
                              " the staging directory was changed during the run: rerun it")


def _complete(fs: Any, root: str, output_dir: str, journal: dict[str, Any]) -> None:
    """The commit's steps, each skipping what an earlier attempt did: drop the old manifest and every
    file that is not this commit's, move what is still staged, remove staging, write the manifest,
    remove the journal."""
    moves = [(str(src), str(rel)) for src, rel in journal["moves"]]
    staged = {rel: fs.exists(get_fs(src)[1]) for src, rel in moves}
    _check_staged(fs, root, moves)
    manifest = join(root, MANIFEST_NAME)
    if fs.exists(manifest):
        fs.rm(manifest)
    in_place = {join(root, rel).rstrip("/") for rel, waiting in staged.items() if not waiting}
    for path in fs.ls(root, detail=False):
        path = path.rstrip("/")
        name = posixpath.basename(path)
        if name in (COMMIT_MARKER, LOCK_NAME) or name.startswith(TEMP_PREFIX) or path in in_place:
            continue
        if any(kept.startswith(path + "/") for kept in in_place):  # a folder holding moved files: the rest goes
            for file in fs.find(path):
                if file.rstrip("/") not in in_place:
                    fs.rm(file)
        else:
            fs.rm(path, recursive=True)
    move_into_place(output_dir, [(src, rel) for src, rel in moves if staged[rel]])
    staging = join(root, str(journal.get("staging") or ""))
    if journal.get("staging") and fs.exists(staging):
        fs.rm(staging, recursive=True)
    if journal.get("manifest") is not None:
        write_manifest(output_dir, journal["manifest"])
        finish_commit(output_dir)


def finish_commit(output_dir: str) -> None:
    """Removes the commit marker once the new manifest is in place."""
    fs, root = get_fs(output_dir)
    marker = join(root, COMMIT_MARKER)
    if fs.exists(marker):
        fs.rm(marker)


def move_into_place(output_dir: str, moves: Iterable[tuple[str, str]]) -> None:
    """Moves staged files to their paths relative to `output_dir` (renames on one filesystem). Safe to
    run again: a file already moved (gone from staging, in place) is skipped.

    Raises:
      OutputError: a staged file is neither in staging nor in place.
    """
    fs, root = get_fs(output_dir)
    for src, rel in moves:
        _, src_path = get_fs(src)
        dest = join(root, rel)
        if not fs.exists(src_path):
            if fs.exists(dest):
                continue  # an earlier attempt moved it
            raise OutputError(f"cannot commit: staged file '{src}' is missing (and '{rel}' is not in place)")
        fs.makedirs(posixpath.dirname(dest), exist_ok=True)
        fs.mv(src_path, dest)
