"""`bin` and `npz` token files (`easydata.io.token_files`): writer/reader round trips, dtypes, and the
pipeline writing them end to end (checked with plain numpy: `np.memmap`, `np.load`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.errors import ConfigError
from easydata.io.formats import assemble_shard, iter_shard_batches, token_list_array, write_piece
from easydata.io.token_files import BinShardWriter, NpzShardWriter, TokenFileSpec, token_dtype_for
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl

IN_PROCESS = ["--direct_num_workers=1"]
BIG_VOCAB = 70_000


def _rows(lists: list[list[int]], **extra: list[list[int]]) -> pa.RecordBatch:
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in lists])]).astype(np.int64)
    columns = {"input_ids": token_list_array(np.array([t for r in lists for t in r], dtype=np.int64), offsets)}
    for name, values in extra.items():
        columns[name] = token_list_array(np.array([t for r in values for t in r], dtype=np.int64), offsets)
    return pa.record_batch(columns)


def _read_back(path: Path, fmt: str) -> dict[str, list]:
    batches = list(iter_shard_batches(str(path), fmt))
    table = pa.Table.from_batches(batches) if batches else None
    return {name: table.column(name).to_pylist() for name in table.column_names} if table is not None else {}


@pytest.mark.parametrize("ids, dtype", [([[1, 2, 3], [], [65535, 0]], "uint16"),
                                        ([[70000, 1], [2**31 - 1]], "uint32")])
def test_bin_round_trip(tmp_path, ids, dtype):
    path = tmp_path / "part-00000-of-00001.bin"
    schema = _rows(ids).schema
    writer = BinShardWriter(str(path), schema, dtype)
    writer.write(_rows(ids[:1]))
    writer.write(_rows(ids[1:]))
    assert writer.close() == len(ids)
    stream = np.memmap(path, dtype=dtype, mode="r")
    index = np.fromfile(tmp_path / "part-00000-of-00001.idx", dtype=np.int64)
    assert index.tolist() == np.concatenate([[0], np.cumsum([len(r) for r in ids])]).tolist()
    assert [stream[a:b].tolist() for a, b in zip(index[:-1], index[1:])] == ids
    assert _read_back(path, "bin")["input_ids"] == ids


def test_bin_refuses_ids_beyond_its_dtype_and_keeps_a_loss_mask(tmp_path):
    with pytest.raises(ValueError, match="does not fit uint16"):
        BinShardWriter(str(tmp_path / "a.bin"), _rows([[1]]).schema, "uint16").write(_rows([[70_000]]))
    batch = _rows([[5, 6, 7], [8]], loss_mask=[[0, 1, 1], [0]])
    writer = BinShardWriter(str(tmp_path / "b.bin"), batch.schema, "uint16")
    writer.write(batch)
    writer.close()
    assert sorted(writer.companions) == ["index", "loss_mask"]
    assert np.fromfile(tmp_path / "b.mask", dtype=np.uint8).tolist() == [0, 1, 1, 0]
    assert _read_back(tmp_path / "b.bin", "bin")["loss_mask"] == [[0, 1, 1], [0]]
    assert token_dtype_for(65_536) == "uint16" and token_dtype_for(65_537) == "uint32"


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("width", [None, 6])
def test_npz_round_trip_unpacked(tmp_path, compression, width):
    ids = [[3, 1, 4, 1, 5], [9], [2, 6]]
    path = tmp_path / "p.npz"
    writer = NpzShardWriter(str(path), _rows(ids).schema, TokenFileSpec(width=width, pad_id=7), compression)
    for row in ids:
        writer.write(_rows([row]))
    writer.close()
    arrays = np.load(path)
    w = width or 5
    assert arrays["input_ids"].shape == (3, w) and arrays["input_ids"].dtype == np.int32
    assert arrays["input_ids"][1].tolist() == [9] + [7] * (w - 1)
    assert arrays["attention_mask"].sum(axis=1).tolist() == [5, 1, 2]
    back = _read_back(path, "npz")
    assert back["input_ids"] == ids and back["attention_mask"] == [[1] * len(r) for r in ids]
    again = tmp_path / "q.npz"
    writer = NpzShardWriter(str(again), _rows(ids).schema, TokenFileSpec(width=width, pad_id=7), compression)
    writer.write(_rows(ids))
    writer.close()
    assert again.read_bytes() == path.read_bytes()  # bytes depend on the rows only


def test_npz_packed_rows_keep_segments(tmp_path):
    batch = _rows([[1, 2, 3, 0], [4, 5, 6, 7]], segment_ids=[[1, 1, 2, 0], [1, 1, 1, 1]],
                  positions=[[0, 1, 0, 0], [0, 1, 2, 3]])
    path = tmp_path / "p.npz"
    writer = NpzShardWriter(str(path), batch.schema, TokenFileSpec(width=4), "none")
    writer.write(batch)
    writer.close()
    arrays = np.load(path)
    assert sorted(arrays.files) == ["attention_mask", "input_ids", "positions", "segment_ids"]
    assert arrays["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert _read_back(path, "npz")["segment_ids"] == [[1, 1, 2, 0], [1, 1, 1, 1]]


def test_npz_refuses_rows_wider_than_its_width(tmp_path):
    writer = NpzShardWriter(str(tmp_path / "p.npz"), _rows([[1]]).schema, TokenFileSpec(width=2), "none")
    writer.write(_rows([[1, 2, 3]]))
    with pytest.raises(ValueError, match="does not fit the npz width 2"):
        writer.close()


def test_assemble_shard_reports_companions_and_stored_columns(tmp_path):
    piece = tmp_path / "piece.arrow"
    write_piece(pa.Table.from_batches([_rows([[1, 2], [3]])]), str(piece))
    done = assemble_shard([str(piece)], str(tmp_path / "s.bin"), "bin", _rows([[1]]).schema, compression="none",
                          row_group_size=10, token_files=TokenFileSpec(token_dtype="uint16"))
    assert (done.rows, done.tokens, done.documents) == (2, 3, 2)
    assert done.companions == {"index": str(tmp_path / "s.idx")} and done.columns == (("input_ids", "uint16"),)


@pytest.mark.parametrize("edit, problem", [
    ({"pack": {"enabled": True}}, "save.format 'bin' writes a flat token stream"),
    ({"datasets": [{"name": "a", "data_files": "x.jsonl", "additional_fields": ["url"]}]},
     "stores token arrays only"),
    ({"save": {"format": "bin", "compression": "zstd"}}, "save.compression 'zstd' is not supported by format 'bin'"),
    ({"datasets": [{"name": "a", "pubsub_subscription": "projects/p/subscriptions/s"}]}, "is for batch runs"),
])
def test_config_problems_of_token_files(edit, problem):
    data = {"default_tokenizer": "t", "datasets": [{"name": "a", "data_files": "x.jsonl"}], "save": {"format": "bin"}}
    data.update(edit)
    with pytest.raises(ConfigError, match=problem):
        PipelineConfig.from_dict(data)
    assert PipelineConfig.from_dict({**data, **{"pack": {}, "save": {"format": "npz"}},
                                     "datasets": [{"name": "a", "data_files": "x"}]}).save.codec == "none"


# ---- end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def big_vocab_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WordLevel tokenizer with 70,000 entries (ids beyond 65,535 need uint32), built locally."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    vocab.update({f"w{i}": i for i in range(4, BIG_VOCAB)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    out = tmp_path_factory.mktemp("big-vocab")
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                           "pad_token": "<pad>"}))
    return out


def _run(tmp_path: Path, tokenizer: Path, texts: list[str], **sections) -> dict:
    write_jsonl(tmp_path / "in" / "a.jsonl", ({"text": t} for t in texts))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer),
        "datasets": [{"name": "data", "data_files": str(tmp_path / "in" / "a.jsonl")}],
        **sections,
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2, **sections.get("save", {})},
    })
    result = run_batch(config, IN_PROCESS, show_progress=False)
    report = validate_output(str(tmp_path / "out"))
    assert report.ok, report.summary()
    return result.manifest


def _bin_documents(out: Path, manifest: dict, name: str = "data") -> list[list[int]]:
    dtype = np.dtype(manifest["schema"]["token_dtype"])
    documents = []
    for shard in manifest["datasets"][name]["shards"]:
        stream = np.memmap(out / shard["path"], dtype=dtype, mode="r")
        index = np.fromfile(out / shard["index_path"], dtype=np.int64)
        documents += [stream[a:b].tolist() for a, b in zip(index[:-1], index[1:])]
    return documents


@pytest.mark.slow
def test_bin_with_a_vocab_beyond_16_bits_is_uint32(tmp_path, big_vocab_tokenizer_dir):
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{i}" for i in rng.integers(4, BIG_VOCAB, size=rng.integers(1, 30))) for _ in range(40)]
    manifest = _run(tmp_path, big_vocab_tokenizer_dir, texts, save={"format": "bin"})
    assert manifest["schema"]["token_dtype"] == "uint32" and manifest["tokenizer"]["vocab_size"] == BIG_VOCAB
    expected = sorted([int(w[1:]) for w in t.split()] + [2] for t in texts)  # + EOS
    documents = _bin_documents(tmp_path / "out", manifest)
    assert sorted(documents) == expected and max(map(max, documents)) > 65_535


@pytest.mark.slow
def test_bin_uint16_stream_holds_every_document_once(tmp_path, tokenizer_dir):
    from tokenizers import Tokenizer

    texts = make_texts(120, seed=11)
    manifest = _run(tmp_path, tokenizer_dir, texts, save={"format": "bin"})
    assert manifest["schema"]["token_dtype"] == "uint16" and manifest["format"] == "bin"
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    expected = sorted(e.ids + [manifest["tokenizer"]["eos_token_id"]] for e in tokenizer.encode_batch(texts))
    assert sorted(_bin_documents(tmp_path / "out", manifest)) == expected
    shard = manifest["datasets"]["data"]["shards"][0]
    size = (tmp_path / "out" / shard["path"]).stat().st_size
    assert size == 2 * shard["tokens"]  # raw uint16, nothing else in the file


def test_npz_output_loads_with_numpy(tmp_path, tokenizer_dir):
    texts = make_texts(60, seed=12, max_words=120)
    manifest = _run(tmp_path, tokenizer_dir, texts, save={"format": "npz"},
                    tokenize={"max_length": 32, "truncation": "window", "stride": 8})
    entry = manifest["datasets"]["data"]
    rows = tokens = 0
    for shard in entry["shards"]:
        arrays = np.load(tmp_path / "out" / shard["path"])
        assert arrays["input_ids"].shape[1] == 32 and arrays["input_ids"].dtype == np.int32
        assert set(arrays.files) == {"input_ids", "attention_mask"}
        rows += len(arrays["input_ids"])
        tokens += int(arrays["attention_mask"].sum())
    assert (rows, tokens) == (entry["rows"], entry["tokens"])
    assert entry["documents_written"] == 60 and rows == 60 + entry["extra_windows"] and entry["windowed_documents"] > 0


@pytest.mark.parametrize("fmt, dtype", [("megatron", "uint32"), ("bin", "uint32"), ("bin", "uint16")])
def test_token_file_writers_write_int32_ids_without_copying_them(tmp_path, fmt, dtype):
    """Wide ids already `int32` go to the file from the batch's own buffer (no `astype` / `tobytes` copies:
    two of each id per write before); narrowed ids are copied once."""
    import tracemalloc

    from easydata.io.token_files import MegatronShardWriter

    ids = np.arange(2_000_000, dtype=np.int32) % (60_000 if dtype == "uint16" else 100_000)
    offsets = np.arange(0, len(ids) + 1, 1_000, dtype=np.int64)
    batch = pa.record_batch({"input_ids": token_list_array(ids, offsets)})
    path = str(tmp_path / "part-00000-of-00001.bin")
    writer = (MegatronShardWriter if fmt == "megatron" else BinShardWriter)(path, batch.schema, dtype)
    tracemalloc.start()
    try:
        writer.write(batch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    writer.close()
    copies = 0 if dtype == "uint32" else 1
    assert peak < (copies + 0.5) * len(ids) * np.dtype(dtype).itemsize, peak
    stored = np.fromfile(path, dtype="<i4" if fmt == "megatron" else dtype)
    assert np.array_equal(stored, ids)
