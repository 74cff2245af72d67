"""Nothing outside what this tool wrote is ever moved, overwritten, deleted or read as output.

The commit journal, the manifest and the shards on disk are untrusted: a forged journal pointing
elsewhere is refused before any move, `--overwrite` removes only a previous run's own files, and a
shard replaced by a symbolic link out of the output is refused by `validate` and the reader. Real CLI
runs in subprocesses on real files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easydata.errors import OutputError, ValidationFailed
from easydata.run.manifest import COMMIT_MARKER
from easydata.run.output import recover_commit
from tests.conftest import make_texts, write_jsonl


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", *args], capture_output=True, text=True, timeout=600)


def _tokenize(tmp_path: Path, tokenizer_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    data = tmp_path / "data" / "a.jsonl"
    if not data.exists():
        write_jsonl(data, ({"text": t} for t in make_texts(40)))
    return _cli("tokenize", "--data-files", str(data), "--tokenizer", str(tokenizer_dir), "--output", str(out),
                "--num-shards", "2", "--quiet", "--direct_num_workers=1", *extra)


def _one_line(done: subprocess.CompletedProcess) -> str:
    err = done.stderr.strip()
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _victim(tmp_path: Path) -> dict[str, bytes]:
    victim = tmp_path / "victim"
    (victim / "dir").mkdir(parents=True)
    (victim / "dir" / "thesis.tex").write_bytes(b"years of work")
    (victim / "notes.txt").write_bytes(b"mine")
    return _files(victim)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _forged_journals(tmp_path: Path, out: Path) -> dict[str, dict]:
    outside = str(tmp_path / "victim" / "notes.txt")
    return {
        "staging-outside": {"run_id": "abc", "staging": "../victim/dir", "moves": [], "manifest": {}},
        "absolute-source": {"run_id": "abc", "staging": ".easydata-tmp-abc",
                            "moves": [[outside, "web/part-00000-of-00001.parquet"]], "manifest": {}},
        "dotdot-source": {"run_id": "abc", "staging": ".easydata-tmp-abc",
                          "moves": [[str(out / ".easydata-tmp-abc" / ".." / ".." / "victim" / "notes.txt"), "x"]],
                          "manifest": {}},
        "destination-outside": {"run_id": "abc", "staging": ".easydata-tmp-abc",
                                "moves": [[str(out / ".easydata-tmp-abc" / "a"), "../victim/notes.txt"]],
                                "manifest": {}},
        "remove-outside": {"run_id": "abc", "staging": ".easydata-tmp-abc", "moves": [],
                           "remove": ["../victim/notes.txt"], "manifest": {}},
        "run-id-mismatch": {"run_id": "abc", "staging": ".easydata-tmp-other", "moves": [], "manifest": {}},
        "run-id-path": {"run_id": "../victim", "staging": ".easydata-tmp-../victim", "moves": [], "manifest": {}},
        "staging-symlink": {"run_id": "lnk", "staging": ".easydata-tmp-lnk", "moves": [], "manifest": {}},
    }


@pytest.mark.parametrize("kind", ["staging-outside", "absolute-source", "dotdot-source", "destination-outside",
                                  "remove-outside", "run-id-mismatch", "run-id-path", "staging-symlink"])
def test_a_forged_commit_journal_is_refused_and_never_acted_on(tmp_path: Path, kind: str) -> None:
    before = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".easydata-tmp-abc").mkdir()
    (out / ".easydata-tmp-abc" / "a").write_bytes(b"staged")
    (out / ".easydata-tmp-lnk").symlink_to(tmp_path / "victim" / "dir")
    (out / COMMIT_MARKER).write_text(json.dumps(_forged_journals(tmp_path, out)[kind]))
    with pytest.raises(OutputError, match="refusing to replay the commit journal"):
        recover_commit(str(out))
    assert _files(tmp_path / "victim") == before
    assert (out / COMMIT_MARKER).exists() and (out / ".easydata-tmp-abc" / "a").read_bytes() == b"staged"


@pytest.mark.slow
def test_the_cli_refuses_a_forged_journal_in_one_line_and_touches_nothing(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: `recover_commit` replayed it before every run, moving and deleting the victim's files,
    even when the run then stopped with 'output already exists'."""
    before = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / COMMIT_MARKER).write_text(json.dumps(_forged_journals(tmp_path, out)["staging-outside"]))
    for extra in ((), ("--overwrite",)):
        err = _one_line(_tokenize(tmp_path, tokenizer_dir, out, *extra))
        assert "refusing to replay the commit journal" in err and "'../victim/dir'" in err
        assert _files(tmp_path / "victim") == before


@pytest.mark.slow
def test_overwrite_refuses_a_directory_with_a_users_files(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: a directory holding any `manifest.json` (or an empty staging folder) was wiped whole."""
    for n, seed in enumerate([{"manifest.json": b"{}"}, {".easydata-tmp-0123456789ab/.keep": b""}]):
        out = tmp_path / f"out{n}"
        for rel, data in {**seed, "photos/cat.jpg": b"meow"}.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        before = _files(out)
        err = _one_line(_tokenize(tmp_path, tokenizer_dir, out, "--overwrite"))
        assert "was not written by an easydata run" in err
        assert _files(out) == before


@pytest.mark.slow
def test_overwrite_replaces_a_previous_run_and_refuses_once_a_user_file_is_added(tmp_path: Path,
                                                                                 tokenizer_dir: Path) -> None:
    out = tmp_path / "out"
    assert _tokenize(tmp_path, tokenizer_dir, out).returncode == 0
    first = _files(out)
    done = _tokenize(tmp_path, tokenizer_dir, out, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert set(_files(out)) == set(first)  # the same files, replaced
    (out / "data" / "mine.txt").write_bytes(b"mine")  # beside the previous run's shards
    err = _one_line(_tokenize(tmp_path, tokenizer_dir, out, "--overwrite"))
    assert "'data/mine.txt' was not written by an easydata run" in err
    assert (out / "data" / "mine.txt").read_bytes() == b"mine" and set(_files(out)) == {*first, "data/mine.txt"}


@pytest.mark.slow
def test_a_shard_replaced_by_a_symlink_out_of_the_output_is_refused(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: `validate` passed and `TokenReader` read the file outside the output."""
    from easydata.reader import TokenReader

    out = tmp_path / "out"
    assert _tokenize(tmp_path, tokenizer_dir, out).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    shard = out / manifest["datasets"]["data"]["shards"][0]["path"]
    elsewhere = tmp_path / "elsewhere.parquet"
    os.replace(shard, elsewhere)
    shard.symlink_to(elsewhere)  # the same bytes, but not inside the output
    done = _cli("validate", str(out))
    assert done.returncode != 0 and "leads outside the output" in done.stdout + done.stderr
    with pytest.raises(ValidationFailed, match="leads outside the output"):
        next(iter(TokenReader(str(out), batch_size=1, drop_remainder=False, seq_length=64)))
    # A link that stays inside the output is fine.
    os.replace(elsewhere, out / "data" / "moved.parquet")
    shard.unlink()
    shard.symlink_to(out / "data" / "moved.parquet")
    assert sum(len(b["input_ids"]) for b in TokenReader(str(out), batch_size=1, drop_remainder=False, seq_length=64,
                                                         num_epochs=1)) == manifest["totals"]["rows"]
