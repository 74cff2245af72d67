"""Every kind of bad record, end to end: the run finishes, and every record is written or dead-lettered.

One corpus holds each failure SPEC §6 names (malformed JSON, invalid UTF-8, missing / non-string /
empty content, a non-object record, a document over `max_document_bytes`, a chat template failure, an
unreadable Parquet row group, a truncated gzip file). The run must finish, the manifest must account
for every record (`documents_in == documents_written + documents_rejected` per dataset), and
`OUT/rejected/` must hold one line per rejection with its source, position and reason.
"""

from __future__ import annotations

import pytest
import collections
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl

CHATML = Path(__file__).parent / "chat_templates" / "chatml.jinja"


def _corpus(root: Path) -> dict[str, int]:
    """Writes the corpus; returns the number of good documents per input file."""
    texts = make_texts(120, seed=4)
    web = root / "web"
    good = write_jsonl(web / "good.jsonl", [{"text": t} for t in texts[:60]])
    with open(good, "ab") as f:
        f.write(b'{"text": "unterminated\n')                    # malformed JSON
        f.write(b'{"text": "bad \xff\xfe bytes"}\n')             # invalid UTF-8
        f.write(b'{"body": "no text field"}\n')                  # missing content
        f.write(b'{"text": 42}\n')                               # non-string content
        f.write(b'{"text": "   "}\n')                            # empty text
        f.write(b'["not", "an", "object"]\n')                    # non-object record
        f.write(json.dumps({"text": "x" * 5000}).encode() + b"\n")  # over max_document_bytes
    table = pa.Table.from_pylist([{"text": t} for t in texts[60:90]])
    pq.write_table(table, web / "rows.parquet", row_group_size=10)
    chunk = pq.ParquetFile(web / "rows.parquet").metadata.row_group(1).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray((web / "rows.parquet").read_bytes())
    data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size  # row group 1 unreadable
    (web / "rows.parquet").write_bytes(bytes(data))
    full = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in make_texts(3000, seed=5)).encode())
    (web / "cut.jsonl.gz").write_bytes(full[:len(full) // 3])    # truncated download
    chats = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
             for i in range(20)]
    chats.append({"messages": [{"role": "user", "content": "\ue000"}, {"role": "assistant", "content": "b"}]})
    write_jsonl(root / "chat" / "chat.jsonl", chats)               # the last one fails the chat template
    return {"good.jsonl": 60, "rows.parquet": 20, "chat.jsonl": 20}


@pytest.mark.slow
def test_every_bad_record_is_dead_lettered_with_a_reason(tokenizer_dir, chat_tokenizer_dir, tmp_path):
    good = _corpus(tmp_path / "in")
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(tmp_path / "in" / "web" / "*")},
                     {"name": "chat", "data_files": str(tmp_path / "in" / "chat" / "chat.jsonl"),
                      "content_field": "messages"}],
        "chat": {"template": str(CHATML)},
        "tokenize": {"max_document_bytes": 4000, "batch_size": 16},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 2},
    })
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
    out = tmp_path / "out"
    lines = [json.loads(line) for path in sorted((out / "rejected").rglob("*.jsonl"))
             for line in path.read_text().splitlines()]
    reasons = collections.Counter()
    for line in lines:
        partial = {"read_bytes", "unread_bytes"} if line["reason"].startswith("unreadable input") else set()
        assert set(line) == {"dataset", "source", "position", "reason", "excerpt", "records"} | partial
        assert len(line["excerpt"]) <= 200
        reasons[line["reason"].split(":")[0].split(" at ")[0].split(" (")[0]] += line["records"]
    assert reasons == {
        "malformed JSON": 1, "invalid UTF-8": 1, "missing content field 'text'": 1,
        "content field 'text' is a int, not a string": 1, "empty text": 1, "record is a list, not an object": 1,
        "document is larger than max_document_bytes=4000": 1, "unreadable Parquet row group 1": 10,
        "unreadable input after 225745 bytes of this split": 1,
        "message content holds reserved private-use characters U+E000/U+E001": 1,
    }, reasons
    web, chat = manifest["datasets"]["web"], manifest["datasets"]["chat"]
    for entry in (web, chat):
        assert entry["documents_in"] == entry["documents_written"] + entry["documents_rejected"]
    truncated = [line for line in lines if line["source"].endswith("cut.jsonl.gz")]
    assert len(truncated) == 1 and truncated[0]["reason"].startswith("unreadable input after ")
    assert web["documents_rejected"] == 7 + 10 + 1
    assert web["documents_written"] > good["good.jsonl"] + good["rows.parquet"]  # + the gzip's first part
    assert (chat["documents_written"], chat["documents_rejected"]) == (20, 1)
    assert sum(line["records"] for line in lines) == manifest["documents_rejected"]
    report = validate_output(str(out))
    assert report.ok
    # The cut download is listed as read only in part, and `validate` says so.
    cut = str(tmp_path / "in" / "web" / "cut.jsonl.gz")
    assert manifest["partial_inputs"] == {"web": [{
        "path": cut, "offset": truncated[0]["position"], "read_bytes": truncated[0]["read_bytes"],
        "unread_bytes": None, "reason": truncated[0]["reason"]}]}
    assert truncated[0]["position"] == truncated[0]["read_bytes"] > 0
    assert any(f"input '{cut}' was read only in part" in w for w in report.warnings), report.warnings


