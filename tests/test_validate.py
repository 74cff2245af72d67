"""Tests for `easydata.tools.validate`: a correct output (unpacked or packed, any format, local or
`memory://`) validates clean, and each defect an output can have is reported with its own message
naming the shard or dataset."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

import pyarrow as pa
import pytest

from easydata.errors import ValidationFailed
from easydata.io.formats import ShardWriter
from easydata.tools.validate import validate_output
from tests.conftest import write_synthetic_output

TOKENS = pa.list_(pa.int32())
SCHEMA = pa.schema([("input_ids", TOKENS), ("attention_mask", TOKENS), ("path", pa.string())])
VOCAB = 512  # the synthetic manifest's vocab_size


def doc(ids: list[int], path: Optional[str] = None, mask: Optional[list[int]] = None) -> dict[str, Any]:
    return {"input_ids": ids, "attention_mask": [1] * len(ids) if mask is None else mask, "path": path}


def web_shards() -> list[list[dict[str, Any]]]:
    """Two shards: 2 rows / 6 tokens and 3 rows / 9 tokens (ids up to vocab_size - 1, an empty-ish row)."""
    return [[doc([1, 5, 6, 2], "a.py"), doc([7, 2])],
            [doc([1, VOCAB - 1, 2], "b.py"), doc([9]), doc([0, 3, 4, 5, 2], "c.py")]]


def build(root: Path, web: Optional[list[list[dict[str, Any]]]] = None, schema: pa.Schema = SCHEMA,
          **kwargs: Any) -> Path:
    """Output `root/out` with datasets `web` (see `web_shards`) and `code` (1 shard, 1 row, 3 tokens)."""
    out = root / "out"
    write_synthetic_output(str(out), {"web": web_shards() if web is None else web, "code": [[doc([3, 3, 3])]]},
                           schema, **kwargs)
    return out


def edit_manifest(out: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    change(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))


def problems_of(out: Path) -> list[str]:
    return validate_output(str(out)).problems


def set_shard_count(out: Path, dataset: str, shard: int, key: str, value: Optional[int]) -> None:
    """Changes one count of a shard entry and, consistently, its dataset entry and the totals (`None` drops
    the key from all three): the manifest still adds up, only the shard file disagrees with it."""
    def change(m: dict[str, Any]) -> None:
        entries = [m["datasets"][dataset]["shards"][shard], m["datasets"][dataset], m["totals"]]
        delta = (value or 0) - int(entries[0].get(key) or 0)
        for entry in entries:
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = int(entry.get(key) or 0) + delta

    edit_manifest(out, change)


SHARD0 = "web/part-00000-of-00002.parquet"
SHARD1 = "web/part-00001-of-00002.parquet"


# ---- a good output -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, compression", [("parquet", "none"), ("parquet", "zstd"), ("arrow", "lz4"),
                                              ("jsonl", "none"), ("jsonl", "gzip")])
def test_good_unpacked_output_validates(tmp_path: Path, fmt: str, compression: str) -> None:
    out = build(tmp_path, fmt=fmt, compression=compression)
    report = validate_output(str(out))
    assert report.problems == []
    assert report.ok
    assert (report.shards, report.rows, report.tokens) == (3, 6, 18)
    assert report.datasets == {"code": {"shards": 1, "rows": 1, "tokens": 3},
                               "web": {"shards": 2, "rows": 5, "tokens": 15}}
    assert report.summary() == (f"OK: {out}: 3 shards, 6 rows, 18 tokens\n"
                                "  code: 1 shard, 1 row, 3 tokens\n"
                                "  web: 2 shards, 5 rows, 15 tokens")


def test_good_output_on_memory_filesystem(memory_fs: Any) -> None:
    url = "memory://validated/out"
    write_synthetic_output(url, {"web": web_shards()}, SCHEMA)
    report = validate_output(url)
    assert report.problems == []
    assert (report.shards, report.rows, report.tokens) == (2, 5, 15)
    memory_fs.pipe_file("/validated/out/web/part-00002-of-00003.parquet", b"stray")
    assert validate_output(url).problems == ["web/part-00002-of-00003.parquet: file not listed in the manifest"]


def test_empty_dataset_and_no_vocab_size(tmp_path: Path) -> None:
    """A dataset whose documents were all rejected has no shards; without vocab_size ids are not range-checked."""
    out = tmp_path / "out"
    tokenizer = {"name_or_path": "t", "vocab_size": None}
    write_synthetic_output(str(out), {"web": [[doc([10**6])]], "empty": []}, SCHEMA, tokenizer=tokenizer)
    report = validate_output(str(out))
    assert report.problems == []
    assert report.datasets["empty"] == {"shards": 0, "rows": 0, "tokens": 0}


def test_no_manifest_raises(tmp_path: Path) -> None:
    build(tmp_path)
    (tmp_path / "out" / "manifest.json").unlink()
    with pytest.raises(ValidationFailed, match="has no manifest.json"):
        validate_output(str(tmp_path / "out"))


# ---- defects -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, name", [("parquet", SHARD1), ("arrow", "web/part-00001-of-00002.arrow"),
                                       ("jsonl", "web/part-00001-of-00002.jsonl")])
def test_truncated_shard(tmp_path: Path, fmt: str, name: str) -> None:
    out = build(tmp_path, fmt=fmt)
    data = (out / name).read_bytes()
    (out / name).write_bytes(data[: len(data) // 2 + 1])
    # Only the shard is reported: the manifest's entries still add up, level by level.
    problems = problems_of(out)
    assert len(problems) == 1, problems
    assert re.fullmatch(rf"{re.escape(name)}: unreadable \(\w+: .+\)", problems[0])


def test_empty_shard_file(tmp_path: Path) -> None:
    out = build(tmp_path)
    (out / SHARD0).write_bytes(b"")
    problems = problems_of(out)
    assert len(problems) == 1, problems
    assert re.fullmatch(rf"{re.escape(SHARD0)}: unreadable \(\w+: .+\)", problems[0])


def test_missing_shard(tmp_path: Path) -> None:
    out = build(tmp_path)
    (out / SHARD0).unlink()
    assert problems_of(out) == [f"{SHARD0}: file '{out / SHARD0}' does not exist"]


def test_shard_row_count_differs_from_manifest(tmp_path: Path) -> None:
    out = build(tmp_path)
    set_shard_count(out, "web", 1, "rows", 4)
    assert problems_of(out) == [f"{SHARD1}: 3 rows, manifest says 4"]


def test_shard_token_count_differs_from_manifest(tmp_path: Path) -> None:
    out = build(tmp_path)
    set_shard_count(out, "web", 0, "tokens", 7)
    assert problems_of(out) == [f"{SHARD0}: 6 tokens, manifest says 7"]


def test_shard_entry_edited_alone(tmp_path: Path) -> None:
    """Only the shard entry was changed: it disagrees with the file, and the dataset entry with the sum of
    its shard entries; both are true."""
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["datasets"]["web"]["shards"][0].update(tokens=7))
    assert problems_of(out) == [f"{SHARD0}: 6 tokens, manifest says 7",
                                "dataset 'web': manifest says 15 tokens, its shards add up to 16"]


def test_shard_padding_count_differs_from_manifest(tmp_path: Path) -> None:
    out = build(tmp_path)
    set_shard_count(out, "web", 1, "padding_tokens", 2)
    assert problems_of(out) == [f"{SHARD1}: 0 padding tokens, manifest says 2"]


def test_shard_lost_a_row(tmp_path: Path) -> None:
    """The shard on disk holds fewer rows than when the manifest was written: only the shard is reported,
    since the dataset entry and the totals still add up to the (unchanged) shard entries."""
    out = build(tmp_path)
    rows = web_shards()[1][:2]
    writer = ShardWriter(str(out / SHARD1), "parquet", SCHEMA, compression="none")
    writer.write(pa.Table.from_pylist(rows, schema=SCHEMA))
    writer.close()
    assert problems_of(out) == [f"{SHARD1}: 2 rows, manifest says 3", f"{SHARD1}: 4 tokens, manifest says 9"]


@pytest.mark.parametrize("bad_ids, count", [([VOCAB], 1), ([-1], 1), ([VOCAB + 10**6, -(2**31)], 2)],
                         ids=["vocab-size", "negative", "both"])
def test_token_ids_out_of_range(tmp_path: Path, bad_ids: list[int], count: int) -> None:
    web = web_shards()
    web[1][1] = doc([1, *bad_ids, 2])
    out = build(tmp_path, web=web)
    assert problems_of(out) == [f"{SHARD1}: {count} token ids outside [0, {VOCAB})"]


def test_attention_mask_length_differs(tmp_path: Path) -> None:
    web = web_shards()
    web[0][1] = doc([7, 2], mask=[1])
    out = build(tmp_path, web=web)
    assert problems_of(out) == [f"{SHARD0}: column 'attention_mask' length differs from input_ids in some rows"]


@pytest.mark.parametrize("column", ["input_ids", "attention_mask"])
def test_token_column_not_int32(tmp_path: Path, column: str) -> None:
    schema = SCHEMA.set(SCHEMA.get_field_index(column), pa.field(column, pa.list_(pa.int64())))
    out = build(tmp_path, schema=schema, row_group_size=100)  # one batch per shard: one message per shard
    problems = problems_of(out)
    assert len(problems) == 3
    for shard, problem in zip(["code/part-00000-of-00001.parquet", SHARD0, SHARD1], problems):
        # Parquet names the list's child `element`, Arrow `item`.
        assert re.fullmatch(rf"{shard}: column '{column}' is list<\w+: int64>, expected list<int32>", problem)


def test_missing_column(tmp_path: Path) -> None:
    out = build(tmp_path)
    narrow = pa.schema([f for f in SCHEMA if f.name != "path"])
    writer = ShardWriter(str(out / SHARD1), "parquet", narrow, compression="none")
    writer.write(pa.Table.from_pylist(web_shards()[1], schema=SCHEMA).select(narrow.names))
    writer.close()
    # A structural problem is the shard's only problem: its file's counts are not compared.
    assert problems_of(out) == [f"{SHARD1}: missing columns ['path']"]


def test_missing_column_listed_only_in_manifest(tmp_path: Path) -> None:
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["schema"]["columns"].update(loss_mask="list<item: int32>"))
    assert problems_of(out) == [f"{shard}: missing columns ['loss_mask']"
                                for shard in ("code/part-00000-of-00001.parquet", SHARD0, SHARD1)]


@pytest.mark.parametrize("counts, shown", [
    ({"documents_in": 7}, "documents_in 7 != documents_written 5 + documents_rejected 1"),
    ({"documents_written": 4}, "documents_in 6 != documents_written 4 + documents_rejected 1"),
    ({"documents_rejected": None}, "documents_in 6 != documents_written 5 + documents_rejected None"),
])
def test_document_counters_do_not_add_up(tmp_path: Path, counts: dict[str, Any], shown: str) -> None:
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["datasets"]["web"].update(counts))
    assert problems_of(out) == [f"dataset 'web': {shown}"]


def test_missing_document_counter(tmp_path: Path) -> None:
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["datasets"]["code"].pop("documents_in"))
    assert problems_of(out) == ["dataset 'code': documents_in None != documents_written 1 + documents_rejected 1"]


@pytest.mark.parametrize("stray", ["part-00002-of-00003.parquet", ".part-00000-of-00002.parquet.tmp"])
def test_stray_file_not_in_manifest(tmp_path: Path, stray: str) -> None:
    out = build(tmp_path)
    shutil.copy(out / SHARD0, out / "web" / stray)
    assert problems_of(out) == [f"web/{stray}: file not listed in the manifest"]


def test_dataset_totals_differ_from_manifest(tmp_path: Path) -> None:
    """The shards are fine, the dataset's entry is not; the (unedited) totals then disagree with the entries."""
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["datasets"]["web"].update(rows=6))
    assert problems_of(out) == ["dataset 'web': manifest says 6 rows, its shards add up to 5",
                                "totals: manifest says 6 rows, its datasets add up to 7"]


