"""Tests for `easydata.run.output`: an existing output is refused or replaced only when that is safe, and a
commit swaps the staged files in (old manifest first out, other runs' staging left alone), on a local
disk and on an fsspec `memory://` filesystem."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from easydata.errors import OutputError
from easydata.io.filesystems import get_fs, join
from easydata.run.manifest import COMMIT_MARKER
from easydata.run.output import TEMP_PREFIX, commit_output, finish_commit, new_run_id, prepare_output, staging_dir

#: What a previous run's manifest says it wrote (only these files may be removed by an overwrite).
OLD_MANIFEST = {
    "format_version": 1, "config_fingerprint": "f" * 16, "run": {"run_id": "0123456789ab"},
    "datasets": {"web": {"shards": [{"path": "web/part-00000-of-00002.parquet"},
                                    {"path": "web/part-00001-of-00002.parquet"}]},
                 "code": {"shards": [{"path": "code/part-00000-of-00001.parquet"}]}},
    "rejected_files": ["rejected/web-00000.jsonl"],
}
OLD_OUTPUT = {
    "manifest.json": json.dumps(OLD_MANIFEST).encode(),
    "web/part-00000-of-00002.parquet": b"old web 0",
    "web/part-00001-of-00002.parquet": b"old web 1",
    "code/part-00000-of-00001.parquet": b"old code",  # a dataset the new run no longer has
    "rejected/web-00000.jsonl": b'{"reason": "old"}\n',
    ".easydata-tmp-otherrun/web/piece-0.arrow": b"another run's staging",
}


@pytest.fixture(params=["local", "memory"])
def output_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An output location that does not exist yet, on a local disk or in `memory://`."""
    if request.param == "local":
        return str(tmp_path / "runs" / "out")
    request.getfixturevalue("memory_fs")
    return "memory://runs/out"


def put(url: str, files: dict[str, bytes]) -> None:
    fs, root = get_fs(url)
    for rel, data in files.items():
        path = join(root, rel)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, data)


def tree(url: str) -> dict[str, bytes]:
    """Every file under `url`, by relative path, with its bytes."""
    fs, root = get_fs(url)
    root = root.rstrip("/")
    return {p[len(root) + 1:]: fs.cat_file(p) for p in fs.find(root)}


def committed_tree(url: str, run_id: str) -> dict[str, bytes]:
    """`tree(url)` after a commit by `run_id` whose manifest is not written yet: checks that the commit
    marker names the run, and leaves it out."""
    files = tree(url)
    assert json.loads(files.pop(COMMIT_MARKER))["run_id"] == run_id
    return files


def exists(url: str, rel: str = "") -> bool:
    fs, root = get_fs(url)
    return fs.exists(join(root, rel) if rel else root)


# ---- prepare_output ------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_prepare_creates_a_missing_directory_with_its_parents(output_url: str, overwrite: bool) -> None:
    assert not exists(output_url)
    prepare_output(output_url, overwrite=overwrite)
    fs, root = get_fs(output_url)
    assert fs.isdir(root)
    assert fs.ls(root, detail=False) == []


def test_prepare_accepts_an_existing_empty_directory(output_url: str) -> None:
    fs, root = get_fs(output_url)
    fs.makedirs(root, exist_ok=True)
    prepare_output(output_url, overwrite=False)
    assert fs.isdir(root)


def test_prepare_refuses_a_non_empty_directory_without_overwrite(output_url: str) -> None:
    put(output_url, OLD_OUTPUT)
    with pytest.raises(OutputError) as info:
        prepare_output(output_url, overwrite=False)
    assert str(info.value) == (f"output '{output_url}' already exists; pass --overwrite (save.overwrite: true) to"
                               " replace it, or choose another --output")
    assert tree(output_url) == OLD_OUTPUT


