"""`easydata.text.windows` (truncate / sliding windows) and its use by the tokenize stage.

Property: windows cover every token, consecutive windows overlap by exactly `stride`, window 0 plus
every later window minus its first `stride` tokens is the document; truncation equals truncating
while encoding; pieces count documents once.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.config import TokenizeStageConfig, TokenizerConfig
from easydata.io.sources import DocumentBatch
from easydata.text.stages import DocumentStages
from easydata.text.tokenizer import TokenizerHandle
from easydata.text.windows import PIECE_COLUMN, cut_documents, piece_counts, plan_windows
from tests.conftest import make_texts


def _docs(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.arange(int(offsets[-1]), dtype=np.int32), offsets


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), min_size=0, max_size=8), max_length=st.integers(1, 17),
       data=st.data())
def test_windows_cover_every_token_with_exact_overlap(lengths, max_length, data):
    stride = data.draw(st.integers(0, max_length - 1))
    ids, offsets = _docs(lengths)
    pieces = cut_documents(ids, offsets, mode="window", max_length=max_length, stride=stride)
    rows = [pieces.ids[a:b] for a, b in zip(pieces.offsets[:-1], pieces.offsets[1:])]
    assert all(len(r) <= max_length for r in rows)
    for d, length in enumerate(lengths):
        doc = ids[offsets[d]:offsets[d + 1]]
        mine = [rows[i] for i in np.flatnonzero(pieces.doc == d)]
        expected_windows = 1 if length <= max_length else 1 + -(-(length - max_length) // (max_length - stride))
        assert len(mine) == expected_windows
        rebuilt = list(mine[0]) + [t for w in mine[1:] for t in w[stride:]]
        assert rebuilt == list(doc)  # every token, in order, no gap
        for previous, window in zip(mine, mine[1:]):
            assert len(window) > stride  # the last window always brings new tokens
            assert list(previous[-stride:] if stride else []) == list(window[:stride])
        piece = pieces.piece[pieces.doc == d]
        assert piece.tolist() == ([0] if expected_windows == 1 else list(range(1, expected_windows + 1)))
    counts = piece_counts(pa.record_batch({PIECE_COLUMN: pa.array(pieces.piece)}))
    assert counts.documents == len(lengths)
    assert counts.cut_documents == sum(length > max_length for length in lengths)
    assert counts.documents + counts.continuation_rows == len(rows)


@pytest.mark.parametrize("length, max_length, stride, starts, sizes", [
    (0, 4, 1, [0], [0]),           # empty document: one empty row
    (1, 4, 1, [0], [1]),
    (4, 4, 1, [0], [4]),           # exact fit: one window
    (5, 4, 1, [0, 3], [4, 2]),     # L + 1
    (10, 4, 0, [0, 4, 8], [4, 4, 2]),
    (10, 4, 2, [0, 2, 4, 6], [4, 4, 4, 4]),
    (40, 10, 9, list(range(31)), [10] * 31),
])
def test_window_plan_edge_sizes(length, max_length, stride, starts, sizes):
    doc, start, size = plan_windows(np.array([length]), max_length, stride)
    assert start.tolist() == starts and size.tolist() == sizes and doc.tolist() == [0] * len(starts)


def test_window_arguments_are_checked():
    with pytest.raises(ValueError, match="`stride` must be in \\[0, max_length=4\\), got 4"):
        plan_windows(np.array([3]), 4, 4)
    with pytest.raises(ValueError, match="`max_length` must be positive"):
        plan_windows(np.array([3]), 0, 0)


def test_truncate_equals_truncating_while_encoding(tokenizer_dir):
    handle = TokenizerHandle(TokenizerConfig(name_or_path=str(tokenizer_dir)))
    texts = make_texts(50, seed=4, max_words=80)
    for add_bos, add_eos, max_length in [(None, True, 20), (True, True, 7), (True, False, 9), (None, False, 1)]:
        expected_ids, expected_offsets = handle.encode_batch(texts, add_bos=add_bos, add_eos=add_eos,
                                                             max_length=max_length)
        ids, offsets = handle.encode_batch(texts, add_bos=add_bos, add_eos=add_eos)
        eos = handle.eos_token_id if add_eos else None
        pieces = cut_documents(ids, offsets, mode="truncate", max_length=max_length, eos=eos)
        assert pieces.offsets.tolist() == expected_offsets.tolist()
        assert pieces.ids.tolist() == expected_ids.tolist()
        assert pieces.piece.tolist() == (np.diff(offsets) > max_length).astype(int).tolist()


def test_loss_mask_is_cut_with_the_ids():
    ids, offsets = _docs([5, 2])
    mask = np.array([1, 1, 0, 1, 1, 1, 0], dtype=np.int32)
    windows = cut_documents(ids, offsets, mode="window", max_length=3, stride=1, mask=mask)
    assert windows.mask.tolist() == [1, 1, 0, 0, 1, 1, 1, 0]
    truncated = cut_documents(ids, offsets, mode="truncate", max_length=3, eos=99, mask=mask)
    assert truncated.ids.tolist() == [0, 1, 99, 5, 6] and truncated.mask.tolist() == [1, 1, 0, 1, 0]


def test_tokenize_stage_emits_one_row_per_window_with_document_fields(tokenizer_dir):
    handle = TokenizerHandle(TokenizerConfig(name_or_path=str(tokenizer_dir)))
    texts = ["short", " ".join(make_texts(1, seed=9, min_words=60, max_words=60))]
    batch = DocumentBatch(dataset="web", keys=["a.jsonl@0", "a.jsonl@7"], texts=texts, fields={"url": ["u0", "u1"]})
    config = TokenizeStageConfig(max_length=16, truncation="window", stride=4)
    staged = DocumentStages(handle, config, seed=1).process(batch)
    rows, stats = staged.rows, staged.stats
    full_ids, _ = handle.encode_batch(texts[1:], add_bos=None, add_eos=True)
    keys = rows.column("__key__").to_pylist()
    assert keys[:3] == ["a.jsonl@0", "a.jsonl@7", "a.jsonl@7#w2"]
    assert rows.column("url").to_pylist() == ["u0"] + ["u1"] * (len(keys) - 1)
    assert rows.column(PIECE_COLUMN).to_pylist() == [0] + list(range(1, len(keys)))
    windows = rows.column("input_ids").to_pylist()[1:]
    assert windows[0] + [t for w in windows[1:] for t in w[4:]] == full_ids.tolist()
    assert windows[-1][-1] == handle.eos_token_id
    assert stats.tokens == sum(map(len, rows.column("input_ids").to_pylist()))
    assert len(set(rows.column("__hash__").to_pylist())) == len(keys)  # windows spread over the shuffle


def test_mix_selects_a_windowed_document_whole():
    """`easydata.ops.mixing.select_batch`: windows share their document's selection bucket, so the mix keeps
    or drops (or repeats) every window of a document together."""
    from easydata.ops.mixing import plan_mix, select_batch, selection_buckets, token_histogram
    from easydata.ops.splits import document_keys

    keys = [k for i in range(300) for k in (f"a.jsonl@{i}", f"a.jsonl@{i}#w2")]
    lengths = np.array([8, 3] * 300)
    batch = pa.record_batch({
        "input_ids": pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)),
                                              pa.array(np.zeros(int(lengths.sum())), pa.int32())),
        "__key__": pa.array(keys), "__hash__": pa.array(np.arange(600, dtype=np.uint64)),
        PIECE_COLUMN: pa.array([1, 2] * 300, pa.int32())})
    histogram = token_histogram(selection_buckets(0, "web", document_keys(keys)), lengths)
    other = np.zeros_like(histogram)
    other[0] = int(lengths.sum())
    plan = plan_mix({"web": histogram, "other": other}, {"web": 0.3, "other": 0.7}, stop_strategy="first_exhausted")
    rows, stats = select_batch(batch, "web", 0, plan.sources["web"])
    kept = [k.split("/", 1)[1].rsplit("#", 1)[0] for k in rows.column("__key__").to_pylist()]
    documents = {k.split("#w")[0] for k in kept}
    assert 0 < len(documents) < 300 and stats["mix_documents"] == 300
    assert sorted(kept) == sorted(k for d in documents for k in (d, f"{d}#w2"))


@pytest.mark.parametrize("flags, message", [
    (["--stride", "8"], "--stride needs --max-length (the window length; the stride is the windows' overlap)"),
    # `--seq-length` without `--pack` wrote unpacked rows of every document's length without a word
    (["--seq-length", "512"], "--seq-length needs --pack (it is the packed rows' length; without --pack each row is"
                              " one document)"),
])
def test_cli_flags_that_need_another(tmp_path, capsys, flags, message):
    from easydata.cli import main

    code = main(["tokenize", "--data-files", str(tmp_path / "a.jsonl"), "--tokenizer", "t", "--output",
                 str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"easydata: error: {message}"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("truncation, packed", [("window", True), ("truncate", False)])
def test_pipeline_counts_documents_not_windows(tmp_path, tokenizer_dir, truncation, packed):
    from tokenizers import Tokenizer

    from beam_pipelines.batch import run_batch
    from easydata.config import PipelineConfig
    from easydata.tools.validate import validate_output
    from tests.conftest import write_jsonl

    texts = make_texts(120, seed=13, max_words=100)
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in texts))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}],
        "tokenize": {"max_length": 32, "truncation": truncation, **({"stride": 8} if truncation == "window" else {})},
        "pack": {"enabled": packed, "seq_length": 32, "strategy": "best_fit"},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2}})
    entry = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest["datasets"]["web"]
    assert validate_output(str(tmp_path / "out")).ok
    lengths = np.array([len(e.ids) + 1 for e in Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
                        .encode_batch(texts)])
    long = lengths > 32
    assert entry["documents_written"] == entry["documents_in"] == 120
    if truncation == "truncate":
        assert entry["truncated_documents"] == int(long.sum()) and entry["rows"] == 120
        assert entry["tokens"] == int(np.minimum(lengths, 32).sum())
        assert entry["truncated_tokens"] == int((lengths - 32)[long].sum())  # the tails not written
    else:
        windows = np.where(long, 1 + -(-(lengths - 32) // 24), 1)
        assert entry["windowed_documents"] == int(long.sum())
        assert entry["extra_windows"] == int(windows.sum()) - 120 and entry["segments"] == int(windows.sum())
        assert entry["tokens"] == int(lengths.sum() + 8 * (windows - 1).sum())  # overlaps are repeated