def test_dataset_entry_checked_while_another_dataset_has_a_missing_shard(tmp_path: Path) -> None:
    """`code`'s shard is fine but its entry (and, consistently, the totals) says 2 rows: reported for `code`;
    `web`'s missing shard gives only its own problem (its entry still adds up to its shard entries)."""
    out = build(tmp_path)

    def change(m: dict[str, Any]) -> None:
        m["datasets"]["code"].update(rows=2)
        m["totals"].update(rows=7)

    edit_manifest(out, change)
    (out / SHARD0).unlink()
    assert problems_of(out) == ["dataset 'code': manifest says 2 rows, its shards add up to 1",
                                f"{SHARD0}: file '{out / SHARD0}' does not exist"]


@pytest.mark.parametrize("totals, message", [
    ({"rows": 7}, "totals: manifest says 7 rows, its datasets add up to 6"),
    ({"tokens": 17}, "totals: manifest says 17 tokens, its datasets add up to 18"),
    ({"rows": None}, "totals: manifest says None rows, its datasets add up to 6"),
    ({"padding_tokens": 3}, "totals: manifest says 3 padding tokens, its datasets add up to 0"),
], ids=["rows", "tokens", "rows-none", "padding"])
def test_totals_differ_from_manifest(tmp_path: Path, totals: dict[str, Any], message: str) -> None:
    out = build(tmp_path)
    edit_manifest(out, lambda m: m["totals"].update(totals))
    assert problems_of(out) == [message]


