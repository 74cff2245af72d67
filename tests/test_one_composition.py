"""One composition of the stages between reading and the shuffle (`easydata.text.stages.DocumentStages`):
the same documents through the batch run, a stream's windows (TestStream), the dry run's estimate and the
Python API's `TokenizedShardedSource` give the same rows and counters.

Before, the four composed the stages themselves and had drifted: the dry run tokenized with a call of its
own that ignored `truncation: window` (on the first case below it estimated 3,397 tokens for a run that
wrote 3,925), and a stream counted windows as documents.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from easydata.config import PipelineConfig
from tests.conftest import make_texts, write_jsonl

pytestmark = pytest.mark.slow


def _chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question {i}: " + "why " * (i % 7)},
                         {"role": "assistant", "content": f"answer {i} " + "because " * (i % 11)}]}


def _records(chat: bool) -> list[dict]:
    texts = make_texts(40, seed=11, min_words=5, max_words=120)
    records: list[dict] = [{"text": t} for t in texts] + [{"text": ""}]  # one rejected (empty)
    if chat:
        records += [_chat(i) for i in range(12)] + [{"messages": [{"role": "user", "content": "no answer"}]}]
    return records


def _config(tmp_path: Path, tokenizer_dir: Path, records: list[dict], output: str, tokenize: dict,
            chat: bool, stream: bool = False) -> PipelineConfig:
    source = {"pubsub_subscription": "projects/p/subscriptions/s"} if stream else {
        "data_files": str(write_jsonl(tmp_path / "data.jsonl", records))}
    body = {"default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "live", **source}],
            "tokenize": tokenize, "save": {"output_dir": str(tmp_path / output)}}
    if chat:
        body["chat"] = {"template": str(Path(__file__).parent / "chat_templates" / "chatml.jinja"),
                        "assistant_only_loss": True}
    if stream:
        body["streaming"] = {"window_seconds": 3600}
    return PipelineConfig.from_dict(body)


def _rows(output: Path) -> collections.Counter:
    """The output's rows as a multiset of (input_ids, loss_mask or None): their order is the shuffle's."""
    found: collections.Counter = collections.Counter()
    for path in sorted(output.rglob("*.parquet")):
        table = pq.read_table(path)
        masks = table.column("loss_mask").to_pylist() if "loss_mask" in table.column_names else [None] * table.num_rows
        found.update((tuple(ids), tuple(m) if m else None) for ids, m in zip(table.column("input_ids").to_pylist(), masks))
    return found


def _counters(manifest: dict) -> tuple[int, int, int, int]:
    return (manifest["documents_in"], manifest["documents_written"], manifest["documents_rejected"],
            manifest["totals"]["tokens"])


@pytest.mark.parametrize("tokenize, chat", [
    ({"max_length": 24, "truncation": "window", "stride": 4}, True),
    ({"max_length": 40, "truncation": "truncate"}, True),
    ({}, False),
], ids=["window-chat", "truncate-chat", "plain"])
def test_batch_stream_and_dry_run_give_the_same_rows_and_counters(tmp_path, chat_tokenizer_dir, tokenize, chat):
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from beam_pipelines.batch import run_batch
    from easydata.run.dry_run import plan_report
    from tests.test_streaming import run_test_stream

    records = _records(chat)
    batch_config = _config(tmp_path, chat_tokenizer_dir, records, "batch", tokenize, chat)
    batch = run_batch(batch_config, ["--direct_num_workers=1"], show_progress=False).manifest
    stream_config = _config(tmp_path, chat_tokenizer_dir, records, "stream", tokenize, chat, stream=True)
    messages = [TimestampedValue(PubsubMessage(json.dumps(r).encode(), {}, message_id=f"m{i:04d}"), i)
                for i, r in enumerate(records)]
    stream = run_test_stream(stream_config, TestStream().add_elements(messages).advance_watermark_to_infinity())
    assert _rows(tmp_path / "stream") == _rows(tmp_path / "batch")
    assert _counters(stream) == _counters(batch)
    rejected = 2 if chat else 1
    assert _counters(batch)[:3] == (len(records), len(records) - rejected, rejected)
    # The dry run reads this small dataset whole: its estimate is what the run wrote, token for token.
    report = plan_report(batch_config)
    assert report.datasets[0].estimated_tokens == batch["totals"]["tokens"]


@pytest.mark.parametrize("max_length", [None, 17])
def test_the_python_api_source_gives_the_batch_runs_rows(tmp_path, chat_tokenizer_dir, max_length):
    from beam_pipelines.batch import run_batch
    from easydata.compat.transforms import TokenizedShardedSource
    from easydata.reader.sharded_sources import JsonShardedSource

    records = _records(chat=False)
    tokenize = {"max_length": max_length, "truncation": "truncate"} if max_length else {}
    config = _config(tmp_path, chat_tokenizer_dir, records, "batch", tokenize, chat=False)
    run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    source = TokenizedShardedSource(JsonShardedSource(str(tmp_path / "data.jsonl")), str(chat_tokenizer_dir),
                                    max_length=max_length, engine="hf", batch_size=7)
    api = collections.Counter((tuple(e["input_ids"]), None) for shard in source.shard_names
                              for e in source.open_shard(shard) if e["text"])
    assert api == _rows(tmp_path / "batch") and sum(api.values()) == len(records) - 1
