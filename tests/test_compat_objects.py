"""EasyData's object API (`easydata.compat`): file sources, `datasets` wrappers, transforms, the
in-memory mixer (property-tested), the scheduler and `AsyncDataLoader`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from easydata import (AsyncDataLoader, ChatTemplateTransform, CsvShardedSource, HFDatasetShardedSource,
                      JsonShardedSource, MixedShardedSource, ParquetShardedSource, TextShardedSource,
                      TokenizedShardedSource, TransformedShardedSource, WeightSchedulePoint, WeightScheduler,
                      block_mixture_interleave)
from easydata.reader.async_loader import collate_rows
from easydata.text.tokenizer import load_tokenizer
from tests.conftest import make_texts, write_jsonl


def test_file_sources_read_rows_and_resume_at_a_row(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "i": i} for i, t in enumerate(make_texts(30))))
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps({"text": "x", "i": 100 + i}) + "\n" for i in range(5)))
    (tmp_path / "c.json").write_text(json.dumps([{"text": "y", "i": 200}]))
    source = JsonShardedSource(str(tmp_path / "*.json*"))
    assert source.num_shards() == 3
    assert [r["i"] for r in source.open_shard_at_row(source.shard_names[0], 27)] == [27, 28, 29]
    assert sorted(r["i"] for r in source) == list(range(30)) + list(range(100, 105)) + [200]
    (tmp_path / "d.csv").write_text('text,n\n"a, quoted",1\nb,2\n')
    assert list(CsvShardedSource(str(tmp_path / "d.csv"))) == [{"text": "a, quoted", "n": "1"}, {"text": "b", "n": "2"}]
    (tmp_path / "e.txt").write_text("one\ntwo\n")
    assert list(TextShardedSource(str(tmp_path / "e.txt"))) == [{"text": "one"}, {"text": "two"}]
    pq.write_table(pa.table({"text": ["p", "q", "r"]}), tmp_path / "f.parquet", row_group_size=1)
    parquet = ParquetShardedSource(str(tmp_path / "f.parquet"))
    assert [r["text"] for r in parquet.open_shard_at_row(parquet.shard_names[0], 1)] == ["q", "r"]
    (tmp_path / "bad.jsonl").write_text('{"text": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON line"):
        list(JsonShardedSource(str(tmp_path / "bad.jsonl")))


def test_datasets_objects_as_sources() -> None:
    from datasets import Dataset

    dataset = Dataset.from_list([{"text": t} for t in make_texts(10)])
    source = HFDatasetShardedSource(dataset)
    assert len(source) == 10 and [r["text"] for r in source] == dataset["text"]
    assert [r["text"] for r in source.open_shard_at_row(source.shard_names[0], 8)] == dataset["text"][8:]
    streamed = HFDatasetShardedSource(dataset.to_iterable_dataset(num_shards=2))
    assert streamed.num_shards() == 2 and sorted(r["text"] for r in streamed) == sorted(dataset["text"])


def test_transforms_chain_and_tokenize(tmp_path: Path, tokenizer_dir: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "keep": i % 2 == 0} for i, t in enumerate(make_texts(20))))
    source = JsonShardedSource(str(tmp_path / "a.jsonl")).filter(lambda r: r["keep"]).rename_fields({"keep": "k"})
    rows = list(TokenizedShardedSource(source, str(tokenizer_dir), max_length=8, batch_size=3))
    handle = load_tokenizer(str(tokenizer_dir))
    texts = make_texts(20)[::2]
    flat, offsets = handle.encode_batch(texts, add_bos=None, add_eos=True, max_length=8)
    assert len(rows) == 10 and all(r["k"] for r in rows)
    assert [r["input_ids"] for r in rows] == [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(10)]


def test_chat_template_transform_from_a_path(tmp_path: Path, chat_tokenizer_dir: Path) -> None:
    write_jsonl(tmp_path / "c.jsonl", [{"messages": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}])
    chatml = (Path(__file__).parent / "chat_templates" / "chatml.jinja").read_text()
    rows = list(TransformedShardedSource(JsonShardedSource(str(tmp_path / "c.jsonl")),
                                         ChatTemplateTransform(str(chat_tokenizer_dir), chat_template=chatml)))
    assert rows[0]["text"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
    assert rows[0]["messages"]  # the other fields are kept
    with pytest.raises(ValueError, match="has no chat_template; pass chat_template="):
        ChatTemplateTransform(str(chat_tokenizer_dir))
    # the pipeline's `chat.template_kwargs`, as `apply_chat_template(**kwargs)` takes them
    dated = ChatTemplateTransform(str(chat_tokenizer_dir), chat_template="{{ date_string }}|" + chatml,
                                  template_kwargs={"date_string": "01 Jan 2025"})
    row = dated({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    assert row["text"].startswith("01 Jan 2025|<|im_start|>user")
    with pytest.raises(ValueError, match="template_kwargs must not set messages"):  # not a failure per record
        ChatTemplateTransform(str(chat_tokenizer_dir), chat_template=chatml, template_kwargs={"messages": []})
    # a CSV file's messages, kept as JSON text; a `system` field beside them (LLaMA-Factory, Anthropic)
    transform = ChatTemplateTransform(str(chat_tokenizer_dir), chat_template=chatml)
    row = transform({"messages": '[{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]', "system": "Be."})
    assert row["text"] == "<|im_start|>system\nBe.<|im_end|>\n" + rows[0]["text"]


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(0, 20), min_size=2, max_size=4).filter(lambda w: sum(w) > 0),
       lengths=st.lists(st.integers(1, 30), min_size=4, max_size=4), seed=st.integers(0, 5))
def test_mixed_source_tracks_token_shares(weights: list[int], lengths: list[int], seed: int) -> None:
    """Every prefix of the mix is within one document of each source's share of tokens."""
    names = [f"s{i}" for i in range(len(weights))]
    sources = {n: [{"input_ids": [i] * lengths[i], "src": n}] * 200 for i, n in enumerate(names)}
    mixed = MixedShardedSource(sources, dict(zip(names, weights)), seed=seed, stop_strategy="first_exhausted")
    taken, total = dict.fromkeys(names, 0), 0
    share = {n: w / sum(weights) for n, w in zip(names, weights)}
    for step, row in zip(range(300), mixed):
        taken[row["src"]] += len(row["input_ids"])
        total += len(row["input_ids"])
        for i, n in enumerate(names):
            assert taken[n] - share[n] * total <= lengths[i] + 1e-9  # never a document ahead of its share
    assert all(taken[n] == 0 for n, w in zip(names, weights) if w == 0)


