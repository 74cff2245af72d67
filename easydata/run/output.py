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
import re
import time
import uuid
from typing import Any, Iterable, Optional

from easydata.errors import OutputError, ValidationFailed
from easydata.io.filesystems import get_fs, join, open_regular, require_bucket
from easydata.io.staging import TEMP_PREFIX, Staging
from easydata.run.lock import LOCK_NAME
from easydata.run.manifest import (COMMIT_MARKER, MANIFEST_NAME, is_easydata_manifest, member_path, owned_files,
                                   resolves_inside, write_manifest)

__all__ = ["check_not_replaced", "TEMP_PREFIX", "new_run_id", "check_output", "prepare_output", "foreign_file", "previous_run_files", "staging_dir", "commit_output", "recover_commit",
           "finish_commit", "move_into_place"]

#: The copy of a commit's journal inside its staging directory (`Staging.journal_copy`): the proof that the journal
#: at the top of the output was written by the run whose staging this is (`_provably_ours`).
JOURNAL_COPY = posixpath.basename(Staging("").journal_copy)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def staging_dir(output_dir: str, run_id: str) -> str:
    return Staging.of_run(output_dir, run_id).root


def check_output(output_dir: str, overwrite: bool) -> None:
    """Checks that `output_dir` may be written, reading only (planning and `prepare_output` call it).

    Raises:
      OutputError: when it exists and is not empty without `overwrite` (a directory holding only
        unfinished runs' staging directories does not count), or when `overwrite` would delete
        anything an easydata run did not write (`foreign_file`).
    """
    fs, root = get_fs(output_dir)
    try:
        if _read_journal(fs, root):  # a half-done commit: `prepare_output` finishes it, then checks
            return
    except Exception:  # an unreadable journal: the checks below (and recovery) say what is wrong
        pass
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
            raise OutputError(f"output '{output_dir}' already exists; pass --overwrite (save.overwrite: true) to"
                              " replace it, or choose another --output")
        foreign = foreign_file(output_dir)
        if foreign is not None:
            raise OutputError(f"refusing to overwrite '{output_dir}': '{foreign}' was not written by an easydata run"
                              " (overwrite replaces only a previous run's own files); move it away or choose"
                              " another --output")


def prepare_output(output_dir: str, overwrite: bool) -> None:
    """Finishes a commit a killed run left half done (never mixed with ours), checks that `output_dir` may
    be written (`check_output`) and creates it.

    Raises:
      OutputError: as `check_output`, or when it cannot be created (its bucket does not exist: `require_bucket`).
    """
    fs, root = get_fs(output_dir)
    recover_commit(output_dir)
    check_output(output_dir, overwrite)
    require_bucket(output_dir)
    try:
        fs.makedirs(root, exist_ok=True)
    except Exception as e:
        raise OutputError(f"cannot create output '{output_dir}': {e}") from None


def _previous_manifest(output_dir: str) -> Optional[dict[str, Any]]:
    """The output's manifest when an easydata run wrote it, else None (absent, unreadable or foreign)."""
    fs, root = get_fs(output_dir)
    try:
        with open_regular(fs, join(root, MANIFEST_NAME), "rb") as f:
            manifest = json.loads(f.read())
    except Exception:
        return None
    return manifest if is_easydata_manifest(manifest) else None


def previous_run_files(output_dir: str) -> list[str]:
    """The relative paths a previous run's manifest lists that resolve inside the output (the files an
    overwrite may delete); empty without an easydata manifest."""
    manifest = _previous_manifest(output_dir)
    owned = owned_files(manifest) if manifest is not None else set()
    fs, root = get_fs(output_dir)
    try:  # a commit that died before its manifest: the files it moved in are a run's too
        journal = _read_journal(fs, root)
        if journal:
            _provably_ours(output_dir, fs, root, journal)
            owned.update(str(rel) for _, rel in journal.get("moves") or [])
            owned.update(str(rel) for rel in journal.get("remove") or [])
    except Exception:
        pass
    if not owned:
        return []
    inside = [MANIFEST_NAME] if manifest is not None else []
    for rel in sorted(owned - {MANIFEST_NAME}):
        try:
            member_path(output_dir, rel)
        except ValidationFailed:
            continue
        inside.append(posixpath.normpath(rel))
    return inside


