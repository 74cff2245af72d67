"""The `easydata` command line: one-line errors, `validate`, `inspect`, and real end-to-end runs.

The slow tests run the installed CLI in a subprocess on real files with a real Beam runner (the
default multi-process local runner) and check the output with plain pyarrow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from easydata.cli import main
from tests.conftest import make_texts, write_jsonl


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def _one_line_error(capsys: pytest.CaptureFixture, code: int) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("easydata: error: ")
    return err


@pytest.fixture
def job(tmp_path: Path, tokenizer_dir: Path) -> Path:
    write_jsonl(tmp_path / "data" / "a.jsonl", ({"text": t} for t in make_texts(50)))
    config = tmp_path / "job.yaml"
    config.write_text(f"""
default_tokenizer: {tokenizer_dir}
datasets:
  - name: web
    data_files: {tmp_path / 'data' / '*.jsonl'}
save:
  output_dir: {tmp_path / 'out'}
  num_shards: 2
""")
    return config


@pytest.mark.parametrize("command", ["run", "tokenize", "validate", "inspect"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert command in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("edit, expected", [
    ({"datasets.0.data_files": "/nonexistent/*.jsonl"}, "matches no file"),
    ({"default_tokenizer": "/nonexistent/tokenizer"}, "tokenizer '/nonexistent/tokenizer': no such file or directory"),
    ({"save.fromat": "parquet"}, "unknown key 'save.fromat' (did you mean 'format'?)"),
    ({"save.num_shards": "many"}, "save.num_shards: expected int"),
    ({"save.format": "csv"}, "save.format: must be one of parquet, arrow, jsonl"),
    ({"pack.seq_length": 10**12}, "pack.seq_length must be in [1, 2,097,152], got 1000000000000"),
    ({"datasets.0.name": ".."}, "`name` '..' must be letters"),
    ({"tokenize.max_document_bytes": "lots"}, "tokenize.max_document_bytes: expected a size"),
])
def test_user_errors_are_one_line(job, capsys, edit, expected):
    args = ["run", str(job), "--quiet"] + [f"--set={k}={v}" for k, v in edit.items()]
    err = _one_line_error(capsys, main(args))
    assert expected in err


@pytest.mark.slow
def test_missing_config_and_existing_output_are_one_line(job, tmp_path, capsys):
    assert "does not exist" in _one_line_error(capsys, main(["run", str(tmp_path / "nope.yaml")]))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    err = _one_line_error(capsys, main(["run", str(job), "--quiet"]))
    assert "already exists" in err
    err = _one_line_error(capsys, main(["run", str(job), "--quiet", "--overwrite"]))
    assert "'notes.txt' was not written by an easydata run" in err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_the_next_commands_printed_survive_the_shell(job, tmp_path, capsys):
    """The "next:" line is there to be copied: an output path with a space or a `$` was printed bare, so the
    copied command named another directory."""
    import shlex

    out = str(tmp_path / "my out $HOME")
    assert main(["run", str(job), "--quiet", "--output", out, "--direct_num_workers=1"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("next: ")]
    commands = [shlex.split(part) for part in line[len("next: "):].split("  |  ")]
    assert commands == [["easydata", "validate", out], ["easydata", "inspect", out]]


def test_run_validate_inspect_and_truncated_shard(job, tmp_path, capsys):
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 0
    out = capsys.readouterr().out
    assert "web: 50 documents (0 rejected)" in out and "tokens/s" in out
    assert main(["validate", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith("OK:")
    assert main(["inspect", str(tmp_path / "out"), "-n", "2"]) == 0
    shown = capsys.readouterr().out
    assert "[web] 2 shards, 50 rows" in shown and "row 1:" in shown

    shard = sorted((tmp_path / "out" / "web").glob("*.parquet"))[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    assert main(["validate", str(tmp_path / "out")]) == 1
    report = capsys.readouterr().out
    assert report.startswith("FAILED:") and "unreadable" in report

    err = _one_line_error(capsys, main(["validate", str(tmp_path)]))
    assert "no manifest.json" in err


@pytest.mark.slow
def test_the_summary_says_how_many_documents_were_truncated(job, capsys):
    """`--max-length 2048` dropped most tokens of a corpus without a word until `stats`."""
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1", "--set", "tokenize.max_length=4",
                 "--set", "tokenize.truncation=truncate"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "truncated:" in line)
    count = int(line.split("truncated:")[1].split()[0].replace(",", ""))
    assert 0 < count <= 50 and "documents cut to tokenize.max_length" in line
    manifest = json.loads((job.parent / "out" / "manifest.json").read_text())
    dropped = sum(entry.get("truncated_tokens", 0) for entry in manifest["datasets"].values())
    assert dropped > 0 and f", {dropped:,} tokens dropped" in line  # and how many tokens that dropped


@pytest.mark.slow
def test_a_truncated_zst_input_is_reported_by_the_run_and_by_validate(tmp_path, tokenizer_dir, capsys):
    """A `.jsonl.zst` cut after 60 % used to give "60 documents (0 rejected)" and a clean validate."""
    import zstandard

    lines = "".join(json.dumps({"text": t}) + "\n" for t in make_texts(4000, seed=3, min_words=20)).encode()
    packed = zstandard.ZstdCompressor().compress(lines)
    (tmp_path / "cut.jsonl.zst").write_bytes(packed[:len(packed) * 6 // 10])
    code = main(["tokenize", "--data-files", str(tmp_path / "cut.jsonl.zst"), "--tokenizer", str(tokenizer_dir),
                 "--output", str(tmp_path / "out"), "--quiet", "--direct_num_workers=1"])
    assert code == 0
    summary = capsys.readouterr().out
    assert f"warning: data: '{tmp_path / 'cut.jsonl.zst'}' was read only in part" in summary
    assert "an unknown part not): unreadable input after" in summary and "EOFError: zstd stream ended" in summary
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (entry,) = manifest["partial_inputs"]["data"]
    assert entry["path"] == str(tmp_path / "cut.jsonl.zst") and entry["unread_bytes"] is None
    data = manifest["datasets"]["data"]
    assert 0 < data["documents_written"] < 4000 and data["documents_rejected"] == 1
    assert main(["validate", str(tmp_path / "out")]) == 0
    report = capsys.readouterr().out
    assert report.startswith("OK:") and "warning: dataset 'data': input" in report and "read only in part" in report


@pytest.mark.slow
def test_default_job_end_to_end(tmp_path):
    """The quickstart: `easydata run` with no config, then `easydata validate` on its output."""
    env = {"EASYDATA_CACHE": str(tmp_path / "cache")}
    run = _cli("run", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert "wrote easydata_output" in run.stdout and "tokens/s" in run.stdout
    manifest = json.loads((tmp_path / "easydata_output" / "manifest.json").read_text())
    assert set(manifest["datasets"]) == {"code", "docs"}
    assert manifest["documents_in"] == manifest["documents_written"] + manifest["documents_rejected"]
    for name, info in manifest["datasets"].items():
        rows = sum(pq.read_metadata(tmp_path / "easydata_output" / s["path"]).num_rows for s in info["shards"])
        assert rows == info["rows"] > 0
    check = _cli("validate", "easydata_output", cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    again = _cli("run", cwd=tmp_path, env=env)  # the default job replaces its own earlier output
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
def test_tokenize_command_with_real_tokenizer(tmp_path, mistral_tokenizer_dir):
    """`easydata tokenize` on gzipped JSONL with the real Mistral tokenizer, checked with plain pyarrow."""
    texts = make_texts(300, seed=11) + ["def f(x):\n    return x ** 2  # café", "   leading spaces", "東京 🙂"]
    import gzip

    data = tmp_path / "corpus.jsonl.gz"
    with gzip.open(data, "wt", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"content": t}, ensure_ascii=False) + "\n")
    run = _cli("tokenize", "--data-files", str(data), "--tokenizer", str(mistral_tokenizer_dir),
               "--output", str(tmp_path / "out"), "--content-field", "content", "--num-shards", "4", "--quiet")
    assert run.returncode == 0, run.stderr
    tok = Tokenizer.from_file(str(mistral_tokenizer_dir / "tokenizer.json"))
    expected = sorted(tuple(tok.encode(t).ids + [2]) for t in texts)  # Mistral: BOS by convention, EOS=2
    table = pq.read_table(sorted((tmp_path / "out" / "data").glob("*.parquet")))
    assert sorted(tuple(r) for r in table.column("input_ids").to_pylist()) == expected
    assert _cli("validate", str(tmp_path / "out")).returncode == 0


@pytest.mark.slow
def test_beam_flag_typo_and_unavailable_flags_are_one_line_errors(job, capsys):
    err = _one_line_error(capsys, main(["run", str(job), "--quiet", "--runer=DataflowRunner"]))
    assert "unknown option --runer (did you mean --runner?)" in err
    err = _one_line_error(capsys, main(["run", str(job), "--streaming"]))
    assert "--streaming reads Pub/Sub: dataset(s) web have no `pubsub_subscription`" in err


@pytest.mark.slow
def test_a_flag_beam_does_not_know_is_said_once(job, capsys):
    """It was said twice: once before the output's lock, again while the job was built."""
    assert main(["run", str(job), "--quiet", "--overwrite", "--no_such_beam_flag=1"]) == 0
    assert capsys.readouterr().err.count("--no_such_beam_flag is not an option Beam knows here; passing it on") == 1