@pytest.mark.parametrize("files, foreign", [
    ({"data.csv": b"a,b\n1,2\n"}, "data.csv"),
    ({"notes/readme.txt": b"mine", "manifest.json.bak": b"{}"}, "manifest.json.bak"),
    ({".easydata-tmp": b"not a staging dir name"}, ".easydata-tmp"),  # the bare prefix is not a run's staging
    ({"manifest.json": b"{}", "photos/cat.jpg": b"meow"}, "manifest.json"),  # any JSON is not our manifest
    ({"manifest.json": b'{"format_version": 1}'}, "manifest.json"),  # no run id: not a run's
    ({".easydata-tmp-0123456789ab/x": b"", "photos/cat.jpg": b"meow"}, "photos"),  # staging does not make it ours
    ({**OLD_OUTPUT, "photos/cat.jpg": b"meow"}, "photos"),  # a previous output, and a user's file in it
    ({**OLD_OUTPUT, "web/notes.txt": b"mine"}, "web/notes.txt"),  # beside the previous run's shards
], ids=["file", "nested", "bare-prefix", "any-json-manifest", "manifest-without-run", "empty-staging",
        "output-plus-photos", "beside-shards"])
def test_overwrite_refuses_a_directory_holding_anything_not_ours_and_leaves_it_untouched(
        output_url: str, files: dict[str, bytes], foreign: str) -> None:
    put(output_url, files)
    with pytest.raises(OutputError) as info:
        prepare_output(output_url, overwrite=True)
    assert str(info.value) == (f"refusing to overwrite '{output_url}': '{foreign}' was not written by an easydata"
                               " run (overwrite replaces only a previous run's own files); move it away or choose"
                               " another --output")
    assert tree(output_url) == files


@pytest.mark.parametrize("files", [
    OLD_OUTPUT,
    {"manifest.json": json.dumps({**OLD_MANIFEST, "datasets": {}, "rejected_files": []}).encode()},
    {".easydata-tmp-0123456789ab/web/piece-0.arrow": b"a crashed run's staging"},
], ids=["finished-output", "manifest-only", "crashed-run"])
def test_overwrite_allows_an_earlier_easydata_output_and_deletes_nothing_yet(output_url: str,
                                                                            files: dict[str, bytes]) -> None:
    put(output_url, files)
    prepare_output(output_url, overwrite=True)
    assert tree(output_url) == files  # nothing is removed before the new output is ready to commit


def test_a_commit_removes_only_the_previous_runs_files(output_url: str) -> None:
    """A file a user puts into the output during the run (after the overwrite check) survives the commit."""
    put(output_url, OLD_OUTPUT)
    prepare_output(output_url, overwrite=True)
    put(output_url, {"web/late-notes.txt": b"mine", "photos/cat.jpg": b"meow"})
    staging, moves = stage(output_url, "run1", NEW_FILES)
    commit_output(output_url, staging, moves)
    files = committed_tree(output_url, "run1")
    assert files["web/late-notes.txt"] == b"mine" and files["photos/cat.jpg"] == b"meow"
    assert "code/part-00000-of-00001.parquet" not in files and not exists(output_url, "code")


@pytest.mark.parametrize("overwrite", [False, True])
def test_prepare_refuses_a_path_that_is_a_file(output_url: str, overwrite: bool) -> None:
    fs, root = get_fs(output_url)
    fs.makedirs(root.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(root, b"I am a file")
    with pytest.raises(OutputError) as info:
        prepare_output(output_url, overwrite=overwrite)
    assert str(info.value) == f"output '{output_url}' exists and is a file"
    assert fs.cat_file(root) == b"I am a file"


# ---- staging names -------------------------------------------------------------------------------


def test_staging_dir_and_run_ids() -> None:
    assert TEMP_PREFIX == ".easydata-tmp-"
    assert staging_dir("memory://out/", "abc") == "memory://out/.easydata-tmp-abc"
    assert staging_dir("/data/out", "0123456789ab") == "/data/out/.easydata-tmp-0123456789ab"
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in ids)


# ---- commit_output -------------------------------------------------------------------------------


def stage(output_url: str, run_id: str, staged: dict[str, tuple[str, bytes]]) -> tuple[str, list[tuple[str, str]]]:
    """Writes `{staged_name: (final_rel, bytes)}` into the run's staging dir; returns (staging, moves)."""
    staging = staging_dir(output_url, run_id)
    put(staging, {name: data for name, (_, data) in staged.items()})
    return staging, [(join(staging, name), rel) for name, (rel, _) in staged.items()]


NEW_FILES = {
    "shards/web-0.parquet": ("web/part-00000-of-00001.parquet", b"new web 0"),
    "shards/mixed-0.parquet": ("mixed/part-00000-of-00002.parquet", b"new mixed 0"),
    "shards/mixed-1.parquet": ("mixed/part-00001-of-00002.parquet", b"new mixed 1"),
    "rejected/web-00000.jsonl": ("rejected/web-00000.jsonl", b'{"reason": "new"}\n'),
}