def _own_scratch(name: str) -> bool:
    """Top-level names a run itself writes besides its manifest's files: the lock, the commit journal,
    staging directories and the temporary names of atomic writes."""
    return (name in (LOCK_NAME, COMMIT_MARKER) or name.startswith(TEMP_PREFIX) or name.startswith(f".{MANIFEST_NAME}.tmp")
            or name.startswith(f"{COMMIT_MARKER}.tmp-") or name.startswith(f"{LOCK_NAME}."))


def foreign_file(output_dir: str) -> Optional[str]:
    """One path (relative to the output) that no easydata run wrote, or None when everything under
    `output_dir` is a previous run's (its manifest's files, dead letters) or a run's scratch files.

    A `manifest.json` that an easydata run did not write makes the manifest itself foreign.
    """
    fs, root = get_fs(output_dir)
    owned = set(previous_run_files(output_dir))
    if MANIFEST_NAME not in owned and fs.exists(join(root, MANIFEST_NAME)):
        return MANIFEST_NAME
    folders = {parent for rel in owned for parent in _parents(rel)}  # folders holding the previous run's files
    base = root.rstrip("/")
    for path, info in sorted(fs.find(root, withdirs=True, detail=True).items()):
        rel = posixpath.relpath(path.rstrip("/"), base)
        if rel == "." or _own_scratch(rel.split("/", 1)[0]) or rel in owned:
            continue
        if info.get("type") == "directory" and not info.get("islink") and rel in folders:
            continue
        return rel
    return None


def _parents(rel: str) -> list[str]:
    """`a/b/c.parquet` -> `["a", "a/b"]`."""
    parts = rel.split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


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
    staging_name = Staging(staging_root).name
    run_id = Staging(staging_root).run_id
    moves = [(src, rel) for src, rel in moves]
    previous = _read_journal(fs, root)
    retry = bool(previous) and previous.get("run_id") == run_id
    if retry and not fs.exists(staging_root) and manifest is not None and _current_manifest(fs, root) == manifest:
        finish_commit(output_dir)  # an earlier attempt got as far as the manifest and the staging's removal
        return
    # Before the journal: a broken commit must not touch the old output. On a first attempt every file
    # is still staged; a retry may find some already in place.
    _check_staged(fs, root, moves, in_place_counts=retry)
    started = previous["started_at"] if retry else time.time()
    # What the commit may delete: the previous run's own files (by its manifest), fixed before it goes.
    remove = previous.get("remove", []) if retry else previous_run_files(output_dir)
    journal = {"run_id": run_id, "started_at": started, "staging": staging_name,
               "moves": [[src, rel] for src, rel in moves], "remove": remove, "manifest": manifest}
    _trusted(output_dir, journal)
    data = json.dumps(journal).encode()
    _write_atomic(fs, Staging(staging_root).journal_copy, data)  # first: the proof that the journal is this run's
    _write_atomic(fs, join(root, COMMIT_MARKER), data)
    _complete(fs, root, output_dir, journal)


def check_not_replaced(output_dir: str, run_id: str, overwrite: bool) -> None:
    """Refuses to commit over an output another run committed after this one was planned (planning
    refused an existing output without `overwrite`, so one found now was committed meanwhile, for
    instance by a second job launched into the same output on a runner without the lock).

    Raises:
      OutputError: the output holds another run's manifest and `overwrite` is off.
    """
    if overwrite:
        return
    fs, root = get_fs(output_dir)
    current = _current_manifest(fs, root)
    if current is None:
        return
    holder = (current.get("run") or {}).get("run_id") if isinstance(current, dict) else None
    if holder != run_id:
        raise OutputError(f"output '{output_dir}' was committed by run {holder or '?'} while this run was running;"
                          " nothing was committed (pass --overwrite to replace it)")


