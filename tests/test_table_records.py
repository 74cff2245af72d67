"""A Parquet or Arrow table's records are what the same records are as JSON lines (`tables.columns_needed`): a
`messages` column or `prompt`/`completion` columns make chat records when the content field is absent, as their
keys do in a JSON line. A table read only its content field and additional fields, so a chat table was all
dead letters ("missing content field 'text'") and planning refused it, naming no field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from easydata.config import DatasetConfig, PipelineConfig
from easydata.io.sources import plan_input, read_splits, text_bytes
from easydata.run.run_plan import prepare_run

CHATML = Path(__file__).parent / "chat_templates" / "chatml.jinja"

_CHAT = [{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{i}"},
                       {"role": "assistant", "content": f"a{i} " * (i % 5)}] if i % 7 else [], "id": i}
         for i in range(40)]  # every 7th conversation empty: a dead letter either way
_PAIRS = [{"prompt": f"p{i}" if i % 9 else None, "completion": f"c{i}", "id": i} for i in range(40)]
_CONVERSATIONAL_PAIRS = [{"prompt": [{"role": "user", "content": f"q{i}"}],
                          "completion": [{"role": "assistant", "content": f"a{i}"}] if i % 8 else [], "id": i}
                         for i in range(40)]  # TRL's conversational prompt-completion; every 8th completion empty
_ALPACA = [{"instruction": f"i{i}", "input": f"x{i}" if i % 3 else "", "output": f"o{i}" if i % 11 else None,
            "system": "be brief" if i % 2 else "", "history": [[f"h{i}", f"a{i}"]] if i % 4 == 1 else None, "id": i}
           for i in range(40)]  # LLaMA-Factory's Alpaca; every 11th output missing: a dead letter either way
_TOOL_CALLS = [{"messages": [{"role": "user", "content": f"q{i}"},
                             {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                                 "name": "f", "arguments": f'{{"n": {i}}}'}}]} if i % 2 else
                             {"role": "assistant", "content": f"a{i}", "weight": 1},
                             {"role": "tool", "content": "3"}, {"role": "assistant", "content": f"b{i}"}], "id": i}
               for i in range(40)]  # a table gives every message every key (`tool_calls: null`, `weight: null`)
_TEXT_AND_CHAT = [{"text": f"document {i}", "messages": [{"role": "user", "content": f"q{i}"}], "id": i}
                  for i in range(40)]


def _write(path: Path, records: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=16)
    else:
        table = pa.Table.from_pylist(records)
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table, max_chunksize=16)
    return path


def _read(path: Path) -> tuple[list, list]:
    """Documents (text, conversation, id) and dead-letter reasons, in order."""
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["id"])
    rejects: list = []
    documents = []
    for batch in read_splits(plan_input(ds, target_bytes=2048).splits, ds, batch_size=7, rejects=rejects):
        conversations = batch.conversations or [None] * len(batch)
        documents.extend(zip(batch.texts, [c and c.messages for c in conversations], batch.fields["id"]))
    return documents, [r.reason for r in rejects]


@pytest.mark.parametrize("records", [_CHAT, _PAIRS, _CONVERSATIONAL_PAIRS, _ALPACA, _TOOL_CALLS, _TEXT_AND_CHAT],
                         ids=["messages", "pairs", "conversational-pairs", "alpaca", "tool-calls", "text-and-messages"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_tables_records_are_its_json_lines_records(tmp_path: Path, records, suffix):
    expected = _read(_write(tmp_path / "data.jsonl", records))
    got = _read(_write(tmp_path / f"data{suffix}", records))
    assert got == expected
    documents, rejected = got
    assert len(documents) + len(rejected) == 40 and len(documents) >= 34
    if records is not _TEXT_AND_CHAT:
        assert all(conversation for _, conversation, _ in documents)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_binary_content_column_is_read_as_utf8_text(tmp_path: Path, suffix):
    """Parquet written without the UTF-8 annotation (older Hive and Impala writers) holds text in a BINARY
    column, which Arrow reads as bytes: every record was a dead letter ("is a bytes, not a string")."""
    texts = [f"document {i} üñï" for i in range(30)]
    as_text = _read(_write(tmp_path / f"text{suffix}", [{"text": t, "id": i} for i, t in enumerate(texts)]))
    table = pa.table({"text": pa.array([t.encode() for t in texts] + [b"\xff\xfe not text"], pa.binary()),
                      "id": list(range(31))})
    path = tmp_path / f"binary{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    documents, rejected = _read(path)
    assert documents == as_text[0] and len(documents) == 30
    assert rejected == ["content field 'text' holds bytes that are not UTF-8 text (invalid start byte at byte 0)"]


def test_a_chat_parquet_dataset_runs_with_the_default_content_field(tmp_path: Path, chat_tokenizer_dir):
    """Planning's content-field check passed it, and the run renders its conversations: the same rows as its
    JSON lines' (keys differ, so compared as sorted rows)."""
    from beam_pipelines.batch import run_batch

    rows = {}
    for suffix in (".jsonl", ".parquet"):
        path = _write(tmp_path / f"chat{suffix}", _CHAT)
        config = PipelineConfig.from_dict({
            "default_tokenizer": str(chat_tokenizer_dir), "chat": {"template": str(CHATML)},
            "datasets": [{"name": "chat", "data_files": str(path)}],
            "save": {"output_dir": str(tmp_path / f"out{suffix}")}})
        prepare_run(config)  # planning's checks
        manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
        assert (manifest["documents_written"], manifest["documents_rejected"]) == (34, 6)
        table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / f"out{suffix}").rglob("part-*.parquet")))
        rows[suffix] = sorted(zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist()))
    assert rows[".parquet"] == rows[".jsonl"] and len(rows[".jsonl"]) == 34


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
@pytest.mark.parametrize("twice", ["id", "text"])
def test_a_column_the_dataset_reads_named_twice_is_a_dead_letter(tmp_path: Path, suffix, twice):
    """Arrow allows two columns of one name; reading one by that name raised a KeyError, a traceback at planning.
    A column read by name must have one; a column not read may share its name."""
    n = 12
    columns = {"text": pa.array([f"document {i}" for i in range(n)]), "id": pa.array(range(n)), "x": pa.array([0] * n)}
    names = ["text", "id", twice, "x", "x"]
    path = _write_table(pa.Table.from_arrays([columns[c] for c in names], names=names), tmp_path / f"twice{suffix}")
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["id"])
    assert text_bytes(plan_input(ds).splits, ds) > 0  # planning counts the file at its size
    rejects: list = []
    assert list(read_splits(plan_input(ds).splits, ds, rejects=rejects)) == []
    assert sum(r.records for r in rejects) == n  # each row a dead letter, as a corrupt row group's are
    documents, rejected = _read(path)
    assert documents == [] and len(rejected) == 1
    assert rejected[0].endswith(f"InputError: the table has 2 columns named '{twice}', a column the dataset reads:"
                                " give them distinct names")
    unread = _write_table(pa.Table.from_arrays([columns[c] for c in ["text", "id", "x", "x"]],
                                               names=["text", "id", "x", "x"]), tmp_path / f"unread-twice{suffix}")
    documents, rejected = _read(unread)
    assert len(documents) == n and rejected == []