def test_commit_replaces_the_previous_output(output_url: str) -> None:
    put(output_url, OLD_OUTPUT)
    prepare_output(output_url, overwrite=True)
    staging, moves = stage(output_url, "run1", NEW_FILES)
    commit_output(output_url, staging, moves)
    assert committed_tree(output_url, "run1") == {
        "web/part-00000-of-00001.parquet": b"new web 0",
        "mixed/part-00000-of-00002.parquet": b"new mixed 0",
        "mixed/part-00001-of-00002.parquet": b"new mixed 1",
        "rejected/web-00000.jsonl": b'{"reason": "new"}\n',
        ".easydata-tmp-otherrun/web/piece-0.arrow": b"another run's staging",
    }
    # The caller writes the manifest afterwards; the old dataset folder and this run's staging are gone.
    assert not exists(output_url, "manifest.json")
    assert not exists(output_url, "code")
    assert not exists(output_url, f"{TEMP_PREFIX}run1")
    finish_commit(output_url)  # after the manifest: the marker goes
    assert not exists(output_url, COMMIT_MARKER)


def test_commit_into_a_fresh_output(output_url: str) -> None:
    prepare_output(output_url, overwrite=False)
    staging, moves = stage(output_url, "first", {"a.parquet": ("web/part-00000-of-00001.parquet", b"rows")})
    commit_output(output_url, staging, moves)
    assert committed_tree(output_url, "first") == {"web/part-00000-of-00001.parquet": b"rows"}
    fs, root = get_fs(output_url)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)) == [COMMIT_MARKER, "web"]


def test_a_commit_with_a_missing_staged_file_changes_nothing(output_url: str) -> None:
    """A commit that cannot complete must not start: the old output stays whole and readable."""
    put(output_url, OLD_OUTPUT)
    before = tree(output_url)
    staging, moves = stage(output_url, "run2", {"web-0.parquet": ("web/part-00000-of-00001.parquet", b"new")})
    moves.append((join(staging, "never-written.parquet"), "web/part-00001-of-00002.parquet"))
    with pytest.raises(OutputError, match="staged file '.*never-written.parquet' is missing"):
        commit_output(output_url, staging, moves)
    assert {k: v for k, v in tree(output_url).items() if not k.startswith(f"{TEMP_PREFIX}run2/")} == before
    # A later run may still replace it.
    prepare_output(output_url, overwrite=True)
    staging, moves = stage(output_url, "run3", {"w.parquet": ("web/part-00000-of-00001.parquet", b"again")})
    commit_output(output_url, staging, moves)
    assert committed_tree(output_url, "run3") == {"web/part-00000-of-00001.parquet": b"again",
                                ".easydata-tmp-otherrun/web/piece-0.arrow": b"another run's staging",
                                ".easydata-tmp-run2/web-0.parquet": b"new"}


def test_an_unfinished_run_is_not_an_output(output_url: str) -> None:
    files = {".easydata-tmp-0123456789ab/web/piece-0.arrow": b"a crashed run's staging"}
    put(output_url, files)
    prepare_output(output_url, overwrite=False)  # may be resumed, or started afresh beside it
    assert tree(output_url) == files


# ---- the commit under faults: every step safe to run again -------------------------------------------


class FaultyFileSystem:
    """A real fsspec filesystem that fails once `budget["left"]` changing operations (writes, moves,
    removals, directory creations) are spent: the way a worker dies or a store call fails part way.
    Every handle of one attempt shares the budget."""

    CHANGING = ("open", "mv", "rm", "rm_file", "makedirs", "mkdir", "pipe_file")

    def __init__(self, fs, budget: dict):
        self._fs, self._budget = fs, budget

    def __getattr__(self, name: str):
        attr = getattr(self._fs, name)
        if name not in self.CHANGING:
            return attr

        def changing(*args, **kwargs):
            mode = args[1] if len(args) > 1 else kwargs.get("mode", "rb")
            if name == "open" and not any(c in mode for c in "wax+"):
                return attr(*args, **kwargs)
            if self._budget["left"] <= 0:
                raise OSError(f"injected fault in {name}")
            self._budget["left"] -= 1
            return attr(*args, **kwargs)
        return changing