def test_summary_lists_problems(tmp_path: Path) -> None:
    out = build(tmp_path)
    set_shard_count(out, "web", 1, "rows", 4)
    summary = validate_output(str(out)).summary()
    assert summary.splitlines()[0] == f"FAILED: {out}: 3 shards, 6 rows, 18 tokens"
    assert summary.splitlines()[-1] == f"  problem: {SHARD1}: 3 rows, manifest says 4"


# ---- regressions: bugs validate.py once had --------------------------------------------------------


def test_many_bad_batches_do_not_fake_count_mismatches(tmp_path: Path) -> None:
    """The shard is read to the end however many batches are bad (it once stopped after 5 problems and
    reported the unread rows as a count mismatch); out-of-vocab ids are summed over the shard."""
    rows = [doc([1, VOCAB + 1]) for _ in range(12)]  # 6 row groups of 2 rows, each with 2 bad ids
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [rows]}, SCHEMA, row_group_size=2)
    assert problems_of(out) == [f"web/part-00000-of-00001.parquet: 12 token ids outside [0, {VOCAB})"]


def test_value_problem_in_many_batches_reported_once(tmp_path: Path) -> None:
    rows = [doc([1, 2], mask=[1]) for _ in range(6)]  # 3 row groups, each with the same defect
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [rows]}, SCHEMA, row_group_size=2)
    assert problems_of(out) == ["web/part-00000-of-00001.parquet: column 'attention_mask' length differs from"
                                " input_ids in some rows"]