@pytest.mark.slow
def test_too_many_rejects_fail_the_run_in_one_line(job, tmp_path, capsys):
    """The check runs inside the pipeline's commit step: Beam's wrapped error still ends in one line."""
    (tmp_path / "data" / "bad.jsonl").write_text('{"text": ""}\n{"oops": 1}\n')
    err = _one_line_error(capsys, main(["run", str(job), "--quiet", "--set", "max_rejected_fraction=0.01"]))
    assert "2 of 52 documents rejected" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_the_summary_counts_one_packed_row_in_the_singular(job, capsys):
    """A run whose tokens fit one packed row said "packed: 1 rows of 100000"."""
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1", "--set", "pack.enabled=true",
                 "--set", "pack.seq_length=100000", "--set", "save.num_shards=1"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "packed:" in line)
    assert line.strip().startswith("packed: 1 row of 100000,"), line


@pytest.mark.slow
def test_tokenize_and_pack_with_real_tokenizer(tmp_path, mistral_tokenizer_dir):
    """`easydata tokenize --pack`: the multiset of real tokens equals the reference tokenization + EOS."""
    import collections

    import numpy as np

    texts = make_texts(400, seed=12, max_words=400)
    write_jsonl(tmp_path / "corpus.jsonl", ({"text": t} for t in texts))
    run = _cli("tokenize", "--data-files", str(tmp_path / "corpus.jsonl"), "--tokenizer", str(mistral_tokenizer_dir),
               "--output", str(tmp_path / "out"), "--pack", "--seq-length", "256", "--quiet")
    assert run.returncode == 0, run.stderr
    tok = Tokenizer.from_file(str(mistral_tokenizer_dir / "tokenizer.json"))
    expected = collections.Counter(t for text in texts for t in tok.encode(text).ids + [2])
    table = pq.read_table(sorted((tmp_path / "out" / "data").glob("*.parquet")))
    ids = np.array(table.column("input_ids").to_pylist())
    seg = np.array(table.column("segment_ids").to_pylist())
    assert ids.shape[1] == 256
    assert collections.Counter(ids[seg > 0].tolist()) == expected
    check = _cli("validate", str(tmp_path / "out"))
    assert check.returncode == 0, check.stdout


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly(job, tmp_path):
    """`easydata inspect OUT | head` ended in a BrokenPipeError traceback when `head` had gone first."""
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "easydata", "inspect", str(tmp_path / "out"), "-n", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader goes away (as `head` does) before the command writes its output
    err = proc.stderr.read()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err and err == ""


