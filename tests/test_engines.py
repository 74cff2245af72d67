"""Fast tokenizer engines (`easydata.text.engines`): used only where they give `tokenizers`' ids.

Real engines (`fastokens`, `gigatoken`) on real tokenizers (Qwen3's byte-level BPE, Mistral's
SentencePiece BPE): chosen at planning after verification, byte-identical shards to `engine: hf`
through the real CLI, and a deliberately wrong engine caught at planning and while running.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from easydata.text.engines import (Engine, FastokensEngine, GigatokenEngine, VerifiedEngine,
                                   adversarial_texts, choose_engine, sampled, verify_engine)
from tests.conftest import REPO_ROOT, make_texts

pytestmark = pytest.mark.slow


def _hf(directory: Path) -> tuple[Path, Tokenizer]:
    return directory / "tokenizer.json", Tokenizer.from_file(str(directory / "tokenizer.json"))


def _specials(hf: Tokenizer) -> list[str]:
    return [t.content for t in hf.get_added_tokens_decoder().values()]


class _Wrong(FastokensEngine):
    """A real fast engine made wrong on purpose: one id changed in documents holding a 'q'."""

    def encode(self, texts, add_special_tokens):
        flat, lengths = super().encode(texts, add_special_tokens)
        flat = flat.copy()
        starts = np.concatenate([[0], np.cumsum(lengths)])
        for i, text in enumerate(texts):
            if "q" in text and lengths[i]:
                flat[starts[i]] = (flat[starts[i]] + 1) % 1000
        return flat, lengths


def test_auto_picks_a_verified_fast_engine_per_tokenizer(qwen3_tokenizer_dir, mistral_tokenizer_dir, tmp_path,
                                                        monkeypatch) -> None:
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    sample = make_texts(300, seed=3)
    qwen = choose_engine("auto", *_hf(qwen3_tokenizer_dir), _specials(_hf(qwen3_tokenizer_dir)[1]), sample)
    assert (qwen.name, qwen.reason, qwen.planning_documents) == ("fastokens", "verified equal to hf", 300)
    assert qwen.adversarial_documents > 200
    again = choose_engine("auto", *_hf(qwen3_tokenizer_dir), _specials(_hf(qwen3_tokenizer_dir)[1]), sample)
    assert again == qwen  # from the cached verdict: the same count of adversarial documents behind it
    # fastokens refuses Mistral's Metaspace pre-tokenizer: the next engine is verified instead
    mistral = choose_engine("auto", *_hf(mistral_tokenizer_dir), _specials(_hf(mistral_tokenizer_dir)[1]), sample)
    assert mistral.name == "gigatoken" and mistral.reason == "verified equal to hf"
    refused = choose_engine("fastokens", *_hf(mistral_tokenizer_dir), [], sample)
    assert refused.name == "hf" and "fastokens 0.3.5 cannot load this tokenizer" in refused.reason
    # the refusal is remembered per tokenizer and version: the engine is not loaded again to learn it
    import easydata.text.engines as engines
    from easydata.text.engines import known_refusal

    assert known_refusal(mistral_tokenizer_dir / "tokenizer.json", "fastokens") == refused.reason
    assert known_refusal(qwen3_tokenizer_dir / "tokenizer.json", "fastokens") is None
    monkeypatch.setitem(engines._ENGINES, "fastokens", None)  # loading it now would raise a TypeError
    assert choose_engine("fastokens", *_hf(mistral_tokenizer_dir), [], sample).reason == refused.reason
    assert choose_engine("hf", *_hf(qwen3_tokenizer_dir), [], sample).name == "hf"
    assert list((tmp_path / "cache" / "engine-verdicts").glob("*-fastokens-0.3.5-a*.json"))  # the verdict is cached


@pytest.mark.parametrize("which", ["qwen3", "mistral"])
def test_fast_engines_give_tokenizers_ids_on_the_adversarial_set(which, qwen3_tokenizer_dir, mistral_tokenizer_dir
                                                                ) -> None:
    directory = qwen3_tokenizer_dir if which == "qwen3" else mistral_tokenizer_dir
    path, hf = _hf(directory)
    texts = adversarial_texts(_specials(hf))
    engines = [GigatokenEngine(path, hf)] + ([FastokensEngine(path, hf)] if which == "qwen3" else [])
    for engine in engines:
        assert verify_engine(engine, Engine(path, hf), texts) is None, engine.name


def test_a_wrong_engine_is_refused_at_planning(qwen3_tokenizer_dir, tmp_path, monkeypatch) -> None:
    import easydata.text.engines as engines

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(engines._ENGINES, "fastokens", _Wrong)
    path, hf = _hf(qwen3_tokenizer_dir)
    choice = choose_engine("auto", path, hf, _specials(hf), ["the quick brown fox", "plain"])
    assert choice.name == "gigatoken"  # the next engine, verified
    assert choose_engine("fastokens", path, hf, [], ["quiet"]).name == "hf"
    problem = verify_engine(_Wrong(path, hf), Engine(path, hf), ["no letter kew here", "a quick one"])
    assert problem.startswith("document 1 ('a quick one'...) differs")


def test_a_wrong_engine_is_caught_while_running_and_hf_ids_kept(qwen3_tokenizer_dir) -> None:
    path, hf = _hf(qwen3_tokenizer_dir)
    reference = Engine(path, hf)
    texts = make_texts(3000, seed=4)
    keys = [f"f.jsonl@{i}" for i in range(len(texts))]
    checked = [i for i, k in enumerate(keys) if sampled(k)]
    assert 10 <= len(checked) <= 60  # about 1 %
    verified = VerifiedEngine(_Wrong(path, hf), reference, max_mismatches=10**9)
    flat, lengths = verified.encode(texts, keys, add_special_tokens=False)
    want_flat, want_lengths = reference.encode(texts, False)
    starts, want_starts = np.concatenate([[0], np.cumsum(lengths)]), np.concatenate([[0], np.cumsum(want_lengths)])
    for i in checked:  # every checked document carries hf's ids
        assert np.array_equal(flat[starts[i]:starts[i + 1]], want_flat[want_starts[i]:want_starts[i + 1]])
    counts = verified.take_counts()
    wrong = sum("q" in texts[i] for i in checked)
    assert counts == {"documents": 3000, "verified": len(checked), "mismatches": wrong, "hf_documents": 0} and wrong
    switching = VerifiedEngine(_Wrong(path, hf), reference, max_mismatches=1)
    switching.encode(texts[:1500], keys[:1500], False)
    assert switching.switched
    again = switching.encode(texts[1500:], keys[1500:], False)  # the rest: hf's ids, all of them
    assert np.array_equal(again[0], reference.encode(texts[1500:], False)[0])
    assert switching.take_counts()["hf_documents"] == 1500


def _digest(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("part-*"))}


def _job(tmp_path: Path, tokenizer: Path, engine: str, out: str, **tokenize) -> Path:
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps({
        "default_tokenizer": str(tokenizer), "datasets": [{"name": "web", "data_files": str(tmp_path / "web.jsonl")}],
        "tokenize": {"engine": engine, **tokenize},
        "pack": {"enabled": True, "seq_length": 256}, "save": {"output_dir": str(tmp_path / out), "num_shards": 3}}))
    return config


@pytest.mark.parametrize("which, tokenize", [
    ("qwen3", {}),
    ("mistral", {"add_bos": True}),  # BOS added by the pipeline
    ("mistral", {"max_length": 64, "truncation": "window", "stride": 8}),  # the post-processor's BOS, windows
], ids=["qwen3", "mistral-bos", "mistral-postprocessor-windows"])
def test_the_fast_engine_writes_byte_identical_shards(which, tokenize, tmp_path, qwen3_tokenizer_dir,
                                                      mistral_tokenizer_dir, monkeypatch) -> None:
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    tokenizer = qwen3_tokenizer_dir if which == "qwen3" else mistral_tokenizer_dir
    texts = make_texts(1500, seed=6) + adversarial_texts(["<|im_end|>", "</s>"])[:60]
    (tmp_path / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts if t.strip()))
    for engine in ("hf", "auto"):
        done = subprocess.run([sys.executable, "-m", "easydata", "run",
                               str(_job(tmp_path, tokenizer, engine, engine, **tokenize)), "--quiet"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert _digest(tmp_path / "auto") == _digest(tmp_path / "hf") != {}
    engine = json.loads((tmp_path / "auto" / "manifest.json").read_text())["tokenizer_engines"]["web"]
    assert f"  tokenizer engine: {engine['name']} {engine['version']} (verified equal to hf on" in done.stdout
    assert engine["name"] == ("fastokens" if which == "qwen3" else "gigatoken") and engine["requested"] == "auto"
    assert engine["verified_at_planning"]["documents"] > 100 and engine["verified_at_planning"]["adversarial"] > 200
    running = engine["while_running"]
    assert running["documents"] == len([t for t in texts if t.strip()]) and running["mismatches"] == 0
    assert 0 < running["verified"] < running["documents"] / 20


_CORRUPT_AFTER_PLANNING = """
import logging, sys
logging.disable(logging.WARNING)
import numpy as np
import beam_pipelines.batch as batch
import easydata.text.engines as engines

