"""The output directory's life cycle: refuse or replace an existing output, stage, commit.

A run writes everything under `OUT/.easydata-tmp-<run_id>/` first. `commit_output` then writes the
commit marker `OUT/.easydata-committing`, removes the previous output's manifest (from that moment
the old output no longer looks complete), replaces the dataset folders with the staged ones; the
caller writes `manifest.json` last and then `finish_commit` removes the marker. A crash at any point
leaves either no manifest or the complete new output.

Readers see the old or the new complete output, never a mix: one that opened the old output before
the commit keeps its open shard files (local files stay readable after they are replaced); one that
starts during the commit finds the marker instead of a manifest and waits for the new manifest
(`easydata.manifest.read_manifest(wait_for_commit=...)`).
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid
from typing import Iterable

from easydata.errors import OutputError
from easydata.filesystems import get_fs, join
from easydata.manifest import COMMIT_MARKER, MANIFEST_NAME

__all__ = ["TEMP_PREFIX", "new_run_id", "prepare_output", "staging_dir", "commit_output", "finish_commit",
           "move_into_place"]

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
    try:
        exists = fs.exists(root)
        if exists and not fs.isdir(root):
            raise OutputError(f"output '{output_dir}' exists and is a file")
        entries = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)] if exists else []
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


def commit_output(output_dir: str, staging: str, moves: Iterable[tuple[str, str]]) -> None:
    """Replaces the previous output with staged files; the caller writes the manifest afterwards, then
    calls `finish_commit`.

    Args:
      output_dir: the output directory.
      staging: this run's staging directory (removed at the end).
      moves: `(staged_path, relative_final_path)` pairs.
    """
    fs, root = get_fs(output_dir)
    _, staging_root = get_fs(staging)
    staging_name = posixpath.basename(staging_root.rstrip("/"))
    manifest = join(root, MANIFEST_NAME)
    with fs.open(join(root, COMMIT_MARKER), "w") as f:  # before the old manifest goes: readers wait for the new
        json.dump({"run_id": staging_name[len(TEMP_PREFIX):], "started_at": time.time()}, f)
    if fs.exists(manifest):
        fs.rm(manifest)
    for path in fs.ls(root, detail=False):
        name = posixpath.basename(path.rstrip("/"))
        if name not in (staging_name, COMMIT_MARKER) and not name.startswith(TEMP_PREFIX):
            fs.rm(path, recursive=True)
    move_into_place(output_dir, moves)
    fs.rm(staging_root, recursive=True)


def finish_commit(output_dir: str) -> None:
    """Removes the commit marker once the new manifest is in place."""
    fs, root = get_fs(output_dir)
    marker = join(root, COMMIT_MARKER)
    if fs.exists(marker):
        fs.rm(marker)


def move_into_place(output_dir: str, moves: Iterable[tuple[str, str]]) -> None:
    """Moves staged files to their paths relative to `output_dir` (renames on one filesystem)."""
    fs, root = get_fs(output_dir)
    for src, rel in moves:
        _, src_path = get_fs(src)
        dest = join(root, rel)
        fs.makedirs(posixpath.dirname(dest), exist_ok=True)
        fs.mv(src_path, dest)