def _faulty(monkeypatch, budget: int) -> None:
    """Routes the commit's filesystem access (`easydata.run.output`, `easydata.run.manifest`) through
    `FaultyFileSystem`s that fail after `budget` changing operations."""
    import easydata.run.manifest
    import easydata.run.output

    shared = {"left": budget}

    def faulty_get_fs(url: str):
        fs, path = get_fs(url)
        return FaultyFileSystem(fs, shared), path

    monkeypatch.setattr(easydata.run.output, "get_fs", faulty_get_fs)
    monkeypatch.setattr(easydata.run.manifest, "get_fs", faulty_get_fs)


def _commit_failing_after(output_url: str, run_id: str, budget: int, monkeypatch) -> tuple:
    """Over a fresh copy of the old output, a commit of `NEW_FILES` by `run_id` whose filesystem fails
    after `budget` changing operations: `(staging, moves)`, or `(None, None)` when it did not fail."""
    fs, root = get_fs(output_url)
    if fs.exists(root):
        fs.rm(root, recursive=True)
    put(output_url, OLD_OUTPUT)
    staging, moves = stage(output_url, run_id, NEW_FILES)
    with monkeypatch.context() as patch:
        _faulty(patch, budget)
        try:
            commit_output(output_url, staging, moves, new_manifest(run_id))
        except OSError as e:
            assert "injected fault" in str(e)
            return staging, moves
    return None, None


def new_manifest(run_id: str) -> dict:
    """The manifest a commit by `run_id` writes (an easydata manifest of that run: a journal whose manifest is
    anything else is refused, `easydata.run.output._provably_ours`)."""
    return {"format_version": 1, "config_fingerprint": "e" * 16, "run": {"run_id": run_id},
            "datasets": {"web": {"shards": [{"path": "web/part-00000-of-00001.parquet"}]}}}


def test_a_commit_failing_after_any_operation_completes_when_run_again(output_url: str, monkeypatch) -> None:
    """Dataflow retries a failed bundle and Dask reruns a lost task: the commit that failed after its
    k-th filesystem operation is run again (for every k) and must give the complete output, byte for
    byte the output of a commit that never failed. The old commit deleted its own moved shards on the
    second attempt and then failed with FileNotFoundError: the output was gone."""
    put(output_url, OLD_OUTPUT)
    staging, moves = stage(output_url, "clean", NEW_FILES)
    commit_output(output_url, staging, moves, new_manifest("clean"))
    expected = tree(output_url)
    assert expected["manifest.json"] == (json.dumps(new_manifest("clean"), indent=2) + "\n").encode()
    assert COMMIT_MARKER not in expected and not any(k.startswith(f"{TEMP_PREFIX}clean") for k in expected)

    points = 0
    for budget in range(200):
        staging, moves = _commit_failing_after(output_url, "clean", budget, monkeypatch)
        if staging is None:
            break
        points += 1
        commit_output(output_url, staging, moves, new_manifest("clean"))  # the retry, as the engine runs it
        assert tree(output_url) == expected, f"after a fault at operation {budget}"
    assert points >= 10  # every operation of the commit was a fault point once


def test_a_commit_killed_part_way_is_finished_by_the_next_run(output_url: str, monkeypatch) -> None:
    """The process died inside the commit: a later run (`--resume`, or any run into that output) finds
    the journal and finishes the same commit before doing anything else."""
    from easydata.run.output import recover_commit

    put(output_url, OLD_OUTPUT)
    staging, moves = stage(output_url, "killed", NEW_FILES)
    commit_output(output_url, staging, moves, new_manifest("killed"))
    expected = tree(output_url)
    recovered = 0
    for budget in range(200):
        if _commit_failing_after(output_url, "killed", budget, monkeypatch)[0] is None:
            break
        if exists(output_url, COMMIT_MARKER):  # the journal was written: the commit had begun
            assert recover_commit(output_url) == "killed"
            assert tree(output_url) == expected, f"after a kill at operation {budget}"
            recovered += 1
        else:  # killed before its journal: the old output is untouched
            assert recover_commit(output_url) is None
            assert {k: v for k, v in tree(output_url).items() if not k.startswith(TEMP_PREFIX)
                    and ".tmp-" not in k} == {k: v for k, v in OLD_OUTPUT.items() if not k.startswith(TEMP_PREFIX)}
        assert recover_commit(output_url) is None  # nothing left to do
    assert recovered >= 10