def test_scalar_token_column_is_named(tmp_path: Path) -> None:
    """Once reported as 'unreadable (AttributeError ... value_type)'."""
    schema = pa.schema([("input_ids", TOKENS), ("attention_mask", pa.int64())])
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [[{"input_ids": [1, 2], "attention_mask": 1}]]}, schema)
    assert problems_of(out) == ["web/part-00000-of-00001.parquet: column 'attention_mask' is int64,"
                                " expected list<int32>"]


# ---- packed outputs ------------------------------------------------------------------------------

SEQ = 6
PACKED_SCHEMA = pa.schema([(c, TOKENS) for c in ("input_ids", "segment_ids", "positions", "attention_mask")])
PACKED_SHARD = "mixed/part-00000-of-00001.parquet"


def packed_row(segments: list[int], positions: Optional[list[int]] = None) -> dict[str, Any]:
    """A packed row with the given segment ids; positions default to the correct ones."""
    if positions is None:
        positions, last = [], None
        for i, s in enumerate(segments):
            positions.append(0 if s == 0 or s != last else positions[-1] + 1)
            last = s
    return {"input_ids": [0 if s == 0 else 10 * s + i for i, s in enumerate(segments)],
            "segment_ids": segments, "positions": positions, "attention_mask": [int(s > 0) for s in segments]}


GOOD_PACKED = [
    packed_row([1, 1, 1, 2, 2, 3]),  # three segments, exact fit
    packed_row([1, 1, 1, 0, 0, 0]),  # one segment then padding
    packed_row([1, 1, 1, 1, 1, 1]),  # one segment filling the row
    packed_row([1, 2, 3, 4, 5, 6]),  # one-token segments
    packed_row([1, 0, 0, 0, 0, 0]),  # almost all padding
]


def build_packed(root: Path, rows: list[dict[str, Any]]) -> Path:
    out = root / "packed"
    write_synthetic_output(str(out), {"mixed": [rows]}, PACKED_SCHEMA, seq_length=SEQ, row_group_size=2)
    return out