def test_stop_strategies_and_the_list_form() -> None:
    small, big = [{"src": "a"}] * 3, [{"src": "b"}] * 10
    first = list(block_mixture_interleave([small, big], {"a": 0.5, "b": 0.5}, stop="first_exhausted"))
    assert [r["src"] for r in first].count("a") == 3 and len(first) <= 7
    every = list(block_mixture_interleave({"a": small, "b": big}, {"a": 0.5, "b": 0.5}, stop="all_exhausted"))
    assert [r["src"] for r in every].count("b") == 10  # `a` restarted until `b` ran out too
    with pytest.raises(ValueError, match="stop_strategy"):
        MixedShardedSource({"a": small}, stop_strategy="never")


def test_scheduled_mix_follows_the_scheduler() -> None:
    scheduler = WeightScheduler([WeightSchedulePoint(step=0, weights={"a": 1.0, "b": 0.0}),
                                 WeightSchedulePoint(step=100, weights={"a": 0.0, "b": 1.0})], interpolation="step")
    mixed = MixedShardedSource({"a": [{"src": "a"}] * 1000, "b": [{"src": "b"}] * 1000}, weight_scheduler=scheduler)
    rows = [r["src"] for _, r in zip(range(200), mixed)]
    assert rows[:100] == ["a"] * 100 and rows[150:] == ["b"] * 50


def test_async_loader_pads_shuffles_and_drops(tmp_path: Path) -> None:
    rows = [{"input_ids": list(range(n + 1)), "attention_mask": [1] * (n + 1), "name": f"r{n}"} for n in range(10)]
    loader = AsyncDataLoader(source=rows, batch_size=4)
    batches = list(loader)
    assert [b["input_ids"].shape for b in batches] == [(4, 4), (4, 8), (2, 10)]
    assert batches[0]["attention_mask"][0].tolist() == [1, 0, 0, 0] and batches[0]["name"] == ["r0", "r1", "r2", "r3"]
    assert len(list(AsyncDataLoader(rows, batch_size=4, drop_last=True))) == 2
    shuffled = [n for b in AsyncDataLoader(rows, batch_size=5, shuffle_buffer_size=4, seed=1) for n in b["name"]]
    again = [n for b in AsyncDataLoader(rows, batch_size=5, shuffle_buffer_size=4, seed=1) for n in b["name"]]
    assert shuffled == again and sorted(shuffled) == sorted(r["name"] for r in rows) and shuffled != [r["name"] for r in rows]
    assert np.asarray(next(iter(AsyncDataLoader(rows, prefetch_enabled=False)))["input_ids"]).shape == (8, 8)


def test_collate_keeps_a_key_only_later_rows_have() -> None:
    """`collate_rows` took its keys from the first row: a mix of sources, one with a `loss_mask`, lost it
    whenever a batch began with a row of the other."""
    batch = collate_rows([{"input_ids": [1, 2]}, {"input_ids": [3], "loss_mask": [0], "score": 0.5}])
    assert batch["input_ids"].tolist() == [[1, 2], [3, 0]]
    assert batch["loss_mask"] == [None, [0]] and batch["score"] == [None, 0.5]
    assert list(batch) == ["input_ids", "loss_mask", "score"]