def _write_table(table: pa.Table, path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    return path


def test_conversational_pairs_are_prompt_then_completion(tmp_path: Path):
    """Two lists of messages were a "missing content field 'text'" dead letter each; a str and a list is one
    naming both types."""
    path = _write(tmp_path / "pairs.jsonl", [*_CONVERSATIONAL_PAIRS[:2], {"prompt": "p", "completion": [], "id": 2}])
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["id"])
    rejects: list = []
    batches = list(read_splits(plan_input(ds).splits, ds, batch_size=7, rejects=rejects))
    conversations = [c for b in batches for c in b.conversations]
    assert [c.messages[1]["content"] for c in conversations] == ["a1"]  # the first's completion is empty
    assert conversations[0].first_trained == 1
    assert [r.reason for r in rejects] == ["completion must be a non-empty list of messages",
                                           "prompt and completion must both be strings or both lists of messages,"
                                           " got a str and a list"]


def test_weight_0_turns_of_a_chat_table_are_not_trained(tmp_path: Path, chat_tokenizer_dir):
    """OpenAI's fine-tuning format in a Parquet table: messages without a weight hold null there, one with weight 0
    is context. Every turn was trained."""
    from beam_pipelines.batch import run_batch
    from tokenizers import Tokenizer

    def turns(i: int) -> list[dict]:
        return [{"role": "user", "content": f"q{i}", "weight": None},
                {"role": "assistant", "content": f"wrong{i}", "weight": 0 if i % 2 else None},
                {"role": "user", "content": "again", "weight": None},
                {"role": "assistant", "content": f"right{i}", "weight": 1}]

    path = _write(tmp_path / "chat.parquet", [{"messages": turns(i)} for i in range(6)])
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(chat_tokenizer_dir), "chat": {"template": str(CHATML)},
        "datasets": [{"name": "chat", "data_files": str(path)}], "save": {"output_dir": str(tmp_path / "out")}})
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
    assert (manifest["documents_written"], manifest["documents_rejected"]) == (6, 0)
    table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "out").rglob("part-*.parquet")))
    tokenizer = Tokenizer.from_file(str(chat_tokenizer_dir / "tokenizer.json"))
    trained = sorted(tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False).replace(" ", "")
                     for ids, mask in zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist()))
    expected = sorted((f"right{i}<|im_end|>" if i % 2 else f"wrong{i}<|im_end|>right{i}<|im_end|>") for i in range(6))
    assert trained == expected