def test_packed_rows_of_known_values() -> None:
    assert packed_row([1, 1, 1, 2, 2, 3]) == {"input_ids": [10, 11, 12, 23, 24, 35], "segment_ids": [1, 1, 1, 2, 2, 3],
                                               "positions": [0, 1, 2, 0, 1, 0], "attention_mask": [1] * 6}
    assert packed_row([1, 1, 0, 0, 0, 0])["positions"] == [0, 1, 0, 0, 0, 0]


def test_good_packed_output_validates(tmp_path: Path) -> None:
    out = build_packed(tmp_path, GOOD_PACKED)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema"]["packed"] is True and manifest["schema"]["seq_length"] == SEQ
    report = validate_output(str(out))
    assert report.problems == []
    # Tokens are real tokens; the 8 padding positions are counted apart.
    assert (report.rows, report.tokens) == (5, 22)
    assert (manifest["totals"]["tokens"], manifest["totals"]["padding_tokens"]) == (22, 8)


def test_packed_padding_positions_are_not_checked(tmp_path: Path) -> None:
    row = packed_row([1, 1, 0, 0, 0, 0], positions=[0, 1, 2, 3, 4, 5])  # some packers keep counting
    assert problems_of(build_packed(tmp_path, [*GOOD_PACKED, row])) == []


@pytest.mark.parametrize("value, padding", [(9, 9), (None, 0)], ids=["wrong", "absent"])
def test_packed_shard_padding_count_differs_from_manifest(tmp_path: Path, value: Optional[int],
                                                          padding: int) -> None:
    """`absent`: a manifest without padding_tokens anywhere (read as 0) for a shard that has padding."""
    out = build_packed(tmp_path, GOOD_PACKED)
    set_shard_count(out, "mixed", 0, "padding_tokens", value)
    assert problems_of(out) == [f"{PACKED_SHARD}: 8 padding tokens, manifest says {padding}"]


@pytest.mark.parametrize("row, message", [
    ({c: v[:5] for c, v in packed_row([1, 1, 1, 2, 2, 2]).items()}, "packed rows must all be 6 tokens long"),
    ({c: v + [0] for c, v in packed_row([1, 1, 1, 2, 2, 2]).items()}, "packed rows must all be 6 tokens long"),
    (packed_row([1, 1, 0, 2, 2, 0]), "segment id 0 (padding) is followed by real tokens"),
    (packed_row([0, 0, 1, 1, 1, 1]), "segment id 0 (padding) is followed by real tokens"),
    (packed_row([1, 1, 2, 2, 1, 1]), "segment ids decrease within a row"),
    (packed_row([1, 1, 1, 2, 2, 2], positions=[0, 1, 2, 3, 4, 5]), "positions do not restart at 0 for every segment"),
    (packed_row([1, 1, 1, 1, 1, 1], positions=[1, 2, 3, 4, 5, 6]), "positions do not restart at 0 for every segment"),
    (packed_row([1, 1, 2, 2, 2, 0], positions=[0, 1, 0, 1, 1, 0]), "positions do not restart at 0 for every segment"),
    (packed_row([2, 2, 2, 3, 3, 3]), "segment ids do not count 1, 2, ..., k from the start of the row"),
    (packed_row([1, 1, 3, 3, 0, 0]), "segment ids do not count 1, 2, ..., k from the start of the row"),
], ids=["short-row", "long-row", "padding-inside", "leading-padding", "decreasing", "positions-continue",
        "positions-from-1", "positions-repeat", "segments-from-2", "segment-gap"])