state = {"planned": False}
plan = batch.plan_run
def planned(*a, **k):
    result = plan(*a, **k)
    state["planned"] = True  # from now on the engine goes wrong: planning could not see it
    return result
batch.plan_run = planned
encode = engines.FastokensEngine.encode
def wrong(self, texts, add_special_tokens):
    flat, lengths = encode(self, texts, add_special_tokens)
    if state["planned"]:
        flat = flat.copy()
        flat[np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]] += 1
    return flat, lengths
engines.FastokensEngine.encode = wrong
from easydata.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_engine_going_wrong_during_the_run_is_caught_counted_and_flagged(tmp_path, qwen3_tokenizer_dir,
                                                                            monkeypatch) -> None:
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(2000, seed=7)))
    done = subprocess.run([sys.executable, "-c", _CORRUPT_AFTER_PLANNING, "run",
                           str(_job(tmp_path, qwen3_tokenizer_dir, "fastokens", "out")), "--direct_num_workers=1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    engine = json.loads((tmp_path / "out" / "manifest.json").read_text())["tokenizer_engines"]["web"]
    running = engine["while_running"]
    assert engine["name"] == "fastokens" and running["mismatches"] >= 3  # caught: then hf for the rest
    assert running["switched_to_hf_documents"] > 0
    assert "warning: web: tokenizer engine fastokens gave other ids than hf on" in done.stdout
    checked = subprocess.run([sys.executable, "-m", "easydata", "validate", str(tmp_path / "out")], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 1 and "tokenizer engine fastokens gave other ids than hf" in checked.stdout


def test_engines_take_an_empty_batch(qwen3_tokenizer_dir, mistral_tokenizer_dir) -> None:
    """A chat dataset has no plain documents to sample: verification runs on an empty list."""
    for directory in (qwen3_tokenizer_dir, mistral_tokenizer_dir):
        path, hf = _hf(directory)
        for engine in (GigatokenEngine(path, hf), Engine(path, hf)):
            for add in (False, True):
                flat, lengths = engine.encode([], add)
                assert len(flat) == 0 and len(lengths) == 0
        assert verify_engine(GigatokenEngine(path, hf), Engine(path, hf), []) is None


def test_gigatoken_ids_are_its_batchs_own_buffer_and_any_layout_still_converts(mistral_tokenizer_dir) -> None:
    """gigatoken's ids are used where it put them (a view, not awkward's copy of every id), slices of a batch
    included; a layout it does not make (other numbers, a regular array) goes through awkward and gives the same."""
    import awkward as ak

    path, hf = _hf(mistral_tokenizer_dir)
    engine = GigatokenEngine(path, hf)
    batch = engine._tokenizer.encode_batch(["a first document", "", "and the third one, longer than the first"])
    for encoded in (batch, batch[1:]):
        flat, lengths = engine._flat(encoded)
        assert flat.dtype == np.int32 and lengths.dtype == np.int64
        assert np.shares_memory(flat, np.asarray(batch.layout.content.data))
        assert flat.tolist() == ak.flatten(encoded).tolist() and lengths.tolist() == ak.num(encoded).tolist()
    for other in (ak.Array([[5, 6], [], [7]]), ak.to_regular(ak.Array([[5, 6], [7, 8]]), axis=1)):
        flat, lengths = engine._flat(other)
        assert flat.dtype == np.int32 and flat.tolist() == ak.flatten(other).tolist()
        assert lengths.tolist() == ak.num(other).tolist()


def test_the_worker_server_chooses_like_the_launcher(qwen3_tokenizer_dir, mistral_tokenizer_dir, tmp_path,
                                                     monkeypatch) -> None:
    """Planning's choice made by a child of the local worker server, with the engines the server
    preloaded (the launching process then never loads them), equals the one made in this process."""
    from beam_pipelines.local.worker_pool import StandbyWorkers
    from easydata.config import TokenizerConfig

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    sample = make_texts(200, seed=8)
    configs = [TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)), TokenizerConfig(name_or_path=str(mistral_tokenizer_dir))]
    workers = StandbyWorkers(configs, ["fastokens", "gigatoken"])
    try:
        for config, directory in zip(configs, (qwen3_tokenizer_dir, mistral_tokenizer_dir)):
            for add in (True, False):
                theirs = workers.choose_engine(config, "auto", sample, add)
                ours = choose_engine("auto", *_hf(directory), _specials(_hf(directory)[1]), sample,
                                     add_special_tokens=add)
                assert theirs == ours and theirs.planning_documents == 200
        assert workers.worker_pids() == []  # verifiers are not workers
    finally:
        workers.close()


_WRONG_IN_THE_SERVER = """
import os
if "EASYDATA_PRELOAD_ENGINES" in os.environ:  # only the local worker server (and what it forks)
    import numpy as np
    import easydata.text.engines as engines

    class Wrong(engines.FastokensEngine):
        def encode(self, texts, add_special_tokens):
            flat, lengths = super().encode(texts, add_special_tokens)
            flat = flat.copy()
            flat[np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]] += 1
            return flat, lengths

    engines._ENGINES["fastokens"] = Wrong
"""


def test_a_wrong_engine_in_the_worker_server_is_refused_at_planning(qwen3_tokenizer_dir, tmp_path,
                                                                    monkeypatch) -> None:
    """The real CLI with its worker processes: the fast engine the server loaded is wrong (a
    `sitecustomize` that only the server imports replaces it); planning's choice, made there, refuses it
    and the run encodes with hf, saying why."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(_WRONG_IN_THE_SERVER)
    (tmp_path / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(300, seed=9)))
    done = subprocess.run([sys.executable, "-m", "easydata", "run",
                           str(_job(tmp_path, qwen3_tokenizer_dir, "fastokens", "out"))], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path / 'inject'}{os.pathsep}{REPO_ROOT}"})
    assert done.returncode == 0, done.stderr[-3000:]
    engine = json.loads((tmp_path / "out" / "manifest.json").read_text())["tokenizer_engines"]["web"]
    assert engine["name"] == "hf" and engine["requested"] == "fastokens"
    assert engine["reason"].startswith("fastokens 0.3.5 differs from hf: document 0 ")
    assert "encodes with hf: fastokens 0.3.5 differs from hf" in done.stderr


@pytest.mark.parametrize("which, add_special_tokens, max_length", [("qwen3", True, None), ("mistral", True, 64),
                                                                    ("mistral", False, None)])
def test_the_python_apis_tokenized_source_uses_a_verified_engine_with_hfs_ids(
        which, add_special_tokens, max_length, qwen3_tokenizer_dir, mistral_tokenizer_dir, tmp_path) -> None:
    """`TokenizedShardedSource(engine="auto")` (EasyData's object API) encodes with the fast engine the
    pipeline would choose, and yields exactly `engine="hf"`'s rows, also when resumed at a row."""
    import pickle

    from easydata import JsonShardedSource, TokenizedShardedSource
    from tests.conftest import write_jsonl

    directory = qwen3_tokenizer_dir if which == "qwen3" else mistral_tokenizer_dir
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "i": i} for i, t in enumerate(make_texts(900, seed=11))))
    source = JsonShardedSource(str(tmp_path / "a.jsonl"))

    def tokenized(engine: str) -> TokenizedShardedSource:
        return TokenizedShardedSource(source, str(directory), max_length=max_length,
                                      add_special_tokens=add_special_tokens, batch_size=128, engine=engine)

    fast, hf = tokenized("auto"), tokenized("hf")
    rows = list(fast)
    assert rows == list(hf) and len(rows) == 900
    assert fast.engine_choice.name == ("fastokens" if which == "qwen3" else "gigatoken")
    assert hf.engine_choice.name == "hf" and hf.engine_counts() == {}
    counts = fast.engine_counts()
    assert counts["documents"] == 900 and 1 <= counts["verified"] < 40 and counts["mismatches"] == 0
    shard = source.shard_names[0]
    again = pickle.loads(pickle.dumps(fast))  # another process's copy: chooses again
    assert again.engine_choice is None and list(again.open_shard_at_row(shard, 500)) == rows[500:]


