"""`easydata run --dry-run` / `Pipeline.plan()`: the plan without the run (Beam used to swallow the
flag and run the whole job), and quiet Python API calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easydata import ConfigError, Pipeline, PipelineConfig
from easydata.run.dry_run import plan_report
from tests.conftest import make_texts, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def _config(tmp_path: Path, tokenizer_dir: Path, **save) -> dict:
    write_jsonl(tmp_path / "in" / "a.jsonl", ({"text": t} for t in make_texts(300, min_words=20)))
    write_jsonl(tmp_path / "in" / "b.jsonl", ({"text": t} for t in make_texts(100, seed=3)))
    return {"default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "web", "data_files": str(tmp_path / "in" / "a.jsonl")},
                         {"name": "more", "data_files": str(tmp_path / "in" / "b.jsonl")}],
            "mix": {"weights": {"web": 3, "more": 1}}, "pack": {"enabled": True, "seq_length": 256},
            "save": {"output_dir": str(tmp_path / "out"), **save}}


def test_cli_dry_run_reports_and_writes_nothing(tmp_path, tokenizer_dir) -> None:
    (tmp_path / "job.json").write_text(json.dumps(_config(tmp_path, tokenizer_dir)))
    done = subprocess.run([sys.executable, "-m", "easydata", "run", "job.json", "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out").exists()  # no output, no lock, no staging
    text = done.stdout
    assert "dataset 'web': 1 file," in text and "dataset 'more': 1 file," in text
    assert "mix (shares of output tokens): web 3, more 1" in text and "packed rows of 256 tokens" in text
    assert "mixed/: about 1 shard\n" in text and "estimate: about" in text and done.stderr == ""


def test_plan_estimates_tokens_close_to_the_run(tmp_path, tokenizer_dir) -> None:
    config = PipelineConfig.from_dict(_config(tmp_path, tokenizer_dir))
    report = plan_report(config)
    assert [d.name for d in report.datasets] == ["web", "more"] and report.outputs == {"mixed": 1}
    result = Pipeline(config.replace(mix=None)).run(["--direct_num_workers=1"])
    actual = sum(result.manifest["datasets"][name]["tokens"] - result.manifest["datasets"][name]["padding_tokens"]
                 for name in ("web", "more"))
    assert abs(report.estimated_tokens - actual) / actual < 0.25  # a sample-based estimate
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / "x").write_text("taken")
    blocked = plan_report(config.replace(save=config.save.__class__(output_dir=str(tmp_path / "out2"))))
    assert blocked.output_exists and "the run would stop" in blocked.to_text()


def test_pipeline_plan_and_config_errors(tmp_path, tokenizer_dir) -> None:
    config = PipelineConfig.from_dict(_config(tmp_path, tokenizer_dir))
    plan = Pipeline(config).source().tokenize().pack().plan()  # the job the stages describe: not mixed
    assert plan.packed and set(plan.outputs) == {"web", "more"}
    with pytest.raises(ConfigError, match="no tokenizer"):
        plan_report(PipelineConfig(datasets=[{"data_files": str(tmp_path / "in" / "a.jsonl")}]))


@pytest.mark.slow
def test_python_api_prints_nothing_but_its_own(tmp_path, tokenizer_dir) -> None:
    """Beam's import warnings (GCS, apitools) and its workers' start-up notes stay off the terminal."""
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(50)))
    script = ("from easydata import tokenize_and_save\n"
              f"tokenize_and_save({str(tmp_path / 'a.jsonl')!r}, {str(tokenizer_dir)!r}, output_dir={str(tmp_path / 'o')!r})\n"
              "import logging; logging.getLogger('mine').warning('still mine')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr.strip() == "still mine"  # the caller's own logging still works


def _every_format(root: Path) -> list[dict]:
    """The same documents (sorted by length: a file's first records are not like the rest) in every input
    format, and chat records; one dataset each."""
    import gzip

    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    import zstandard

    texts = sorted(make_texts(4000, seed=7, min_words=1, max_words=400), key=len)
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    root.mkdir(parents=True)
    (root / "plain.jsonl").write_bytes(lines)
    (root / "gz.jsonl.gz").write_bytes(gzip.compress(lines))
    (root / "zst.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    table = pa.table({"text": texts})
    pq.write_table(table, root / "small.parquet", compression="zstd", row_group_size=250)  # ~3x smaller than text
    with pa.OSFile(str(root / "file.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=250)
    pcsv.write_csv(table, root / "table.csv")
    (root / "lines.txt").write_text("\n".join(texts) + "\n")
    write_jsonl(root / "chat.jsonl", ({"messages": [{"role": "user", "content": t[: len(t) // 3]},
                                                    {"role": "assistant", "content": t}]} for t in texts[::2]))
    datasets = [{"name": p.name.split(".")[0], "data_files": str(p)} for p in sorted(root.iterdir())]
    for ds in datasets:
        if ds["name"] == "lines":
            ds["sample_by"] = "line"
    return datasets


@pytest.mark.slow
def test_dry_run_estimates_every_format_within_a_quarter_of_the_run(tmp_path, chat_tokenizer_dir) -> None:
    """Before: no estimate for chat data, small zstd Parquet ~3x low (text bytes per token times file bytes),
    JSONL 19% high (JSON's own bytes counted as text)."""
    chatml = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir), "datasets": _every_format(tmp_path / "in"),
        "chat": {"template": chatml}, "pack": {"enabled": False}, "save": {"output_dir": str(tmp_path / "out")}})
    report = plan_report(config)
    estimated = {d.name: d.estimated_tokens for d in report.datasets}
    assert report.estimated_seconds is not None and report.estimated_seconds > 0
    result = Pipeline(config).run(["--direct_num_workers=1"])
    actual = {name: entry["tokens"] for name, entry in result.manifest["datasets"].items()}
    assert set(estimated) == set(actual) == {"chat", "file", "gz", "lines", "plain", "small", "table", "zst"}
    errors = {name: estimated[name] / actual[name] - 1 for name in actual}
    assert all(abs(e) <= 0.25 for e in errors.values()), errors
