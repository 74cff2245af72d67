"""What reading a Parquet or Arrow input counts as consumed, and what planning counts for it
(`sources.text_bytes`, `READ_SIZES`): the same bytes, so a run's progress ends at 100 % and its shuffle groups
are sized by the data read, not by a file size that compression and unread columns make several times off."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from easydata.config import DatasetConfig, PipelineConfig
from easydata.io.input_formats import arrow_files, parquet_files
from easydata.io.sources import plan_input, read_splits, text_bytes
from easydata.run.run_plan import prepare_run
from tests.conftest import corrupt_row_group


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(10**5)}" for _ in range(rng.choice([1, 8, 60, 300]))) for _ in range(count)]


def _table(count: int, seed: int, extra: bool, chat: bool = False) -> pa.Table:
    texts = _texts(count, seed)
    columns: dict = {"text": texts}
    if chat:
        columns = {"messages": [[{"role": "user", "content": t}, {"role": "assistant", "content": t[::-1]}]
                                for t in texts]}
    if extra:  # columns no dataset reads: a wide one, a number, a nested one
        columns["meta"] = ["x" * (len(t) % 3000) for t in texts]
        columns["id"] = list(range(count))
        columns["tags"] = [[{"k": "a", "v": i}] for i in range(count)]
    return pa.table(columns)


def _reported(ds: DatasetConfig, splits) -> list[int]:
    """Each split's bytes as its reading counts them (read on its own, as a worker reads its unit): its
    batches' and those read after its last document (`unbatched`)."""
    counted = []
    for split in splits:
        unbatched: list[int] = []
        counted.append(sum(batch.input_bytes for batch in read_splits([split], ds, batch_size=13, unbatched=unbatched))
                       + sum(unbatched))
    return counted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(0, 300), group_rows=st.integers(1, 90), seed=st.integers(0, 99), extra=st.booleans(),
       chat=st.booleans(), codec=st.sampled_from(["zstd", "snappy", "none"]), target=st.integers(1, 400_000))
def test_parquet_reading_counts_what_planning_counts(tmp_path_factory, rows, group_rows, seed, extra, chat, codec,
                                                     target):
    path = tmp_path_factory.mktemp("pq") / "data.parquet"
    pq.write_table(_table(rows, seed, extra, chat), path, row_group_size=group_rows, compression=codec)
    ds = DatasetConfig(name="d", data_files=str(path), type="parquet", content_field="messages" if chat else "text")
    splits = plan_input(ds, target_bytes=target).splits
    assert sum(s.size for s in splits) == path.stat().st_size  # split sizes share the file's bytes
    planned = text_bytes(splits, ds)
    reported = _reported(ds, splits)
    assert sum(reported) == planned  # to the byte, however the file is cut
    with pq.ParquetFile(path) as pf:
        read = pf.read(columns=["messages" if chat else "text"])
        by_group = parquet_files.columns_bytes(pf, ["messages" if chat else "text"])
    assert planned == sum(by_group.values())
    if rows:  # the uncompressed bytes of the columns read: about their Arrow bytes, whatever else the file holds
        # (a page's header holds its longest and shortest string, as statistics)
        assert 0.8 * read.nbytes <= planned <= 1.25 * read.nbytes + 12_000 * len(by_group)
    for split, got in zip(splits, reported):  # and each split its own row groups'
        assert got == sum(by_group[g] for g in range(split.start, len(by_group) if split.end is None else split.end))


def test_a_corrupt_row_group_is_counted_with_the_rest(tmp_path: Path):
    path = tmp_path / "in.parquet"
    pq.write_table(_table(60, 1, extra=True), path, row_group_size=13)
    corrupt_row_group(path, 2)
    ds = DatasetConfig(name="d", data_files=str(path), type="parquet")
    splits = plan_input(ds, target_bytes=1 << 30).splits
    rejects: list = []
    reported = sum(batch.input_bytes for batch in read_splits(splits, ds, batch_size=7, rejects=rejects))
    assert len(rejects) == 1 and rejects[0].records == 13
    assert reported == text_bytes(splits, ds) > 0
    (tmp_path / "in.parquet").write_bytes(b"PAR1 not a footer")  # unreadable: counted at its size
    assert text_bytes(plan_input(ds).splits, ds) == len(b"PAR1 not a footer")


