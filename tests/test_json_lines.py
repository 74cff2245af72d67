"""Plain-text JSON lines are parsed a block at a time by Arrow (`easydata.io.input_formats.json_lines`) and must
come out exactly as one `json.loads` per line does: the same batches (documents, keys, where each closes), dead
letters, counts and bytes reported, for any mix of plain lines and lines Arrow and Python read differently."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.config import DatasetConfig
from easydata.io import documents
from easydata.io.input_formats import json_lines, lines
from easydata.io.documents import InputSplit
from easydata.io.sources import read_split

PLAIN_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)

# Lines where the two parsers differ or the record checks matter, each a dead letter or a document per line.
AWKWARD = st.sampled_from([
    b'{"text": "a", "text": "b"}', b'{"text": 1}', b'{"text": null}', b'{}', b'{"text": "\\ud800"}',
    b'{"text": "\\udc00\\ud800"}', b'{"text": "\\ud83d\\ude00"}', b'{"text": "a"} {"text": "b"}', b'{"text": "a"}\r{"text": "b"}',
    b'{"text": "\xff"}', b'{"text": "\xc0\x80"}', b'{"text": "\xed\xa0\x80"}', b'{"text": "a\tb"}', b'{"text": "a\x00b"}',
    b'{"te\\u0078t": "x"}', b'{"text": "a"}x', b'[1]', b'"s"', b'{"text": {"a": 1}}', b'{"text": ""}', b'{"text": " "}',
    b'{"Text": "a"}', b'{"text": "a", "id": 3}', b'{"messages": [{"role": "user", "content": "hi"}]}',
    b'{"prompt": "p", "completion": "c"}', b'\x0b', b'   ', b'', b'\r', b'{"text": "a\\u0000b"}', b'{"text": 1e999}',
    b'{"text": "' + b"long " * 600 + b'"}',
])


def _line(item) -> bytes:
    if isinstance(item, bytes):
        return item
    text, ascii_only, pad = item
    return (b" " * pad) + json.dumps({"text": text}, ensure_ascii=ascii_only).encode()


LINES = st.lists(st.one_of(st.tuples(PLAIN_TEXT, st.booleans(), st.integers(0, 1)), AWKWARD), max_size=40)


def _read(path, *, blocks: bool, max_bytes, start=0, end=None):
    ds = DatasetConfig(name="d", data_files=str(path), type="jsonl")
    with pytest.MonkeyPatch.context() as m:  # the line-by-line reference: no block is parsed
        if not blocks:
            m.setattr(documents.DocumentCollector, "takes_plain_json", property(lambda self: False))
        rejects: list = []
        batches = [(b.keys, b.texts, b.input_bytes) for b in
                   read_split(InputSplit("d", str(path), "jsonl", start=start, end=end, key_name="f.jsonl"), ds,
                              batch_size=7, max_document_bytes=max_bytes, rejects=rejects)]
    return batches, [r.to_json() for r in rejects]


@given(items=LINES, bom=st.booleans(), crlf=st.booleans(), max_bytes=st.one_of(st.none(), st.integers(1, 40)),
       cut=st.integers(0, 400))
@settings(max_examples=200, deadline=None)
def test_blocks_read_exactly_as_line_by_line(tmp_path_factory, items, bom, crlf, max_bytes, cut):
    path = tmp_path_factory.mktemp("jl") / "f.jsonl"
    ending = b"\r\n" if crlf else b"\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"".join(_line(i) + ending for i in items))
    size = path.stat().st_size
    for start, end in ((0, None), (0, min(cut, size)), (min(cut, size), None)):  # splits starting mid-line too
        fast = _read(path, blocks=True, max_bytes=max_bytes, start=start, end=end)
        slow = _read(path, blocks=False, max_bytes=max_bytes, start=start, end=end)
        assert fast == slow


def test_plain_short_lines_take_the_block_path(tmp_path, monkeypatch):
    """The block parser is what reads a plain corpus (so the property above compares two paths, not one)."""
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i} é"}) + "\n" for i in range(600)))
    calls = []
    real = json_lines.parse_plain_lines
    monkeypatch.setattr(lines, "parse_plain_lines", lambda rows, field: calls.append(len(rows)) or real(rows, field))
    batches, rejects = _read(path, blocks=True, max_bytes=None)
    assert calls == [256, 256, 88] and not rejects
    assert sum(len(b[1]) for b in batches) == 600 and batches[0][1][0] == "doc 0 é"


@pytest.mark.parametrize("line, parsed", [
    (b'{"text": "a"}', ["a"]),
    (b'{"text": "\\ud83d\\ude00 \\u00e9"}', ["\U0001f600 \u00e9"]),
    (b'{"text": "a"} {"text": "b"}', None),  # two rows for Arrow, "extra data" for Python
    (b'{}', None),  # a null row for Arrow, "missing content field" for Python
    (b'{"text": "\xc0\x80"}', None),  # not UTF-8: Arrow does not check, Python refuses
    (b'{"text": "a", "text": "b"}', None),  # Python keeps the last; refused here, judged line by line
    (b'{"text": "a", "id": 1}', None),
])
def test_parse_plain_lines(line, parsed):
    assert json_lines.parse_plain_lines([line], "text") == parsed


def test_a_block_holds_at_most_one_long_line_past_its_bytes(tmp_path, monkeypatch):
    """Without `max_document_bytes` a line has no cap: 256 of them must not be held at once (line by line holds
    one), so a block is judged as soon as its lines pass `BLOCK_BYTES`."""
    long = json.dumps({"text": "y" * 300_000})
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join([json.dumps({"text": "a"}), long, long, json.dumps({"text": "b"}), long]) + "\n")
    held = []
    real = lines._judge_block
    monkeypatch.setattr(lines, "_judge_block", lambda pending, *a: held.append(sum(len(r) for _, r, _ in pending))
                        or real(pending, *a))
    batches, rejects = _read(path, blocks=True, max_bytes=None)
    assert max(held) <= lines.BLOCK_BYTES + len(long) + 1 and len(held) >= 3
    assert [t[:1] for b in batches for t in b[1]] == ["a", "y", "y", "b", "y"] and not rejects
