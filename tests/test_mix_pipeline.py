"""Weighted mixing end to end: real text, the real Mistral tokenizer, Beam's local runner, plain pyarrow.

The corpus is real: Python standard library modules (`code`) and the docstrings of their classes and
functions (`docs`), tokenized with Mistral-7B's tokenizer. Realized token shares are measured from the
written shards, not taken from the manifest: every row of an unpacked mix is matched to its source by
its token sequence, using a separate unmixed run of the same datasets.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.errors import ConfigError
from easydata.tools.validate import validate_output
from tests.conftest import write_jsonl

IN_PROCESS = ["--direct_num_workers=1"]


def _stdlib_corpus(out: Path) -> dict[str, Path]:
    """`code`: 60 stdlib modules (2-20 KB each); `docs`: docstrings of 200 modules' classes and functions."""
    modules = [p for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
               if not p.name.startswith("_")]
    code = [{"text": p.read_text(encoding="utf-8", errors="replace"), "path": p.name} for p in modules
            if 2_000 <= p.stat().st_size <= 20_000][:60]
    docs = []
    for path in modules[:200]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        docs.extend({"text": doc} for node in ast.walk(tree)
                    if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and (doc := ast.get_docstring(node))
                    and len(doc) >= 40)
    assert len(code) >= 40 and len(docs) >= 1000, "the standard library looks unusually small here"
    return {"code": write_jsonl(out / "code.jsonl", code), "docs": write_jsonl(out / "docs.jsonl", docs)}


def _config(files: dict[str, Path], tokenizer: Path, out: Path, mix: dict[str, Any] | None,
            pack: bool = False, **save: Any) -> PipelineConfig:
    return PipelineConfig.from_dict({
        "seed": 11,
        "default_tokenizer": str(tokenizer),
        "datasets": [{"name": name, "data_files": str(path)} for name, path in files.items()],
        "mix": mix,
        "pack": {"enabled": pack, "seq_length": 1024},
        "save": {"output_dir": str(out), "num_shards": 3, **save},
    })


def _rows(out: Path, name: str) -> list[tuple[int, ...]]:
    return [tuple(ids) for path in sorted((out / name).glob("*.parquet"))
            for ids in pq.read_table(path, columns=["input_ids"]).column("input_ids").to_pylist()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, mistral_tokenizer_dir: Path):
    """The corpus files and, from an unmixed run, which source every token sequence comes from."""
    root = tmp_path_factory.mktemp("mix")
    files = _stdlib_corpus(root / "in")
    unmixed = root / "unmixed"
    run_batch(_config(files, mistral_tokenizer_dir, unmixed, mix=None), IN_PROCESS, show_progress=False)
    source_of: dict[tuple[int, ...], str] = {}
    documents: dict[str, collections.Counter] = {}
    for name in files:
        documents[name] = collections.Counter(_rows(unmixed, name))
        source_of.update({ids: name for ids in documents[name]})
    return files, source_of, documents


def _measured(out: Path, source_of: dict[tuple[int, ...], str]) -> tuple[dict[str, float], collections.Counter]:
    """Token share of each source in the written rows, and how often each row occurs."""
    rows = collections.Counter(_rows(out, "mixed"))
    tokens = collections.Counter()
    for ids, count in rows.items():
        tokens[source_of[ids]] += len(ids) * count  # KeyError: a row that is in no source
    total = sum(tokens.values())
    return {name: n / total for name, n in tokens.items()}, rows