def test_leaf_columns_not_following_the_schema_count_whole_row_groups(tmp_path: Path, monkeypatch):
    path = tmp_path / "in.parquet"
    pq.write_table(_table(40, 2, extra=True), path, row_group_size=9)
    monkeypatch.setattr(parquet_files, "_leaves", lambda arrow_type: 2)
    with pq.ParquetFile(path) as pf:
        assert parquet_files.columns_bytes(pf, ["text"]) == \
            {g: pf.metadata.row_group(g).total_byte_size for g in range(pf.metadata.num_row_groups)}


def _write_arrow(path: Path, table: pa.Table, batch_rows: int, codec, stream: bool) -> None:
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(path), table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=batch_rows)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("codec", [None, "zstd", "lz4"])
def test_arrow_reading_counts_what_planning_estimates(tmp_path: Path, stream, codec):
    table = _table(800, 3, extra=True)
    read = table.select(["text"]).nbytes
    for batch_rows, exact in ((100, True), (40, False)):  # 8 batches: all of them looked at; 20: the first 8
        path = tmp_path / f"in-{batch_rows}.arrow"
        _write_arrow(path, table, batch_rows, codec, stream)
        ds = DatasetConfig(name="d", data_files=str(path), type="arrow")
        splits = plan_input(ds, target_bytes=1 << 30).splits
        reported = sum(_reported(ds, splits))
        assert abs(reported - read) <= 16 * 800 // batch_rows  # the Arrow bytes of the column read
        planned = text_bytes(splits, ds)
        if exact:
            assert planned == reported
        else:  # from the first batches: their bytes per batch (a file), per byte spanned (a stream)
            assert abs(planned - reported) < 0.15 * reported
        assert arrow_files.read_size(str(path), ds) == planned


def test_a_table_input_sizes_groups_and_progress_by_the_data_read(tmp_path: Path, tokenizer_dir):
    """A zstd Parquet file with a wide column no dataset reads, against a JSONL file of the same texts: the same
    shuffle groups. Counted at its file size (half its text), it had half as many; its splits counted every
    column, so progress stopped short."""
    table = _table(3000, 4, extra=True)
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"text": t}) + "\n" for t in table.column("text").to_pylist()))
    packed = tmp_path / "packed.parquet"
    pq.write_table(table, packed, row_group_size=500, compression="zstd")
    plans = {}
    for name, path in (("plain", plain), ("packed", packed)):
        config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                           "datasets": [{"name": "d", "data_files": str(path)}],
                                           "save": {"output_dir": str(tmp_path / f"out-{name}")}})
        plans[name] = prepare_run(config, group_bytes=64 * 1024).datasets[0]
    assert packed.stat().st_size < plans["plain"].input_bytes / 1.8
    assert abs(plans["packed"].input_bytes - plans["plain"].input_bytes) < 0.1 * plans["plain"].input_bytes
    assert plans["packed"].num_groups == plans["plain"].num_groups > 2


def test_a_run_counts_all_it_planned(tmp_path: Path, tokenizer_dir):
    """The real pipeline: the manifest's `input_bytes` (what the readers counted) is the plan's count, so the
    progress reaches 100 % when the reading ends, not before or never: a Parquet file cut into splits, and a
    JSONL file of dead letters only (bytes read after a unit's last document were not counted)."""
    from beam_pipelines.batch import run_batch

    path = tmp_path / "in" / "data.parquet"
    path.parent.mkdir()
    pq.write_table(_table(900, 5, extra=True), path, row_group_size=100, compression="zstd")
    lines = tmp_path / "lines"  # a file of documents, and one of records all dead letters: a unit of its own
    lines.mkdir()
    (lines / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in _texts(50, 6)))
    (lines / "b.jsonl").write_text("{not json\n" * 400)
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(path)},
                                                               {"name": "lines", "data_files": str(lines)}],
        "pack": {"enabled": True, "seq_length": 128}, "save": {"output_dir": str(tmp_path / "out")}})
    splits = plan_input(config.datasets[0], target_bytes=64 * 1024).splits
    assert len(splits) > 2
    manifest = run_batch(config, ["--direct_num_workers=2"], show_progress=False, split_bytes=64 * 1024).manifest
    web, tail = manifest["datasets"]["web"], manifest["datasets"]["lines"]
    assert web["documents_in"] == 900
    assert web["input_bytes"] == text_bytes(splits, config.datasets[0])
    assert (tail["documents_in"], tail["documents_rejected"]) == (450, 400)
    assert tail["input_bytes"] == sum(p.stat().st_size for p in lines.iterdir())
