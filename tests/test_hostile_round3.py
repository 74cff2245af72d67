"""Hostile round 3 (issue 42): what a hostile or careless user tried on the third round, each case on real
files through the real CLI (or the real API), each failing before its fix.

Data destroyed or silently wrong: a forged journal whose paths stay inside the output, a resume across
tokenizers, a leaked hub token, `data_files: ""`, an out-of-vocabulary pad id, an ignored
`push_to_hub`, an engine that ignores an added token's `single_word`, the API's cache across
tokenizers, a mix's `documents_in`, `train-tokenizer` over a user's `tokenizer_config.json`. Resource
bombs: template doubling through `~`, integer work, a slow template, `--vocab-size 10**9`, `/dev/zero` as a
config, FIFOs in an output. Inputs: a 150 KB CSV field, a size estimate over 2**31. One line for every
mistake: long names, `~` outputs, `ftp://`, malformed manifests and locks, all-zero splits, an
unfinished reader at exit, a callback's `SystemExit`, `DataflowRunner` without its options.
"""

from __future__ import annotations

import collections
import csv
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from easydata.run.manifest import COMMIT_MARKER
from easydata.text.tokenizer_training import train_bpe_tokenizer
from tests.conftest import REPO_ROOT, make_texts, write_jsonl

ONE = "--direct_num_workers=1"


def _cli(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kwargs.pop("cwd", REPO_ROOT), **kwargs)