@pytest.mark.slow
@pytest.mark.parametrize("weights, strategy", [
    ({"code": 0.7, "docs": 0.3}, "first_exhausted"),
    ({"code": 0.98, "docs": 0.02}, "first_exhausted"),
    ({"code": 0.3, "docs": 0.7}, "all_exhausted"),
])
def test_realized_token_shares_are_within_one_point(corpus, mistral_tokenizer_dir, tmp_path, weights, strategy):
    files, source_of, documents = corpus
    out = tmp_path / "out"
    manifest = run_batch(_config(files, mistral_tokenizer_dir, out, {"weights": weights, "stop_strategy": strategy}),
                         IN_PROCESS, show_progress=False).manifest
    shares, rows = _measured(out, source_of)
    for name, target in weights.items():
        assert shares.get(name, 0.0) == pytest.approx(target, abs=0.01), (name, shares)
        assert manifest["realized_token_share"][name] == pytest.approx(shares.get(name, 0.0), abs=1e-6)
    assert manifest["target_weights"] == weights
    mix = manifest["mix"]
    assert manifest["datasets"]["mixed"]["tokens"] == mix["tokens_out"] == sum(len(r) * n for r, n in rows.items())
    factors = mix["repeat_factors"]
    # (identical documents, e.g. repeated docstrings, occur as often in the mix as in the source)
    if strategy == "first_exhausted":  # the limiting source is used whole, nothing repeats
        assert max(factors.values()) == pytest.approx(1.0)
        assert all(n <= documents[source_of[ids]][ids] for ids, n in rows.items())
        limiting = max(factors, key=factors.get)
        assert all(rows[ids] == count for ids, count in documents[limiting].items())
    else:  # every document of every source at least once; the smaller source repeated
        assert min(factors.values()) == pytest.approx(1.0) and factors["docs"] > 1.5
        assert all(rows[ids] >= count for source in documents.values() for ids, count in source.items())
        assert max(rows.values()) >= 2
    assert validate_output(str(out)).ok


@pytest.mark.slow
def test_total_tokens_budget_with_a_tiny_weight(corpus, mistral_tokenizer_dir, tmp_path):
    files, source_of, _ = corpus
    out = tmp_path / "out"
    budget = 400_000
    mix = {"weights": {"code": 98, "docs": 2}, "total_tokens": budget}
    manifest = run_batch(_config(files, mistral_tokenizer_dir, out, mix), IN_PROCESS, show_progress=False).manifest
    shares, _ = _measured(out, source_of)
    assert shares["docs"] == pytest.approx(0.02, abs=0.01)
    assert manifest["mix"]["tokens_out"] == pytest.approx(budget, rel=0.01)
    assert manifest["mix"]["target_weights"] == {"code": 0.98, "docs": 0.02}


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


@pytest.mark.slow
def test_packed_mix_is_identical_across_worker_counts_and_bundling(corpus, mistral_tokenizer_dir, tmp_path):
    files, _, _ = corpus
    mix = {"weights": {"code": 0.6, "docs": 0.4}, "stop_strategy": "restart"}
    first = run_batch(_config(files, mistral_tokenizer_dir, tmp_path / "a", mix, pack=True), IN_PROCESS,
                      show_progress=False).manifest
    variant = _config(files, mistral_tokenizer_dir, tmp_path / "b", mix, pack=True)
    variant = variant.replace(tokenize=variant.tokenize.__class__(batch_size=37))
    # Two worker processes, small batches, input cut into ~16 KB splits. (The number of hash groups
    # is derived from the input size, not the runner, and packing depends on it, so it stays.)
    second = run_batch(variant, ["--direct_num_workers=2"], show_progress=False, split_bytes=16_384).manifest
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != {}
    assert first["mix"] == second["mix"]
    assert first["schema"]["packed"] and first["datasets"]["mixed"]["padding_fraction"] < 0.05
    assert validate_output(str(tmp_path / "a")).ok


def test_datasets_with_different_vocabularies_are_refused(corpus, mistral_tokenizer_dir, tokenizer_dir, tmp_path):
    files, _, _ = corpus
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(mistral_tokenizer_dir),
        "datasets": [{"name": "code", "data_files": str(files["code"])},
                     {"name": "docs", "data_files": str(files["docs"]), "tokenizer": str(tokenizer_dir)}],
        "mix": {"weights": {"code": 1, "docs": 1}},
        "save": {"output_dir": str(tmp_path / "out")},
    })
    with pytest.raises(ConfigError, match="'code' .* and 'docs' .* use different vocabularies"):
        run_batch(config, IN_PROCESS, show_progress=False)
    assert not (tmp_path / "out").exists()


