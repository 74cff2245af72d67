"""One bad record costs only itself: values no Arrow column or UTF-8 text can hold (a lone UTF-16
surrogate from a JSON `\\ud800` escape, an integer of 4,301 digits or outside int64) become dead letters,
in the content, in an additional field and in chat messages, and every other record is written.

Before: a lone surrogate killed the whole job (and every rerun) with a 346-line traceback; a huge
integer dropped the rest of its split (990 good documents) as one rejection while `validate` passed.
Real CLI runs on real files.
"""

from __future__ import annotations

import pytest
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import make_texts

pytestmark = pytest.mark.slow

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _run(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet", "--direct_num_workers=1"],
                          capture_output=True, text=True, timeout=600)


def test_bad_values_cost_only_their_own_record(tmp_path: Path, chat_tokenizer_dir: Path) -> None:
    texts = make_texts(2000, seed=5)
    web = [json.dumps({"text": t, "n": i, "src": "ok"}) for i, t in enumerate(texts)]
    bad = {
        100: '{"text": "a lone \\ud800 surrogate", "n": 1, "src": "x"}',
        200: '{"text": "fine text", "n": 1, "src": "\\udfff"}',
        300: '{"text": "big", "n": ' + "9" * 4301 + ', "src": "x"}',
        1500: json.dumps({"text": "overflow after many small ints", "n": 2**64, "src": "x"}),
        1600: json.dumps({"text": "negative overflow", "n": -2**63 - 1, "src": "x"}),
    }
    for index, line in bad.items():
        web[index] = line
    (tmp_path / "web.jsonl").write_text("\n".join(web) + "\n")
    chats = [json.dumps({"messages": [{"role": "user", "content": f"q {t}"}, {"role": "assistant", "content": t}]})
             for t in texts[:200]]
    chats[50] = '{"messages": [{"role": "user", "content": "hi \\ud83d"}, {"role": "assistant", "content": "x"}]}'
    chats[60] = '{"messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}, {"role": "assistant", "content": "y"}]}'
    (tmp_path / "chat.jsonl").write_text("\n".join(chats) + "\n")
    (tmp_path / "chatml.jinja").write_text(CHATML)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(tmp_path / "web.jsonl"), "additional_fields": ["n", "src"]},
                     {"name": "chat", "data_files": str(tmp_path / "chat.jsonl")}],
        "chat": {"template": str(tmp_path / "chatml.jinja")},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2}}))
    for attempt in range(2):  # and a rerun (with overwrite) is not stopped by them either
        done = _run(config)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        config.write_text(config.read_text().replace('"num_shards": 2}', '"num_shards": 2, "overwrite": true}'))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    web_entry, chat_entry = manifest["datasets"]["web"], manifest["datasets"]["chat"]
    assert (web_entry["documents_in"], web_entry["documents_written"], web_entry["documents_rejected"]) == (2000, 1995, 5)
    assert (chat_entry["documents_in"], chat_entry["documents_written"], chat_entry["documents_rejected"]) == (200, 199, 1)
    reasons = [json.loads(line)["reason"] for f in sorted((tmp_path / "out" / "rejected").rglob("*.jsonl"))
               for line in f.read_text().splitlines()]
    assert sum("lone UTF-16 surrogate" in r for r in reasons) == 3
    assert sum("int64 range" in r for r in reasons) == 2 and sum("4300 digits" in r for r in reasons) == 1
    rows = [r for shard in web_entry["shards"] for r in pq.read_table(tmp_path / "out" / shard["path"]).to_pylist()]
    assert sorted(r["n"] for r in rows) == sorted(set(range(2000)) - set(bad))  # every good record, once
    checked = subprocess.run([sys.executable, "-m", "easydata", "validate", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_special_files_are_skipped_with_a_warning_never_read(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: a FIFO in the glob hung forever at '100.0% of input read'; `/dev/zero` hung at 0%."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in make_texts(30)) + "\n")
    os.mkfifo(data / "pipe.jsonl")  # nobody ever writes to it: reading it would block forever
    (data / "zero.jsonl").symlink_to("/dev/zero")  # never ends
    done = subprocess.run([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(data / "*.jsonl"),
                           "--data-files", "/dev/zero", "--tokenizer", str(tokenizer_dir), "--output",
                           str(tmp_path / "out"), "--quiet", "--direct_num_workers=1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "special file(s)" in line]
    assert len(warnings) == 1 and "skipping 3 special file(s)" in warnings[0], done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["documents_in"] == 30 and manifest["documents_written"] == 30
    only = subprocess.run([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(data / "pipe.jsonl"),
                           "--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "out2"), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert only.returncode == 2 and only.stderr.strip().splitlines()[-1] == (
        f"easydata: error: data_files match only links that lead to no file or special files, e.g."
        f" '{data / 'pipe.jsonl'}'")


_CHANGE_INPUT = """
import logging, sys
logging.disable(logging.WARNING)  # Beam's import-time warnings (the CLI itself imports Beam with them hidden)
from pathlib import Path
when, path, *args = sys.argv[1:]

def change():
    p = Path(path)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])  # truncated (and so no longer what was planned)

if when == "after-planning":
    import beam_pipelines.batch as batch
    plan = batch.plan_run
    def planned_then_changed(*a, **k):
        result = plan(*a, **k)
        change()
        return result
    batch.plan_run = planned_then_changed
else:  # after every split was read, just before the commit
    import easydata.run.finalize as finalize
    owner = finalize.check_owner
    def changed_before_commit(*a, **k):
        change()
        return owner(*a, **k)
    finalize.check_owner = changed_before_commit
from easydata.cli import main
sys.exit(main(args))
"""


def test_an_input_that_changes_during_a_run_fails_it_in_one_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: truncating one input and appending to another mid-run gave exit 0 and an output matching
    neither version of the files."""

    for when in ("after-planning", "before-commit"):
        data = tmp_path / when
        data.mkdir()
        (data / "a.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in make_texts(300)) + "\n")
        (data / "b.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in make_texts(300, seed=9)) + "\n")
        done = subprocess.run([sys.executable, "-c", _CHANGE_INPUT, when, str(data / "b.jsonl"), "tokenize",
                               "--data-files", str(data / "*.jsonl"), "--tokenizer", str(tokenizer_dir), "--output",
                               str(tmp_path / f"out-{when}"), "--quiet", "--direct_num_workers=1"],
                              capture_output=True, text=True, timeout=300)
        err = done.stderr.strip()
        assert done.returncode == 2, (when, err[-3000:])
        assert len(err.splitlines()) <= 2 and "Traceback" not in err, err
        assert f"input '{data / 'b.jsonl'}' changed during the run (size=" in err, err
        assert not (tmp_path / f"out-{when}" / "manifest.json").exists()


_READ_ALL_SPLITS = """
import json, resource, sys
from easydata.config import DatasetConfig
from easydata.io.sources import plan_splits, read_split
path, kind, sample_by = sys.argv[1:]
dataset = DatasetConfig(name="d", data_files=path, type=kind, **({"sample_by": sample_by} if sample_by else {}))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rejects, documents = [], 0
for split in plan_splits(dataset, target_bytes=32 * 2**20):
    documents += sum(len(b) for b in read_split(split, dataset, max_document_bytes=2**20, rejects=rejects))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"documents": documents, "rejects": [r.reason for r in rejects], "grown_kib": grown}))
"""


def test_a_giant_document_is_rejected_without_being_held_whole(tmp_path: Path) -> None:
    """Before: a 1 GB JSONL line peaked at 2.1 GB (an unbounded readline where a split starts inside the line),
    a 1 GB text document with `sample_by: document` at 3.3 GB. Here: 200 MB each, max_document_bytes 1 MiB."""
    giant = "x" * (200 * 2**20)
    (tmp_path / "giant.jsonl").write_text(json.dumps({"text": "small"}) + "\n" + json.dumps({"text": giant}) + "\n"
                                          + json.dumps({"text": "after"}) + "\n")
    (tmp_path / "giant.txt").write_text(giant)
    del giant
    for name, kind, sample_by, documents in [("giant.jsonl", "jsonl", "", 2), ("giant.txt", "txt", "document", 0)]:
        done = subprocess.run([sys.executable, "-c", _READ_ALL_SPLITS, str(tmp_path / name), kind, sample_by],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout)
        assert result["documents"] == documents and len(result["rejects"]) == 1, result
        assert "larger than max_document_bytes" in result["rejects"][0]
        # 6 x max_document_bytes (a JSON line may escape every character) plus buffers: far below 200 MB
        assert result["grown_kib"] < 64 * 1024, (name, result)