@pytest.mark.parametrize("key", ["tools", "functions"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_chat_tables_tool_definitions_reach_the_template(tmp_path: Path, suffix, key):
    """A table read only its content and chat columns: a `tools` column was left out, so the template wrote no
    tool list for any conversation of a table, where the same records as JSON lines had it. OpenAI's legacy
    `functions` (and an assistant's `function_call`) are its `tools` (and `tool_calls`)."""
    function = {"name": "get_weather", "description": "weather", "parameters": {"city": "string"}}
    call = {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    records = [{"messages": [{"role": "user", "content": f"q{i}"},
                             {"role": "assistant", "content": None, "function_call": call},
                             {"role": "function", "content": "3", "name": "get_weather"},
                             {"role": "assistant", "content": f"a{i}"}],
                key: [function if key == "functions" else {"type": "function", "function": function}]}
               for i in range(3)]
    seen = {}
    for kind in (".jsonl", suffix):
        path = _write(tmp_path / f"chat{kind}", records)
        ds = DatasetConfig(name="d", data_files=str(path))
        rejects: list = []
        batches = list(read_splits(plan_input(ds).splits, ds, batch_size=7, rejects=rejects))
        assert rejects == []
        seen[kind] = [(c.tools, c.messages[1]["tool_calls"]) for b in batches for c in b.conversations]
    assert seen[suffix] == seen[".jsonl"] == [([{"type": "function", "function": function}],
                                               [{"type": "function", "function": call}])] * 3


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_chat_tables_system_column_is_the_system_prompt(tmp_path: Path, suffix):
    """LLaMA-Factory's ShareGPT tables keep the system prompt in a `system` column (`""` for none) and the tools
    as a JSON string. A table read only its content and chat columns, so the prompt was in no row of a table, as
    it was in no row of the same JSON lines."""
    records = [{"messages": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}],
                "system": "Be brief." if i % 2 else "", "tools": '[{"name": "f"}]', "id": i} for i in range(4)]
    seen = {}
    for kind in (".jsonl", suffix):
        documents, rejects = _read(_write(tmp_path / f"chat{kind}", records))
        assert rejects == []
        seen[kind] = [messages for _, messages, _ in documents]
    assert seen[suffix] == seen[".jsonl"]
    assert [[m["role"] for m in messages] for messages in seen[suffix]] == [
        ["user", "assistant"], ["system", "user", "assistant"]] * 2
    assert seen[suffix][1][0] == {"role": "system", "content": "Be brief."}


def _documents(path: Path, content_field: str) -> tuple[list, list]:
    ds = DatasetConfig(name="d", data_files=str(path), content_field=content_field)
    rejects: list = []
    documents = []
    for batch in read_splits(plan_input(ds).splits, ds, batch_size=7, rejects=rejects):
        conversations = batch.conversations or [None] * len(batch)
        documents.extend((text, c and c.messages) for text, c in zip(batch.texts, conversations))
    return documents, [r.reason for r in rejects]


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".arrow", ".jsonl"])
@pytest.mark.parametrize("system", [False, True])
def test_a_chat_record_kept_as_json_text_is_a_conversation(tmp_path: Path, suffix, system):
    """A CSV file cannot hold a list, so a chat dataset in CSV keeps each conversation as JSON text (and some
    Parquet exports do too): it was tokenized as that JSON, `[{"role": "user", ...`, with no template and no
    loss mask, and nothing said so. Text that is not an array of messages stays text (CSV, tables and JSON
    lines each judge it on another path: rows column-wise, blocks of plain lines parsed by Arrow)."""
    import csv

    messages = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(6)]
    texts = ["[1] An introduction.", '[{"id": 1}]', "[]", "  [ not json", '["role", "from"]']
    records = [{"messages": json.dumps(m), **({"system": "Be brief."} if system else {})} for m in messages] + \
        [{"messages": t, **({"system": "Be brief."} if system else {})} for t in texts]
    path = tmp_path / f"chat{suffix}"
    if suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    else:
        _write(path, records)
    documents, rejects = _documents(path, "messages")
    assert rejects == []
    head = [{"role": "system", "content": "Be brief."}] if system else []
    assert documents == [("", head + m) for m in messages] + [(t, None) for t in texts]
    as_lists = _write(tmp_path / "lists.jsonl", [{**r, "messages": m} for r, m in zip(records, messages)])
    assert _documents(as_lists, "messages")[0] == documents[:6]
    # only a chat field's text (`messages`, `conversations`, `chat.messages_field`): a code corpus's JSON is text
    assert _documents(path, "text") == (documents[:6], ["missing content field 'text'"] * 5)  # `messages` instead
    code = tmp_path / f"code{suffix}"
    if suffix == ".csv":
        code.write_text("content\n" + "".join('"' + json.dumps(m).replace('"', '""') + '"\n' for m in messages))
    else:
        _write(code, [{"content": json.dumps(m)} for m in messages])
    assert _documents(code, "content") == ([(json.dumps(m), None) for m in messages], [])


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_a_chat_record_kept_as_json_text_gets_the_checks_its_messages_get(tmp_path: Path, suffix):
    """A lone surrogate escaped in JSON text (`\\ud800`) is a lone surrogate in the decoded message: the record
    checks ran on the text, where the escape is six plain characters, so the conversation went on to the
    template and the tokenizer, while the same messages as a list were a dead letter."""
    text = '[{"role": "user", "content": "a \\ud800 b"}, {"role": "assistant", "content": "ok"}]'
    path = tmp_path / f"chat{suffix}"
    if suffix == ".csv":
        path.write_text('messages\n"' + text.replace('"', '""') + '"\n')
    else:
        _write(path, [{"messages": text}])
    documents, rejects = _documents(path, "messages")
    assert documents == [] and rejects == [_documents(_write(tmp_path / "list.jsonl", [
        {"messages": json.loads(text)}]), "messages")[1][0]]
    assert "lone UTF-16 surrogate" in rejects[0]