def test_chat_and_text_datasets_mix_with_a_loss_mask(chat_tokenizer_dir, tmp_path):
    chats = [{"messages": [{"role": "user", "content": f"question {i} " * (1 + i % 5)},
                           {"role": "assistant", "content": f"answer {i} " * (2 + i % 7)}]} for i in range(300)]
    texts = [{"text": f"plain document number {i} " * (3 + i % 11)} for i in range(300)]
    files = {"chat": write_jsonl(tmp_path / "chat.jsonl", chats), "web": write_jsonl(tmp_path / "web.jsonl", texts)}
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": n, "data_files": str(p), "content_field": "messages" if n == "chat" else "text"}
                     for n, p in files.items()],
        "chat": {"template": str(Path(__file__).parent / "chat_templates" / "chatml.jinja")},
        "mix": {"weights": {"chat": 0.5, "web": 0.5}, "stop_strategy": "all_exhausted"},
        "pack": {"enabled": True, "seq_length": 256},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2},
    })
    manifest = run_batch(config, IN_PROCESS, show_progress=False).manifest
    assert "loss_mask" in manifest["schema"]["columns"]
    table = pq.read_table(sorted((tmp_path / "out" / "mixed").glob("*.parquet"))[0])
    masks = table.column("loss_mask").to_pylist()
    segments = table.column("segment_ids").to_pylist()
    assert all(m == 0 for row_m, row_s in zip(masks, segments) for m, s in zip(row_m, row_s) if s == 0)
    assert 0 < manifest["totals"]["trained_tokens"] < manifest["totals"]["tokens"]
    assert manifest["realized_token_share"]["chat"] == pytest.approx(0.5, abs=0.01)
    assert manifest["documents_in"] == 600 and manifest["documents_rejected"] == 0
    assert validate_output(str(tmp_path / "out")).ok


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_weighted_source_with_nothing_to_mix_fails_in_one_line(tokenizer_dir, tmp_path, workers):
    """In-process or in worker processes (whose harness logs and prints the error's traceback)."""
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": f"document {i}"} for i in range(20)])
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"text": ""}] * 5)  # all rejected (empty text), in the job
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "good", "data_files": str(good)}, {"name": "empty", "data_files": str(empty)}],
        "mix": {"weights": {"good": 1, "empty": 1}},
        "save": {"output_dir": str(tmp_path / "out")},
    }))
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet",
                          f"--direct_num_workers={workers}"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "easydata: error: mix: dataset(s) empty have a positive weight but no tokens to mix (no documents, or all"
        " rejected); give them weight 0 or fix the input"]  # (Beam's "[while running 'Mix/Plan']" left out)
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_the_numbers_of_a_mix_count_what_the_output_holds(tmp_path, tokenizer_dir, capsys):
    """A subsampled source: the summary said 11,472,412 tokens for 5,074,279 written and `stats` said
    1,675 documents for 802 used. Now written documents are the selected ones, and what was read but
    left out by the mix is counted apart (`documents_unused`), so every number is true; `documents_in` counts
    every document read (it left the unused ones out)."""
    from easydata.cli import main
    from tests.conftest import make_texts

    write_jsonl(tmp_path / "big.jsonl", ({"text": t} for t in make_texts(300, seed=1)))
    write_jsonl(tmp_path / "small.jsonl", ({"text": t} for t in make_texts(100, seed=2)))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "big", "data_files": str(tmp_path / "big.jsonl")},
                     {"name": "small", "data_files": str(tmp_path / "small.jsonl")}],
        "mix": {"weights": {"big": 0.5, "small": 0.5}},  # first_exhausted: `big` is subsampled
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}}))
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 0
    summary = capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    mixed, sources = manifest["datasets"]["mixed"], manifest["mix"]["sources"]
    selected = sum(s["documents_selected"] for s in sources.values())
    assert sources["big"]["documents_selected"] < 300 and sources["small"]["documents_selected"] == 100
    rows = pq.read_table(tmp_path / "out" / mixed["shards"][0]["path"]).num_rows
    assert mixed["documents_selected"] == selected == rows  # unpacked: one row per document used
    assert mixed["documents_unused"] == 400 - selected and mixed["documents_read"] == mixed["documents_in"] == 400
    assert mixed["documents_written"] == 400  # reached the mix (none rejected)
    assert mixed["documents_in"] == mixed["documents_written"] + mixed["documents_rejected"]
    assert f"mixed: {selected:,} documents (0 rejected; {400 - selected:,} read but left out by the mix)" in summary
    assert f"total: 400 documents read, {mixed['tokens']:,} tokens written" in summary
    assert main(["stats", str(tmp_path / "out")]) == 0
    stats = capsys.readouterr().out
    assert f"documents read 400, rejected 0, left out by the mix {400 - selected:,})" in stats
    assert stats.splitlines()[2].split()[:2] == ["mixed", f"{selected:,}"]  # the output's documents
    assert validate_output(str(tmp_path / "out")).ok
