"""`easydata.io.csv_records`: a malformed CSV record never swallows the well-formed ones after it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from easydata.config import DatasetConfig
from easydata.io.csv_records import csv_records
from easydata.io.sources import plan_splits, read_split


def _read(path: Path, **dataset):
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["id"], **dataset)
    rejects: list = []
    docs = [(t, i) for split in plan_splits(ds) for batch in read_split(split, ds, rejects=rejects)
            for t, i in zip(batch.texts, batch.fields["id"])]
    return docs, rejects


def test_an_unbalanced_quote_loses_only_its_own_record(tmp_path: Path):
    """pyarrow took the rest of the file into the open quote: the whole file was one dead letter."""
    (tmp_path / "in.csv").write_bytes(b'text,id\nfirst doc,1\n"unbalanced start,2\ngood record,3\n'
                                      b'"quoted, with\na newline",4\nlast,5\n')
    docs, rejects = _read(tmp_path / "in.csv")
    assert docs == [("first doc", 1), ("good record", 3), ("quoted, with\na newline", 4), ("last", 5)]
    assert [(r.position, r.reason, r.excerpt) for r in rejects] == [
        (1, "malformed CSV: ',' expected after '\"'", '"unbalanced start,2\n')]
    (tmp_path / "end.csv").write_bytes(b'text,id\nfirst doc,1\n"never closed,2\nlast,3\n')
    docs, rejects = _read(tmp_path / "end.csv")
    assert docs == [("first doc", 1), ("last", 3)]
    assert [(r.position, r.reason) for r in rejects] == [(1, "malformed CSV: a quote is never closed")]


def test_records_with_stray_quotes_or_wrong_field_counts_are_dead_letters(tmp_path: Path):
    (tmp_path / "in.tsv").write_bytes(b'text\tid\nok\t1\n"closed" then text\t2\ntoo\tmany\tfields\ngood\t4\n'
                                      b'\xff\xfe\t5\nfine "inner" quote\t6\n')
    docs, rejects = _read(tmp_path / "in.tsv")
    assert docs == [("ok", 1), ("good", 4), ('fine "inner" quote', 6)]
    assert [(r.position, r.reason.split(":")[0]) for r in rejects] == [
        (1, "malformed CSV"), (2, "malformed CSV"), (4, "invalid UTF-8 at byte 0")]
    assert rejects[1].reason == "malformed CSV: 3 fields, the header has 2"


def test_numeric_columns_keep_their_inferred_type_across_chunks(tmp_path: Path):
    rows = "".join(f"doc {i},{i}\n" for i in range(25))
    (tmp_path / "in.csv").write_text("text,id\n" + rows)
    ds = DatasetConfig(name="d", data_files=str(tmp_path / "in.csv"), additional_fields=["id"])
    ids = [i for split in plan_splits(ds) for batch in read_split(split, ds, batch_size=7) for i in batch.fields["id"]]
    assert ids == list(range(25))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"),
                                  min_size=1, max_size=30),
                          st.booleans()), min_size=1, max_size=25))
def test_well_formed_records_all_survive_among_broken_ones(rows):
    """Property: rows written by Python's csv module (any text, quotes, newlines) come back exactly;
    a broken line (an unbalanced quote) inserted before any of them costs only itself. Except where CSV itself
    cannot tell: before a row whose text starts with the delimiter (`",...`), the broken line's open quote is
    closed by that row's first quote and the two make one well-formed record (found by hypothesis: `",\n"`)."""
    assume(not any(insert_broken and text.startswith(",") for text, insert_broken in rows))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(["text", "id"])
    lines = [out.getvalue()]
    broken = 0
    for i, (text, insert_broken) in enumerate(rows):
        if insert_broken:
            lines.append(f'"broken {i},x\n')
            broken += 1
        one = io.StringIO()
        csv.writer(one, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow([text, i])
        lines.append(one.getvalue())
    header, records = csv_records(io.BytesIO("".join(lines).encode()).readlines(), ",")
    records = list(records)
    kept = [next(csv.reader(io.StringIO(r.data.decode()), strict=True))[0] for r in records if r.reason is None]
    assert kept == [text for text, _ in rows]
    assert sum(r.reason is not None for r in records) >= broken