def test_packed_defects(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    # The bad row sits in the second row group, after good rows.
    out = build_packed(tmp_path, [GOOD_PACKED[0], GOOD_PACKED[1], row, GOOD_PACKED[2]])
    assert problems_of(out) == [f"{PACKED_SHARD}: {message}"]


def test_packed_segment_ids_length_differs(tmp_path: Path) -> None:
    """The packed checks are skipped for misaligned columns (reshaping them once made the shard 'unreadable
    (ValueError: cannot reshape ...)' with count mismatches that were not real)."""
    row = packed_row([1, 1, 1, 2, 2, 2])
    row["segment_ids"] = row["segment_ids"][:4]
    out = build_packed(tmp_path, [GOOD_PACKED[0], row])
    assert problems_of(out) == [f"{PACKED_SHARD}: column 'segment_ids' length differs from input_ids in some rows"]


@pytest.mark.parametrize("mask, problem", [([1, 2, 0, 1], "loss_mask holds values other than 0 and 1"),
                                           ([1, 1, 0, 1], "loss_mask is 1 on padding")])
def test_loss_mask_must_be_zero_or_one_and_zero_on_padding(tmp_path, mask, problem):
    """Masks are checked for values and for padding (packed rows)."""
    import pyarrow as pa

    from easydata.io.formats import ShardWriter
    from easydata.run.manifest import build_manifest, write_manifest

    out = tmp_path / "out"
    seq = pa.list_(pa.int32())
    schema = pa.schema([("input_ids", seq), ("loss_mask", seq), ("segment_ids", seq), ("positions", seq)])
    rows = {"input_ids": [[5, 6, 0, 0]], "loss_mask": [mask], "segment_ids": [[1, 1, 0, 0]],
            "positions": [[0, 1, 0, 0]]}
    (out / "d").mkdir(parents=True)
    writer = ShardWriter(str(out / "d" / "part-00000-of-00001.parquet"), "parquet", schema)
    writer.write(pa.RecordBatch.from_pydict(rows, schema=schema))
    writer.close()
    manifest = build_manifest(
        config={}, fingerprint="x", tokenizer={"vocab_size": 10},
        schema={"columns": {c: "list<int32>" for c in schema.names}, "packed": True, "seq_length": 4},
        datasets={"d": {"shards": [{"path": "d/part-00000-of-00001.parquet", "rows": 1, "tokens": 2,
                                    "padding_tokens": 2}], "documents_in": 1, "documents_written": 1,
                        "documents_rejected": 0, "padding_tokens": 2}},
        output_format="parquet", compression="zstd")
    write_manifest(str(out), manifest)
    assert validate_output(str(out)).problems == [f"d/part-00000-of-00001.parquet: {problem}"]


# ---- paths in a manifest are data: they must stay inside the output ------------------------------------


@pytest.mark.parametrize("forged", ["../outside/secret.parquet", "../../etc/passwd", "/etc/passwd",
                                    "web/../../outside/secret.parquet", "file:///etc/passwd", "gs://other/x.parquet",
                                    "manifest.json", "..\\outside\\secret.parquet", ""])
def test_a_shard_path_outside_the_output_is_refused_by_every_consumer(tmp_path: Path, forged: str, capsys) -> None:
    """A valid Parquet file outside the output used to validate OK and become training data."""
    from easydata.cli import main
    from easydata.reader import TokenReader

    out = build(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(next((out / "web").glob("*.parquet")), outside / "secret.parquet")
    edit_manifest(out, lambda m: m["datasets"]["web"]["shards"][0].update(path=forged))
    problems = problems_of(out)
    assert any(f"manifest shard path {forged!r}" in p and "refusing to open it" in p for p in problems), problems
    for command in (["inspect", str(out)], ["stats", str(out)]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("easydata: error: ") and len(err.splitlines()) == 1 and repr(forged) in err, err
    with pytest.raises(ValidationFailed, match="refusing to open it"):
        TokenReader(str(out), batch_size=1, name="web", seq_length=8)


def test_validate_and_stats_show_the_rows_they_have_read(tmp_path: Path, monkeypatch, capsys) -> None:
    """Both read every shard (minutes on a large output) and showed nothing until the end; now the rows read so
    far, as a line every `LOG_EVERY_SECONDS` where stderr is not a terminal, and nothing with `--quiet`."""
    from easydata.cli import main
    from easydata.run import progress

    monkeypatch.setattr(progress, "LOG_EVERY_SECONDS", 0.0)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("attention_mask", pa.list_(pa.int32()))])
    shards = [[{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1]}] * 5, [{"input_ids": [4], "attention_mask": [1]}]]
    write_synthetic_output(str(tmp_path / "out"), {"web": shards}, schema)
    for command, desc in (("validate", "validating"), ("stats", "reading shards")):
        assert main([command, str(tmp_path / "out")]) == 0
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"[easydata] {desc}: ")]
        assert lines and lines[-1].startswith(f"[easydata] {desc}: 100.0% of 6 rows, "), (command, lines)
        assert main([command, str(tmp_path / "out"), "--quiet"]) == 0
        assert capsys.readouterr().err == ""