def test_lmsys_and_wildchat_conversation_as_json_text(tmp_path: Path):
    """LMSYS-Chat-1M and WildChat name their messages `conversation`; kept as JSON text in a CSV file, it was
    tokenized as its JSON."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path = tmp_path / "chat.csv"
    path.write_text('conversation,model\n"' + json.dumps(messages).replace('"', '""') + '",vicuna-13b\n')
    assert _documents(path, "conversation") == ([("", messages)], [])


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_gemini_table_is_its_json_lines(tmp_path: Path, suffix):
    """Gemini's tuning records as a table: a part has every key any part has (`text: null` beside a
    `functionCall`), as a message has every key any message has; they read as the same records' JSON lines."""
    records = [{"systemInstruction": {"parts": [{"text": "Be brief."}]} if i % 2 else None, "contents": [
        {"role": "user", "parts": [{"text": f"q{i}"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"n": i}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": i}}}]},
        {"role": "model", "parts": [{"text": "hm", "thought": True}, {"text": f"a{i}"}]}]} for i in range(4)]
    seen = {kind: _documents(_write(tmp_path / f"g{kind}", records), "contents") for kind in (".jsonl", suffix)}
    assert seen[suffix] == seen[".jsonl"] and seen[suffix][1] == []
    assert [[m["role"] for m in messages] for _, messages in seen[suffix][0]] == [
        ["user", "assistant", "tool", "assistant"], ["system", "user", "assistant", "tool", "assistant"]] * 2


@pytest.mark.parametrize("suffix", ["parquet", "arrow", "csv"])
def test_a_table_without_the_content_column_is_a_dead_letter_per_slice_not_per_row(tmp_path, suffix) -> None:
    """A dataset whose files name the text column differently (`text` in one, `content` in another, as exports
    of one corpus by two tools do) wrote a dead letter per row of the other file, each with the excerpt "{}"
    (hostile round 9): a million-row file was a million lines. The rows are counted as before."""
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather

    from easydata.io.sources import plan_input, read_splits

    pq.write_table(pa.table({"text": ["kept"]}), tmp_path / "a.parquet")
    other = pa.table({"content": [f"row {i}" for i in range(3000)], "id": list(range(3000))})
    path = tmp_path / f"b.{suffix}"
    {"parquet": pq.write_table, "arrow": feather.write_feather, "csv": pcsv.write_csv}[suffix](other, path)
    for limit in (None, 1200):
        ds = DatasetConfig(name="d", data_files=[str(tmp_path / "a.parquet"), str(path)],
                           num_rows=None if limit is None else limit + 1)
        rejects: list = []
        texts = [t for b in read_splits(plan_input(ds).splits, ds, rejects=rejects, limit=ds.num_rows) for t in b.texts]
        assert texts == ["kept"]
        assert sum(r.records for r in rejects) == (limit or 3000) and len(rejects) <= 8
        assert {r.reason for r in rejects} == {"missing content field 'text'"}
        assert rejects[0].excerpt.endswith("of a table without that column") and rejects[0].fields == ("content", "id")