@pytest.mark.slow
def test_streaming_without_credentials_or_emulator_is_one_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: 185 lines ending in google.auth's DefaultCredentialsError."""
    config = tmp_path / "live.yaml"
    config.write_text(f"default_tokenizer: {tokenizer_dir}\ndatasets:\n  - name: live\n"
                      f"    pubsub_subscription: projects/my-project/subscriptions/docs\n"
                      f"save:\n  output_dir: {tmp_path / 'out'}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PUBSUB_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GCE_METADATA_HOST="127.0.0.1:9")
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--streaming"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "easydata: error: --streaming reads Pub/Sub but no Google Cloud credentials were found: run `gcloud auth"
        " application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a key file), or set"
        " PUBSUB_EMULATOR_HOST=HOST:PORT to use the Pub/Sub emulator"], done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_fewer_rows_than_the_shards_asked_for_is_said_in_the_summary(tmp_path: Path, tokenizer_dir: Path, capsys) -> None:
    """Before: `num_shards: 100` on 39 rows silently wrote 39 shards."""
    write_jsonl(tmp_path / "web" / "a.jsonl", ({"text": t} for t in make_texts(39)))
    assert main(["tokenize", "--data-files", str(tmp_path / "web" / "a.jsonl"), "--tokenizer", str(tokenizer_dir),
                 "--output", str(tmp_path / "out"), "--num-shards", "100", "--quiet", "--direct_num_workers=1"]) == 0
    out = capsys.readouterr().out
    assert "data: 39 documents (0 rejected)" in out and ", 39 shards" in out
    assert "    note: 39 shards, not the 100 asked for (save.num_shards): a shard holds at least one row and there are" \
           " 39 rows" in out
    assert len(json.loads((tmp_path / "out" / "manifest.json").read_text())["datasets"]["data"]["shards"]) == 39


@pytest.mark.slow
def test_a_refused_commit_is_two_lines_with_the_resume_command(job, tmp_path, capsys, monkeypatch):
    """A commit guard (counters that do not add up: a bug) ended in a ~300-line traceback with no way on."""
    import easydata.run.finalize as finalize
    from easydata.errors import RunInconsistent

    def refuse(*args, **kwargs):
        raise RunInconsistent("dataset 'web': documents_in=50 but written=49 + rejected=0; refusing to commit")

    monkeypatch.setattr(finalize, "_dataset_entry", refuse)
    assert main(["run", str(job), "--direct_num_workers=1"]) == 2  # in-process: the commit step sees the patch
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in "\n".join(lines), lines
    assert lines[0].startswith("easydata: error: dataset 'web': documents_in=50 but written=49 + rejected=0; refusing"
                               " to commit; nothing was committed (a bug in easydata: please report it); the run"
                               " stopped; its finished work is kept in ")
    assert lines[1] == f"easydata: continue with: easydata run {job} --direct_num_workers=1 --resume"
    assert not (tmp_path / "out" / "manifest.json").exists()
    monkeypatch.undo()
    assert main(["run", str(job), "--direct_num_workers=1", "--resume"]) == 0
    assert "input units already tokenized" in capsys.readouterr().err  # the refused run's work, reused


@pytest.mark.parametrize("cache", ["/dev/null/cache", "FILE"])
def test_a_cache_directory_that_cannot_be_made_is_one_line(tmp_path, capsys, monkeypatch, cache):
    """`EASYDATA_CACHE` under a file (or a file itself) ended the default job in a NotADirectoryError or
    FileExistsError traceback; it says what to set now, and no '--resume' (no run had begun)."""
    if cache == "FILE":
        cache = str(tmp_path / "a-file")
        Path(cache).write_text("not a directory")
    monkeypatch.setenv("EASYDATA_CACHE", cache)
    monkeypatch.chdir(tmp_path)
    assert main(["run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    reason = "Not a directory" if cache.startswith("/dev/null") else "File exists"
    assert err == [f"easydata: error: the cache directory '{cache}' cannot be made ({reason}): set EASYDATA_CACHE to"
                   " a directory this user can write"]


def test_tokenize_help_names_every_output_format(capsys):
    """`easydata tokenize --help` listed five of the eight formats, and the wrong defaults of compression."""
    from easydata.config import DEFAULT_COMPRESSION, OUTPUT_FORMATS

    with pytest.raises(SystemExit):
        main(["tokenize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = text.rsplit("--format FORMAT", 1)[1].split("--compression", 1)[0]
    assert all(fmt in listed for fmt in OUTPUT_FORMATS), listed
    assert all(f"{fmt} {codec}" in text for fmt, codec in DEFAULT_COMPRESSION.items())


@pytest.mark.parametrize("spelling", [["--config", "{job}"], ["--config={job}"]], ids=["--config FILE", "--config=FILE"])
def test_the_config_may_be_given_as_an_option(job, capsys, spelling):
    """`--config=job.yaml` went to Beam as a pipeline option and the embedded default job ran into
    ./easydata_output (`--config job.yaml` worked, with a warning that --config was passed to Beam)."""
    args = ["run", *(part.format(job=job) for part in spelling), "--dry-run"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "dataset 'web'" in captured.out and "warning" not in captured.err, captured
    err = _one_line_error(capsys, main(["run", str(job), "--config", str(job), "--dry-run"]))
    assert "two configs given" in err


def test_a_relative_input_from_a_deleted_directory_is_one_line(job, tmp_path):
    """A shell left in a directory that was deleted (a scheduler's scratch cleaned up): the relative path's error
    blamed the network ("no network, or a wrong host?")."""
    config = job.read_text().replace(str(tmp_path / "data" / "*.jsonl"), "data/*.jsonl")
    (tmp_path / "relative.yaml").write_text(config)
    gone = tmp_path / "gone"
    gone.mkdir()
    shell = f"cd {gone} && rmdir {gone} && exec {sys.executable} -m easydata run {tmp_path / 'relative.yaml'} --dry-run"
    done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 2 and done.stderr.strip() == (
        "easydata: error: cannot access 'data/*.jsonl': the current directory is gone (deleted, or unmounted) and"
        " the path is relative to it: cd to an existing directory, or give an absolute path"), done.stderr