def _one_line(done: subprocess.CompletedProcess, *expected: str) -> str:
    err = done.stderr.strip()
    assert done.returncode != 0, (done.stdout, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    return err


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("part-*"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "web.jsonl"
    write_jsonl(path, ({"text": t} for t in make_texts(60, seed=11)))
    return path


def _tokenize(corpus: Path, tokenizer: Path, out: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    return _cli("tokenize", "--data-files", str(corpus), "--tokenizer", str(tokenizer), "--output", str(out),
                "--num-shards", "2", "--quiet", ONE, *extra, **kwargs)


def _job(tmp_path: Path, body: dict, name: str = "job.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory, corpus, tokenizer_dir) -> Path:
    """A committed packed output (read-only for the tests: they copy it)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    done = _tokenize(corpus, tokenizer_dir, out, "--pack", "--seq-length", "64")
    assert done.returncode == 0, done.stderr
    return out


def _copy(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


# ---- 1. a forged journal whose paths all stay inside the output --------------------------------------


@pytest.mark.slow
def test_a_forged_journal_inside_the_output_is_refused_and_touches_nothing(finished, tmp_path, corpus, tokenizer_dir):
    out = _copy(finished, tmp_path)
    (out / "photos").mkdir()
    (out / "photos" / "a.jpg").write_bytes(b"holiday")
    (out / COMMIT_MARKER).write_text(json.dumps({"run_id": "abc", "staging": ".easydata-tmp-abc", "moves": [],
                                                 "remove": ["photos/a.jpg"], "manifest": {"hello": 1}}))
    before = _files(out)
    for extra in ((), ("--overwrite",)):
        _one_line(_tokenize(corpus, tokenizer_dir, out, *extra), "refusing to replay the commit journal")
        assert _files(out) == before


def test_a_journal_is_acted_on_only_when_its_staging_proves_it(finished, tmp_path):
    """A staging directory that exists but holds no copy of the journal, a copy that differs, or a removal
    the old manifest does not list: refused; the run's own journal (its copy in staging) is replayed."""
    from easydata.errors import OutputError
    from easydata.run.output import JOURNAL_COPY, commit_output, recover_commit

    out = _copy(finished, tmp_path)
    (out / "photos").mkdir()
    (out / "photos" / "a.jpg").write_bytes(b"holiday")
    manifest = json.loads((out / "manifest.json").read_text())
    forged_manifest = {**manifest, "run": {"run_id": "abc"}}
    staging = out / ".easydata-tmp-abc"
    staging.mkdir()
    journal = {"run_id": "abc", "staging": ".easydata-tmp-abc", "moves": [], "remove": ["photos/a.jpg"],
               "manifest": forged_manifest}
    (out / COMMIT_MARKER).write_text(json.dumps(journal))
    before = _files(out)
    with pytest.raises(OutputError, match="holds no record of this commit"):
        recover_commit(str(out))
    (staging / JOURNAL_COPY).write_text(json.dumps({**journal, "remove": []}))
    with pytest.raises(OutputError, match="holds no record of this commit"):
        recover_commit(str(out))
    (staging / JOURNAL_COPY).write_text(json.dumps(journal))  # a forger who wrote both
    with pytest.raises(OutputError, match="would remove 'photos/a.jpg', which the output's manifest does not list"):
        recover_commit(str(out))
    assert _files(out) == {**before, f".easydata-tmp-abc/{JOURNAL_COPY}": json.dumps(journal).encode()}
    # A real commit of a run: its journal is proved by its staging, and it completes.
    shutil.rmtree(staging)
    (out / COMMIT_MARKER).unlink()
    shard = next(out.glob("data/part-*"))
    staged = out / ".easydata-tmp-real" / "x.parquet"
    staged.parent.mkdir()
    staged.write_bytes(shard.read_bytes())
    real = {**manifest, "run": {"run_id": "real"}}
    commit_output(str(out), str(staged.parent), [(str(staged), "data/new.parquet")], real)
    assert json.loads((out / "manifest.json").read_text())["run"]["run_id"] == "real"
    assert (out / "photos" / "a.jpg").read_bytes() == b"holiday" and not (out / COMMIT_MARKER).exists()


# ---- 2. --resume after the tokenizer files changed in place ---------------------------------------------


@pytest.mark.slow
def test_resume_refuses_checkpoints_of_another_tokenizer(tmp_path):
    tokenizer = train_bpe_tokenizer(make_texts(500, seed=1), tmp_path / "tok", vocab_size=400)
    data = tmp_path / "web.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(40, seed=3)) + "{broken\n")
    job = _job(tmp_path, {"default_tokenizer": str(tokenizer), "max_rejected_fraction": 0.0,
                          "datasets": [{"name": "web", "data_files": str(data)}],
                          "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}})
    first = _cli("run", str(job), "--quiet", ONE)  # fails after tokenizing: one record rejected
    assert first.returncode != 0 and "max_rejected_fraction" in first.stderr
    assert list((tmp_path / "out").glob(".easydata-tmp-*/checkpoints"))  # what --resume would reuse
    train_bpe_tokenizer(make_texts(500, seed=9), tmp_path / "tok", vocab_size=300)  # replaced in place
    resumed = _cli("run", str(job), "--quiet", ONE, "--resume", "--set", "max_rejected_fraction=null")
    _one_line(resumed, "the tokenizer or engine of dataset 'web' changed since it started", "without --resume")
    assert not (tmp_path / "out" / "manifest.json").exists()
    fresh = _cli("run", str(job), "--quiet", ONE, "--set", "max_rejected_fraction=null")
    assert fresh.returncode == 0, fresh.stderr
    ids = pq.read_table(next((tmp_path / "out" / "web").glob("part-*"))).column("input_ids").combine_chunks()
    assert max(ids.flatten().to_pylist()) < 300  # every id is the new tokenizer's


# ---- 3, 6. the hub token never enters the manifest; push_to_hub is never ignored -----------------------


@pytest.mark.slow
def test_the_hub_token_never_enters_the_manifest_and_push_to_hub_fails_in_one_line(tmp_path, corpus, tokenizer_dir):
    secret = "hf_SECRETsecretSECRETsecret0123"
    out = tmp_path / "out"
    body = {"default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(corpus)}],
            "save": {"output_dir": str(out), "num_shards": 1, "push_to_hub": True, "hub_repo_id": "me/data",
                     "hub_token": secret}}
    done = _cli("run", str(_job(tmp_path, body)), "--quiet", ONE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _one_line(done, "push_to_hub: HF_HUB_OFFLINE=1 forbids uploading to dataset repo 'me/data'",
              f"the output is committed in {out}")
    assert secret not in done.stdout + done.stderr
    manifest = (out / "manifest.json").read_text()
    assert secret not in manifest and json.loads(manifest)["config"]["save"]["hub_token"] == "<redacted>"
    assert not any(secret.encode() in data for data in _files(out).values())


# ---- 4, 19, 24. settings refused before any work --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("setting, expected", [
    ({"data_files": ""}, "names no file (an empty path would read the current directory"),
    ({"data_files": ["a.jsonl", " "]}, "names no file"),
    ({"name": "n" * 301}, "at most 100 characters"),
    ({"save": {"splits": {"train": 0, "test": 0}}}, "fraction of 'train' must be positive"),
], ids=["empty-string", "blank-entry", "long-name", "zero-splits"])
def test_settings_that_would_read_everything_or_crash_are_refused_in_one_line(tmp_path, tokenizer_dir, setting,
                                                                               expected):
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "private.txt").write_text("not data")
    dataset = {"name": "web", "data_files": "x.jsonl", **{k: v for k, v in setting.items() if k != "save"}}
    body = {"default_tokenizer": str(tokenizer_dir), "datasets": [dataset],
            "save": {"output_dir": str(tmp_path / "out"), **setting.get("save", {})}}
    _one_line(_cli("run", str(_job(tmp_path, body)), "--quiet", ONE, cwd=tmp_path / "cwd"), expected)
    assert not (tmp_path / "out").exists()
    if setting.get("data_files") == "":
        _one_line(_cli("tokenize", "--data-files", "", "--tokenizer", str(tokenizer_dir), "--output",
                       str(tmp_path / "out"), cwd=tmp_path / "cwd"), "names no file")


@pytest.mark.slow
def test_a_pad_id_outside_the_vocabulary_is_refused_before_any_work(tmp_path, corpus, tokenizer_dir):
    body = {"default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(corpus)}],
            "pack": {"enabled": True, "seq_length": 64, "pad_token_id": 999999999},
            "save": {"output_dir": str(tmp_path / "out")}}
    _one_line(_cli("run", str(_job(tmp_path, body)), "--quiet", ONE),
              "pack.pad_token_id 999999999 is not an id of tokenizer", "choose an id in [0, ")
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out").glob(".easydata-tmp-*/checkpoints"))


# ---- 7. an engine that ignores an added token's single_word --------------------------------------------


@pytest.fixture(scope="module")
def single_word_mistral(tmp_path_factory) -> Path:
    """The real Mistral tokenizer with one added special token `[TOOL]` marked `single_word`."""
    source = REPO_ROOT / "tests" / "data" / "tokenizers" / "mistral-7b-v0.1"
    out = tmp_path_factory.mktemp("single-word")
    tok = json.loads(gzip.open(source / "tokenizer.json.gz").read())
    tok["added_tokens"].append({"id": 32000, "content": "[TOOL]", "single_word": True, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    (out / "tokenizer.json").write_text(json.dumps(tok))
    shutil.copy(source / "tokenizer_config.json", out / "tokenizer_config.json")
    return out


@pytest.mark.slow
def test_the_adversarial_set_exercises_every_added_token_flag(single_word_mistral, tmp_path, monkeypatch):
    """The run's sampled documents need not hold the token (3 of 200,000 did): the adversarial set must."""
    from tokenizers import Tokenizer

    from easydata.text.engines import (Engine, GigatokenEngine, adversarial_texts, choose_engine,
                                       special_token_strings, verify_engine)

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    path = single_word_mistral / "tokenizer.json"
    hf = Tokenizer.from_file(str(path))
    problem = verify_engine(GigatokenEngine(path, hf), Engine(path, hf), adversarial_texts(special_token_strings(hf)))
    assert problem is not None and "[TOOL]" in problem  # gigatoken ignores single_word: caught at planning
    choice = choose_engine("auto", path, hf, special_token_strings(hf), make_texts(300, seed=5))
    assert choice.name == "hf" and "gigatoken" in choice.reason and "differs from hf" in choice.reason


@pytest.mark.slow
def test_a_single_word_token_gives_hfs_ids_with_the_default_engine(tmp_path, single_word_mistral, monkeypatch):
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    texts = make_texts(300, seed=8) + ["a[TOOL]b", "call[TOOL] now", "[TOOL]x and [TOOL] y", "(([TOOL]))"] * 5
    # (here the planning sample holds the token too; the adversarial set alone catches it: the test above)
    data = write_jsonl(tmp_path / "web.jsonl", ({"text": t} for t in texts))
    for engine in ("hf", "auto"):
        body = {"default_tokenizer": str(single_word_mistral), "tokenize": {"engine": engine},
                "datasets": [{"name": "web", "data_files": str(data)}],
                "save": {"output_dir": str(tmp_path / engine), "num_shards": 2}}
        done = _cli("run", str(_job(tmp_path, body, f"{engine}.json")), "--quiet", ONE,
                    env={**os.environ, "EASYDATA_CACHE": str(tmp_path / "cache")})
        assert done.returncode == 0, done.stderr
    assert _digest(tmp_path / "auto") == _digest(tmp_path / "hf") != {}
    engine = json.loads((tmp_path / "auto" / "manifest.json").read_text())["tokenizer_engines"]["web"]
    assert engine["name"] == "hf" and "gigatoken" in engine["reason"] and "differs from hf" in engine["reason"]


# ---- 8. the Python API's cache follows the tokenizer's content --------------------------------------------


@pytest.mark.slow
def test_the_api_cache_is_keyed_on_the_tokenizers_content(tmp_path, monkeypatch):
    from easydata import DatasetConfig, LoadStageConfig, Pipeline, PipelineConfig

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    tokenizer = train_bpe_tokenizer(make_texts(500, seed=1), tmp_path / "tok", vocab_size=400)
    data = write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(48, seed=2)))
    config = PipelineConfig(default_tokenizer=str(tokenizer), datasets=[DatasetConfig(name="web", data_files=str(data))],
                            load=LoadStageConfig(batch_size=4, shuffle_buffer_size=0))

    def ids() -> list[list[int]]:
        return [row.tolist() for batch in Pipeline(config, beam_args=[ONE]).source().tokenize().load().build()
                for row in batch["input_ids"]]

    first = ids()
    assert ids() == first  # served from the cache
    train_bpe_tokenizer(make_texts(500, seed=9), tmp_path / "tok", vocab_size=300)  # the same path, new files
    from tokenizers import Tokenizer  # noqa: E402 - the reference ids of the new files

    replaced = ids()
    assert replaced != first and max(max(row) for row in replaced) < 300
    new = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    specials = {new.token_to_id(t) for t in ("<s>", "</s>", "<pad>")}
    expected = collections.Counter(i for t in make_texts(48, seed=2) for i in new.encode(t).ids)
    assert collections.Counter(i for row in replaced for i in row if i not in specials) == expected


# ---- 9. a mix's documents_in counts every document read ------------------------------------------------


@pytest.mark.slow
def test_a_mixs_documents_in_counts_every_document_read(tmp_path, tokenizer_dir):
    big = write_jsonl(tmp_path / "big.jsonl", ({"text": t} for t in make_texts(6, seed=1, min_words=40)))
    small = write_jsonl(tmp_path / "small.jsonl", ({"text": t} for t in make_texts(2, seed=2, min_words=3,
                                                                                         max_words=5)))
    body = {"default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "big", "data_files": str(big)}, {"name": "small", "data_files": str(small)}],
            "mix": {"weights": {"big": 0.5, "small": 0.5}},
            "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}}
    done = _cli("run", str(_job(tmp_path, body)), ONE)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    mixed = manifest["datasets"]["mixed"]
    assert manifest["documents_in"] == mixed["documents_in"] == mixed["documents_read"] == 8
    assert mixed["documents_in"] == mixed["documents_written"] + mixed["documents_rejected"]
    assert mixed["documents_selected"] + mixed["documents_unused"] == mixed["documents_written"]
    assert 0 < mixed["documents_selected"] < 8 and "total: 8 documents read" in done.stdout
    assert _cli("validate", str(tmp_path / "out")).returncode == 0
    # A budget that selects nothing is a failed run, not an empty output with exit 0.
    body["mix"]["total_tokens"] = 1
    body["save"]["output_dir"] = str(tmp_path / "none")
    _one_line(_cli("run", str(_job(tmp_path, body, "none.json")), "--quiet", ONE), "the mix selected none of the 8")
    assert not (tmp_path / "none" / "manifest.json").exists()


# ---- 10, 14. train-tokenizer --------------------------------------------------------------------------


@pytest.mark.slow
def test_train_tokenizer_keeps_a_users_tokenizer_config_and_bounds_the_vocabulary(tmp_path, corpus):
    out = tmp_path / "tok"
    out.mkdir()
    (out / "tokenizer_config.json").write_text('{"chat_template": "mine"}')
    _one_line(_cli("train-tokenizer", "--data-files", str(corpus), "--vocab-size", "300", "--output", str(out)),
              "already holds a tokenizer's files (tokenizer_config.json)", "--overwrite")
    assert (out / "tokenizer_config.json").read_text() == '{"chat_template": "mine"}'
    started = time.monotonic()
    _one_line(_cli("train-tokenizer", "--data-files", str(corpus), "--vocab-size", "1000000000", "--output",
                   str(tmp_path / "huge")), "`vocab_size` must be at most 2,097,152")
    assert time.monotonic() - started < 60 and not (tmp_path / "huge").exists()


# ---- 11, 12. template work is bounded --------------------------------------------------------------------


_BOMBS = {
    "tilde-doubling": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "integer-squaring": "{% set ns = namespace(x=7) %}{% for i in range(100000) %}{% set ns.x = ns.x * ns.x + 1 %}"
                        "{% endfor %}",
    "power-loop": "{% for i in range(100000) %}{% set y = 3 ** 10000000 %}{% endfor %}",
    "replace-doubling": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s.replace('a', ns.s) %}"
                        "{% endfor %}",
}


@pytest.mark.slow
@pytest.mark.parametrize("bomb", sorted(_BOMBS))
def test_a_template_bomb_is_one_dead_letter_in_seconds(bomb):
    """Rendered in a child process with 4 GiB of address space and a minute: unbounded, these grow until the
    process dies or run for hours."""
    code = ("import resource\nresource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "from easydata.text.chat import ChatError, ChatRenderer, conversation_from_record\n"
            f"renderer = ChatRenderer({_BOMBS[bomb] + '{% for m in messages %}{{ m.content }}{% endfor %}'!r}, {{}}, [])\n"
            "conversation = conversation_from_record([{'role': 'user', 'content': 'hi'},"
            " {'role': 'assistant', 'content': 'yo'}])\n"
            "try:\n    renderer.render(conversation)\nexcept ChatError as e:\n    print(e)\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0 and done.stdout.startswith("chat template error: SecurityError"), done.stderr[-500:]
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_a_template_within_every_count_still_stops_at_the_wall_clock_budget(monkeypatch):
    """30,000 scans of a 30 MB string (each within the size and step counts) would take minutes."""
    import easydata.text.chat as chat

    monkeypatch.setattr(chat, "MAX_TEMPLATE_SECONDS", 1.0)
    slow = ("{% set s = 'a' * 30000000 %}{% for i in range(30000) %}{% set n = s.count('b') %}{% endfor %}"
            "{% for m in messages %}{{ m.content }}{% endfor %}")
    conversation = chat.conversation_from_record([{"role": "user", "content": "hi"},
                                                  {"role": "assistant", "content": "yo"}])
    started = time.monotonic()
    with pytest.raises(chat.ChatError, match="ran for more than 1 s for one record"):
        chat.ChatRenderer(slow, {}, []).render(conversation)
    assert time.monotonic() - started < 15


# ---- 15. configs read bounded --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_config_from_a_device_or_not_utf8_is_one_line(tmp_path):
    started = time.monotonic()
    _one_line(_cli("run", "/dev/zero", timeout=120), "holds more than the 16 MiB a config may be")
    assert time.monotonic() - started < 60
    bad = tmp_path / "job.yaml"
    bad.write_bytes(b"seed: 1\ndatasets: \xff\xfe\n")
    _one_line(_cli("run", str(bad)), "is not UTF-8 text")


# ---- 16. special files inside an output ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("target", ["data/part-00000-of-00002.parquet", "manifest.json", ".easydata-lock",
                                    ".easydata-committing"])
def test_a_fifo_inside_the_output_never_blocks(finished, tmp_path, corpus, tokenizer_dir, target):
    out = _copy(finished, tmp_path)
    (out / target).unlink(missing_ok=True)
    os.mkfifo(out / target)
    for command in ("validate", "inspect", "stats"):
        done = _cli(command, str(out), timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        if target in ("manifest.json", "data/part-00000-of-00002.parquet"):
            assert done.returncode != 0 and "is a FIFO, not a" in done.stdout + done.stderr
    reader = subprocess.run([sys.executable, "-c", "import sys\nfrom easydata.reader import TokenReader\n"
                             "from easydata.errors import EasyDataError\ntry:\n"
                             f"    print(sum(1 for _ in TokenReader({str(out)!r}, batch_size=2, num_epochs=1)))\n"
                             "except EasyDataError as e:\n    print('refused:', e)"],
                            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert reader.returncode == 0 and reader.stderr == "", reader.stderr
    run = _tokenize(corpus, tokenizer_dir, out, "--overwrite", "--pack", "--seq-length", "64", timeout=120)
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) <= 1, run.stderr


# ---- 17, 18. inputs that must work or be dead letters -----------------------------------------------------


@pytest.mark.slow
def test_a_csv_field_of_150_kb_is_a_document(tmp_path, tokenizer_dir):
    data = tmp_path / "big.csv"
    with open(data, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerow([1, " ".join(make_texts(1, seed=4, min_words=30000, max_words=30000))])
        writer.writerow([2, "a small one"])
    assert data.stat().st_size > 150_000
    done = _cli("tokenize", "--data-files", str(data), "--tokenizer", str(tokenizer_dir), "--output",
                str(tmp_path / "out"), "--quiet", ONE)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["documents_written"] == 2 and manifest["documents_rejected"] == 0


def test_size_estimates_over_2_31_do_not_overflow():
    """Beam's element counters take C ints: a document batch standing for a 2 GiB dead-lettered line raised
    OverflowError (the whole run then ended in a traceback)."""
    import pyarrow as pa

    from easydata.io.sources import DocumentBatch
    from transforms.coders import DocumentBatchCoder, RecordBatchCoder

    batch = DocumentBatch(dataset="web", keys=["web@0"], texts=["x"], fields={}, input_bytes=2**31 + 10)
    assert DocumentBatchCoder().get_impl().estimate_size(batch) == 2**31 - 1
    assert RecordBatchCoder().get_impl().estimate_size(pa.record_batch({"a": [1, 2]})) > 0


@pytest.mark.slow
@pytest.mark.heavy
def test_a_jsonl_line_over_2_gib_is_a_dead_letter(tmp_path, tokenizer_dir):
    data = tmp_path / "huge.jsonl"
    with open(data, "wb") as f:
        f.write(b'{"text": "ok one"}\n{"text": "')
        chunk = b"a" * (1 << 24)
        for _ in range(2**31 // len(chunk) + 1):
            f.write(chunk)
        f.write(b'"}\n{"text": "ok two"}\n')
    done = _cli("tokenize", "--data-files", str(data), "--tokenizer", str(tokenizer_dir), "--output",
                str(tmp_path / "out"), "--quiet", ONE)
    data.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["documents_written"], manifest["documents_rejected"]) == (2, 1)


# ---- 20-23, 26, 27: one line for every mistake ---------------------------------------------------------------


@pytest.mark.slow
def test_a_tilde_output_is_expanded_once(tmp_path, corpus, tokenizer_dir):
    home = tmp_path / "home"
    home.mkdir()
    done = _tokenize(corpus, tokenizer_dir, Path("~/x"), cwd=tmp_path, env={**os.environ, "HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert (home / "x" / "manifest.json").is_file() and not (tmp_path / "~").exists()


@pytest.mark.slow
def test_an_ftp_url_without_network_is_one_line(tmp_path, tokenizer_dir):
    _one_line(_cli("tokenize", "--data-files", "ftp://example.invalid/a.jsonl", "--tokenizer", str(tokenizer_dir),
                   "--output", str(tmp_path / "out"), timeout=120), "cannot access 'ftp://example.invalid/a.jsonl'")


_MALFORMED = {
    "datasets-list": lambda m: m.update(datasets=[1, 2]),
    "shard-not-object": lambda m: m["datasets"]["data"].update(shards=["a"]),
    "rows-string": lambda m: m["datasets"]["data"]["shards"][0].update(rows="many"),
    "schema-columns-list": lambda m: m["schema"].update(columns=[1]),
    "tokenizer-string": lambda m: m.update(tokenizer="x"),
    "unknown-format": lambda m: m.update(format="zip"),
    "packed-without-segment-ids": lambda m: m["schema"]["columns"].pop("segment_ids"),
    "totals-string": lambda m: m.update(totals="x"),
    "documents-in-string": lambda m: m.update(documents_in="x"),
    "mix-string": lambda m: m.update(mix="x"),
    "engines-list": lambda m: m.update(tokenizer_engines=[1]),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(_MALFORMED) + ["deeply-nested"])
def test_a_malformed_manifest_is_a_problem_line_or_one_error_line(finished, tmp_path, kind):
    out = _copy(finished, tmp_path)
    if kind == "deeply-nested":
        (out / "manifest.json").write_text('{"format_version": 1, "datasets": ' + '{"a": ' * 100_000 + "1"
                                           + "}" * 100_001)
    else:
        manifest = json.loads((out / "manifest.json").read_text())
        _MALFORMED[kind](manifest)
        (out / "manifest.json").write_text(json.dumps(manifest))
    done = _cli("validate", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "  problem: " in done.stdout and "manifest" in done.stdout, done.stdout
    for command in ("inspect", "stats"):
        _one_line(_cli(command, str(out)), "manifest")


@pytest.mark.slow
def test_a_deeply_nested_lock_is_held_and_one_line(finished, tmp_path, corpus, tokenizer_dir):
    out = _copy(finished, tmp_path)
    (out / ".easydata-lock").write_text("[" * 100_000 + "]" * 100_000)
    _one_line(_tokenize(corpus, tokenizer_dir, out, "--overwrite"), "is locked by '.easydata-lock', which cannot be read",
              "remove it and run again")
    (out / ".easydata-lock").write_text('{"run_id": ["x"], "pid": "abc", "lease_seconds": "long", "heartbeat_at": {}}')
    _one_line(_tokenize(corpus, tokenizer_dir, out, "--overwrite"), "is locked by '.easydata-lock', which cannot be read")


@pytest.mark.slow
def test_an_unfinished_reader_prints_nothing_at_exit(finished):
    code = ("from easydata.reader import TokenReader\n"
            f"r = TokenReader({str(finished)!r}, batch_size=2, shuffle=True, seed=0)\n"
            "for i, b in enumerate(r):\n    break\nit = iter(r)\nnext(it)\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


@pytest.mark.slow
def test_a_format_callback_that_exits_is_a_dead_letter(tmp_path, corpus, tokenizer_dir):
    (tmp_path / "mycallbacks.py").write_text(
        "import sys\n\ndef pick(record):\n    if 'model' in record['text']:\n        sys.exit(3)\n    return record\n")
    body = {"default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "web", "data_files": str(corpus), "format_callback": "mycallbacks:pick"}],
            "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}}
    done = _cli("run", str(_job(tmp_path, body)), "--quiet", ONE,
                env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"})
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    rejected = sum(1 for t in make_texts(60, seed=11) if "model" in t)
    assert rejected and manifest["documents_rejected"] == rejected
    reasons = [json.loads(line)["reason"] for p in (tmp_path / "out" / "rejected").rglob("*.jsonl")
               for line in p.read_text().splitlines()]
    assert reasons and all(r == "format_callback raised SystemExit: 3" for r in reasons)


@pytest.mark.slow
def test_dataflow_runner_without_its_options_is_one_line(tmp_path, corpus, tokenizer_dir):
    done = _cli("tokenize", "--data-files", str(corpus), "--tokenizer", str(tokenizer_dir), "--output",
                str(tmp_path / "out"), "--runner=DataflowRunner", "--project=p")
    _one_line(done, "--runner=DataflowRunner needs --region, --temp_location")
    assert not list((tmp_path / "out").glob(".easydata-tmp-*")) if (tmp_path / "out").exists() else True