def test_the_python_apis_tokenized_source_keeps_hfs_ids_from_a_wrong_engine(qwen3_tokenizer_dir, tmp_path,
                                                                           monkeypatch) -> None:
    """A fast engine that is wrong only after it was chosen: the checked examples carry `tokenizers`' ids,
    and after 3 mismatches every example does."""
    from easydata import JsonShardedSource, TokenizedShardedSource
    from easydata.text import engines
    from tests.conftest import write_jsonl

    texts = make_texts(3000, seed=4)
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in texts))
    source = TokenizedShardedSource(JsonShardedSource(str(tmp_path / "a.jsonl")), str(qwen3_tokenizer_dir),
                                    add_eos=False, batch_size=500, engine="fastokens")
    want = [r["input_ids"] for r in TokenizedShardedSource(JsonShardedSource(str(tmp_path / "a.jsonl")),
                                                            str(qwen3_tokenizer_dir), add_eos=False, engine="hf")]
    first = source._fast_engine(texts[:500])  # chosen while the engine is right
    assert source.engine_choice.name == "fastokens"
    monkeypatch.setattr(first, "engine", _Wrong(first.engine.tokenizer_file, first.engine.hf))
    got = [r["input_ids"] for r in source]
    counts = source.engine_counts()
    assert counts["mismatches"] >= 3 and counts["hf_documents"] > 0 and first.switched
    shard = JsonShardedSource(str(tmp_path / "a.jsonl")).shard_names[0]
    checked = [i for i in range(len(texts)) if engines.sampled(f"{shard}@{i}")]
    assert all(got[i] == want[i] for i in checked)  # a checked example never carries the wrong ids
    switch = next(i for i in range(0, 3000, 500) if all(got[j] == want[j] for j in range(i, 3000)))
    assert switch < 3000  # from the switch on, every example has hf's ids
    assert any(got[i] != want[i] for i in range(3000))  # and before it, the engine really was wrong


def test_choosing_where_it_runs_loads_the_engine_once(qwen3_tokenizer_dir, monkeypatch) -> None:
    """`TokenizerHandle.choose_engine` (the Python API, a stream's workers) keeps what planning's check
    loaded: the engine it then encodes with is that one, not a second ~1 s load."""
    from easydata.text import engines
    from easydata.text.tokenizer import load_tokenizer

    loads = []
    real = engines.FastokensEngine.__init__
    monkeypatch.setattr(engines.FastokensEngine, "__init__", lambda self, *a: (loads.append(1), real(self, *a))[1])
    handle = load_tokenizer(str(qwen3_tokenizer_dir))
    choice, verified = handle.choose_engine("auto", make_texts(50, seed=2), True)
    assert choice.name == "fastokens" and verified.engine is handle.engine("fastokens") and len(loads) == 1
