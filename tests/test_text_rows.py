"""Plain-text tables go to the collector column-wise (`DocumentCollector.add_text_rows`) and must come out
exactly as row-by-row records would (`add_record`): the same documents, fields, keys and dead letters."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.config import DatasetConfig
from easydata.io.documents import DocumentCollector

# Valid UTF-8 only (Arrow cannot hold a lone surrogate); whitespace Python strips but Unicode does not
# call White_Space (\x1c-\x1f) included on purpose.
TEXT = st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
                 st.sampled_from(["", " ", "\x1c\x1d", "\u00a0\u2028", "a\x00b", "ok"]))


def _collectors(max_bytes, limit):
    ds = DatasetConfig(name="d", data_files="x.parquet", type="parquet", additional_fields=["n", "tag", "absent"])
    return [DocumentCollector(ds, "src", "x.parquet", batch_size=5, max_document_bytes=max_bytes, limit=limit)
            for _ in range(2)]


def _outcome(collector: DocumentCollector):
    batches = []
    while True:
        batch = collector.flush()
        if batch is None:
            return batches, collector.rejects, collector.count
        batches.append(batch)


@given(rows=st.lists(st.tuples(TEXT, st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
                               st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cs",)),
                                                            max_size=4))), max_size=25),
       max_bytes=st.one_of(st.none(), st.integers(1, 12)), limit=st.one_of(st.none(), st.integers(0, 25)),
       first=st.integers(0, 1000))
@settings(max_examples=300, deadline=None)
def test_text_rows_are_judged_exactly_as_records(rows, max_bytes, limit, first):
    table = pa.table({"text": pa.array([r[0] for r in rows], pa.string()), "n": pa.array([r[1] for r in rows], pa.int64()),
                      "tag": pa.array([r[2] for r in rows], pa.large_string())})
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    fast, slow = _collectors(max_bytes, limit)
    assert fast.takes_text_rows(table.schema)
    positions = range(first, first + len(rows))
    fast.add_text_rows(positions, columns)
    for i, position in enumerate(positions):
        slow.add_record(position, {name: values[i] for name, values in columns.items()})
        if slow.done:
            break
    assert _outcome(fast) == _outcome(slow)


@pytest.mark.parametrize("columns, takes", [
    ({"text": pa.array(["a"])}, True),
    ({"text": pa.array(["a"], pa.large_string()), "n": pa.array([1], pa.uint32()), "when": pa.array([1], pa.timestamp("s"))},
     True),
    ({"text": pa.array([1])}, False),  # content not a string: "is a int" per record
    ({"text": pa.array(["a"]), "n": pa.array([2**64 - 1], pa.uint64())}, False),  # may exceed int64
    ({"text": pa.array(["a"]), "tags": pa.array([["x"]])}, False),  # nested: walked per value
    ({"text": pa.array(["a"]), "prompt": pa.array(["p"]), "completion": pa.array(["c"])}, False),  # may be a pair
    ({"other": pa.array(["a"])}, False),  # no content column: "missing content field" per record
])
def test_which_tables_go_column_wise(columns, takes):
    fast, _ = _collectors(None, None)
    assert fast.takes_text_rows(pa.table(columns).schema) is takes


def test_a_dataset_with_a_record_format_goes_row_by_row():
    ds = DatasetConfig(name="d", data_files="x.parquet", type="parquet", format_fields={"body": "text"})
    collector = DocumentCollector(ds, "src", "x.parquet", batch_size=5, max_document_bytes=None, limit=None)
    assert not collector.takes_text_rows(pa.table({"text": ["a"]}).schema)


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_row_group_of_long_documents_becomes_batches_bounded_by_bytes(tmp_path, kind):
    """A table block is sliced so batches close near `MAX_BATCH_CHARS` as JSON lines do (a 10 MB row group was
    one batch), with the same documents and keys."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from easydata.io.documents import MAX_BATCH_CHARS, InputSplit
    from easydata.io.sources import read_split

    texts = [f"{i:04d} " + "x" * 100_000 for i in range(100)]
    table = pa.table({"text": texts})
    path = tmp_path / f"long.{kind}"
    if kind == "parquet":
        pq.write_table(table, path, row_group_size=100)
    else:
        with ipc.new_file(path, table.schema) as writer:
            writer.write_table(table, max_chunksize=100)
    ds = DatasetConfig(name="d", data_files=str(path), type=kind)
    batches = list(read_split(InputSplit("d", str(path), kind, key_name=path.name), ds, batch_size=1000))
    assert len(batches) > 1
    assert all(sum(map(len, b.texts)) <= MAX_BATCH_CHARS * 9 // 8 + 100_005 for b in batches)
    assert [t for b in batches for t in b.texts] == texts
    assert [k for b in batches for k in b.keys] == [f"{path.name}@{i}" for i in range(100)]