def recover_commit(output_dir: str) -> Optional[str]:
    """Completes a commit that a killed or failed run left half done (its journal names every move and
    the manifest); returns that run's id, or None when there was nothing to complete.

    Raises:
      OutputError: the journal names anything outside the output or its staging (`_trusted`); nothing
        is done then.
    """
    fs, root = get_fs(output_dir)
    try:
        journal = _read_journal(fs, root)
    except Exception:  # an unreadable or foreign directory: left to the caller's own checks
        return None
    if not journal:
        return None
    if _provably_ours(output_dir, fs, root, journal) == "committed":
        finish_commit(output_dir)  # killed after its manifest and staging were in place: only the marker is left
    else:
        _complete(fs, root, output_dir, journal)
    return str(journal.get("run_id"))


def _current_manifest(fs: Any, root: str) -> Any:
    try:
        with open_regular(fs, join(root, MANIFEST_NAME), "rb") as f:
            return json.loads(f.read())
    except Exception:
        return None


def _provably_ours(output_dir: str, fs: Any, root: str, journal: dict[str, Any]) -> str:
    """Checks that a commit journal found on disk is a half-done commit of an easydata run into this output
    before anything acts on it; returns "staged" (its staging holds the rest of the commit) or "committed"
    (its manifest is in place and its staging gone: only the marker is left).

    A journal is provably ours when its paths stay inside the output (`_trusted`), its staging directory
    exists and holds the copy of the same journal that `commit_output` writes before the marker, every
    file it removes is one the previous manifest lists (while that manifest is still there), and the
    manifest it writes is an easydata manifest of the same run id. A journal whose staging is gone is
    acted on only when its manifest is already in place and its moves are done.

    Raises:
      OutputError: one line; nothing was changed.
    """
    _trusted(output_dir, journal)
    run_id = journal["run_id"]
    marker = join(output_dir, COMMIT_MARKER)

    def refuse(why: str) -> None:
        raise OutputError(f"refusing to replay the commit journal '{marker}': {why}; it was not written by an"
                          " easydata run for this output (nothing was changed; remove it yourself)")

    manifest = journal.get("manifest")
    if not isinstance(journal.get("moves"), list) or not is_easydata_manifest(manifest) \
            or not isinstance(manifest.get("run"), dict) or manifest["run"].get("run_id") != run_id:
        refuse(f"the manifest it would write is not an easydata manifest of run {run_id!r}")
    staging = join(root, journal["staging"])
    if not fs.exists(staging):
        done = all(fs.exists(join(root, rel)) for _, rel in journal["moves"])
        if done and _current_manifest(fs, root) == manifest:
            return "committed"
        refuse(f"its staging directory {journal['staging']!r} does not exist")
    try:
        with open_regular(fs, Staging(staging).journal_copy, "rb") as f:
            copy = json.loads(f.read())
    except Exception:
        copy = None
    if copy != journal:
        refuse(f"its staging directory {journal['staging']!r} holds no record of this commit")
    previous = _current_manifest(fs, root)
    if is_easydata_manifest(previous) and previous != manifest:  # the old output's manifest is still there
        listed = {posixpath.normpath(rel) for rel in owned_files(previous)}
        stray = next((rel for rel in journal.get("remove") or [] if posixpath.normpath(rel) not in listed), None)
        if stray is not None:
            refuse(f"it would remove {stray!r}, which the output's manifest does not list")
    return "staged"


