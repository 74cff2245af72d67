"""Chat data through the real pipeline: dead letters, loss masks in every format, masks survive packing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from tests.conftest import trained_runs, write_jsonl

pytestmark = pytest.mark.slow

TEMPLATE = Path(__file__).parent / "chat_templates" / "chatml.jinja"


def _conversations(n: int) -> list[dict]:
    records = []
    for i in range(n):
        turns = [{"role": "user", "content": f"Question {i}: how many apples in basket {i}?"},
                 {"role": "assistant", "content": f"There are {i} apples."},
                 {"role": "user", "content": "And pears?"},
                 {"role": "assistant", "content": f"No pears in basket {i}."}]
        if i % 2:  # ShareGPT form for every other record
            turns = [{"from": "human" if t["role"] == "user" else "gpt", "value": t["content"]} for t in turns]
        records.append({"messages": turns, "id": i})
    return records


@pytest.mark.slow
def test_cli_packs_chat_data_and_masks_survive(tmp_path, chat_tokenizer_dir):
    records = _conversations(40)
    bad = [{"messages": [{"role": "user", "content": "no answer"}]},
           {"messages": [{"role": "narrator", "content": "x"}, {"role": "assistant", "content": "y"}]},
           {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], "id": -1},
           # valid at read time, refused by the chat stage (reserved characters)
           {"messages": [{"role": "user", "content": "\ue000"}, {"role": "assistant", "content": "b"}]}]
    write_jsonl(tmp_path / "chat.jsonl", records + bad)
    config = tmp_path / "chat.yaml"
    config.write_text(json.dumps({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "sft", "data_files": str(tmp_path / "chat.jsonl"), "content_field": "messages"}],
        "chat": {"template": str(TEMPLATE), "assistant_only_loss": True},
        "tokenize": {"add_eos": False},
        "pack": {"enabled": True, "seq_length": 128, "strategy": "best_fit"},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2},
    }))
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet"], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    info = manifest["datasets"]["sft"]
    assert (info["documents_in"], info["documents_written"], info["documents_rejected"]) == (44, 41, 3)
    reasons = sorted(json.loads(line)["reason"] for f in (out / "rejected").rglob("*.jsonl")
                     for line in f.read_text().splitlines())
    assert reasons == ["conversation has no assistant message", "message 0 has unknown role 'narrator'",
                       "message content holds reserved private-use characters U+E000/U+E001"]
    assert manifest["chat"]["sft"]["template_hash"].startswith("sha256:")

    tok = Tokenizer.from_file(str(chat_tokenizer_dir / "tokenizer.json"))
    table = pq.read_table(sorted((out / "sft").glob("*.parquet")))
    ids = np.array(table.column("input_ids").to_pylist())
    seg = np.array(table.column("segment_ids").to_pylist())
    mask = np.array(table.column("loss_mask").to_pylist())
    assert ids.shape[1] == 128 and np.all(mask[seg == 0] == 0)
    decoded = []
    for row_ids, row_seg, row_mask in zip(ids, seg, mask):
        for k in range(1, row_seg.max() + 1):
            in_segment = row_seg == k
            decoded.extend(tok.decode(r, skip_special_tokens=False).strip()
                           for r in trained_runs(row_ids[in_segment], row_mask[in_segment]))
    expected = sorted(t for i in range(40) for t in (f"There are {i} apples.<|im_end|>",
                                                     f"No pears in basket {i}.<|im_end|>"))
    expected.append("a<|im_end|>")  # the system + assistant record is valid
    assert sorted(decoded) == sorted(expected)
    assert info["trained_tokens"] == int(mask.sum())
    check = subprocess.run([sys.executable, "-m", "easydata", "validate", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_text_and_chat_records_in_one_dataset(tmp_path, chat_tokenizer_dir):
    """Plain documents beside chat records train on every token; chat rows only on assistant turns."""
    from beam_pipelines.batch import run_batch
    from easydata.config import PipelineConfig
    from tests.conftest import read_shard_table

    records = _conversations(6) + [{"messages": f"plain document number {i}", "id": 100 + i} for i in range(6)]
    write_jsonl(tmp_path / "mixed.jsonl", records)
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "mix", "data_files": str(tmp_path / "mixed.jsonl"), "content_field": "messages",
                      "additional_fields": ["id"]}],
        "chat": {"template": TEMPLATE.read_text()},
        "tokenize": {"batch_size": 4},  # some batches hold only plain documents: no loss_mask column there
        "save": {"output_dir": str(tmp_path / "out"), "format": "arrow", "compression": "lz4", "num_shards": 1},
    })
    result = run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    table = read_shard_table(str(tmp_path / "out" / result.manifest["datasets"]["mix"]["shards"][0]["path"]),
                             "arrow")
    assert table.column_names[:3] == ["input_ids", "attention_mask", "loss_mask"]
    tok = Tokenizer.from_file(str(chat_tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    for row in table.to_pylist():
        if row["id"] >= 100:
            assert row["loss_mask"] == [1] * len(row["input_ids"])
        else:
            trained = [tok.decode(r, skip_special_tokens=False).strip()
                       for r in trained_runs(row["input_ids"], row["loss_mask"])]
            assert trained == [f"There are {row['id']} apples.<|im_end|>", f"No pears in basket {row['id']}.<|im_end|>"]
            assert row["input_ids"][-1] == eos and row["loss_mask"][-1] == 0  # appended EOS: not trained
    assert result.manifest["totals"]["trained_tokens"] == sum(sum(m) for m in table.column("loss_mask").to_pylist())