@pytest.mark.slow
def test_reader_reads_a_plain_output_beside_a_chat_output(tmp_path, chat_tokenizer_dir):
    """Each output has its own columns: the plain one has no `loss_mask` although the chat one does."""
    from easydata.reader import TokenReader

    write_jsonl(tmp_path / "web.jsonl", [{"text": t} for t in make_texts(50, seed=1)])
    write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": f"q{i}"},
                                                         {"role": "assistant", "content": f"a{i}"}]} for i in range(30)])
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(tmp_path / "web.jsonl")},
                     {"name": "chat", "data_files": str(tmp_path / "chat.jsonl"), "content_field": "messages"}],
        "chat": {"template": str(CHATML)},
        "pack": {"enabled": True, "seq_length": 32},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1},
    })
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
    assert "loss_mask" in manifest["datasets"]["chat"]["columns"]
    assert "loss_mask" not in manifest["datasets"]["web"]["columns"]
    web = next(iter(TokenReader(str(tmp_path / "out"), batch_size=4, name="web", prefetch=0)))
    chat = next(iter(TokenReader(str(tmp_path / "out"), batch_size=4, name="chat", prefetch=0)))
    assert "loss_mask" not in web and web["input_ids"].shape == (4, 32)
    assert "loss_mask" in chat and chat["loss_mask"].shape == (4, 32)
    assert validate_output(str(tmp_path / "out")).ok


def test_a_template_bomb_is_one_dead_letter_and_the_run_goes_on(tmp_path, chat_tokenizer_dir):
    """A template that builds a 10 GB string for one record: that record is dead-lettered (the sandbox
    refuses the value before building it), every other record is written."""
    template = ("{% for m in messages %}{% if m.content == 'boom' %}{{ 'A' * 10**10 }}{% endif %}"
                "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    chats = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
             for i in range(10)]
    chats.insert(4, {"messages": [{"role": "user", "content": "boom"}, {"role": "assistant", "content": "x"}]})
    write_jsonl(tmp_path / "chat.jsonl", chats)
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir),
        "datasets": [{"name": "chat", "data_files": str(tmp_path / "chat.jsonl"), "content_field": "messages"}],
        "chat": {"template": template},
        "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1},
    })
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
    assert (manifest["documents_written"], manifest["documents_rejected"]) == (10, 1)
    (line,) = [json.loads(line) for path in (tmp_path / "out" / "rejected").rglob("*.jsonl")
               for line in path.read_text().splitlines()]
    assert line["reason"].startswith("chat template error: SecurityError: the template builds a value of"
                                     " 10,000,000,000 items")