_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _trusted(output_dir: str, journal: dict[str, Any]) -> None:
    """Refuses a commit journal that would act on anything but this output's own files.

    A journal is a file on disk that anyone may edit or forge: its staging must be the
    `.easydata-tmp-<run id>` child of this output named by its own run id, every staged file must
    resolve (after `..` and symbolic links) inside that staging, and every destination and file to
    remove inside the output.

    Raises:
      OutputError: one line naming the first path refused.
    """
    marker = join(output_dir, COMMIT_MARKER)

    def refuse(why: str) -> None:
        raise OutputError(f"refusing to replay the commit journal '{marker}': {why}; it was not written by an"
                          " easydata run for this output (nothing was changed; remove it yourself)")

    run_id, staging = journal.get("run_id"), journal.get("staging")
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        refuse(f"its run id {run_id!r} is not one easydata makes")
    if staging != TEMP_PREFIX + run_id:
        refuse(f"its staging {staging!r} is not this run's '{TEMP_PREFIX}{run_id}'")
    staging_path = join(output_dir, staging)
    if not resolves_inside(staging_path, output_dir):
        refuse(f"its staging {staging!r} leads outside the output")
    for move in journal.get("moves") or []:
        if not (isinstance(move, (list, tuple)) and len(move) == 2 and all(isinstance(p, str) for p in move)):
            refuse(f"a move {move!r} is not a pair of paths")
        src, rel = move
        if not resolves_inside(src, staging_path):
            refuse(f"a staged file {src!r} lies outside its staging directory")
        try:
            member_path(output_dir, rel, "commit destination")
        except ValidationFailed:
            refuse(f"a destination {rel!r} lies outside the output")
    remove = journal.get("remove", [])
    if not isinstance(remove, list):
        refuse("its list of files to remove is not a list")
    for rel in remove:
        try:
            if rel != MANIFEST_NAME:
                member_path(output_dir, rel, "file to remove")
        except ValidationFailed:
            refuse(f"a file to remove {rel!r} lies outside the output")


def _read_journal(fs: Any, root: str) -> Optional[dict[str, Any]]:
    try:
        with open_regular(fs, join(root, COMMIT_MARKER), "rb") as f:
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
    """The commit's steps, each skipping what an earlier attempt did: drop the old manifest and the
    previous run's other files (the journal's `remove`; nothing else in the directory is touched), move
    what is still staged, remove staging, write the manifest, remove the journal."""
    moves = [(str(src), str(rel)) for src, rel in journal["moves"]]
    staged = {rel: fs.exists(get_fs(src)[1]) for src, rel in moves}
    _check_staged(fs, root, moves)
    manifest = join(root, MANIFEST_NAME)
    if fs.exists(manifest):
        fs.rm(manifest)
    replaced = {posixpath.normpath(rel) for rel in staged}
    emptied: set[str] = set()
    for rel in journal.get("remove", []):
        rel = posixpath.normpath(rel)
        if rel == MANIFEST_NAME or rel in replaced:
            continue  # gone already; or overwritten by this commit's move (and maybe already in place)
        path = join(root, rel)
        if fs.exists(path) and not fs.isdir(path):
            fs.rm(path)
        emptied.add(posixpath.dirname(rel))
    for folder in sorted(emptied, key=len, reverse=True):  # the previous run's folders it left empty
        while folder and folder != ".":
            path = join(root, folder)
            try:
                if not fs.exists(path) or fs.ls(path, detail=False):
                    break
                fs.rmdir(path)
            except OSError:
                break
            folder = posixpath.dirname(folder)
    for path in fs.ls(root, detail=False):  # what a failed attempt's atomic writes of the journal left
        if posixpath.basename(path.rstrip("/")).startswith(f"{COMMIT_MARKER}.tmp-") and not fs.isdir(path):
            fs.rm(path)
    move_into_place(output_dir, [(src, rel) for src, rel in moves if staged[rel]])
    if journal.get("manifest") is not None:  # before the staging goes: its journal copy proves the marker ours
        write_manifest(output_dir, journal["manifest"])
    staging = join(root, str(journal.get("staging") or ""))
    if journal.get("staging") and fs.exists(staging):
        fs.rm(staging, recursive=True)
    if journal.get("manifest") is not None:
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
