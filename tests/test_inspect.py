"""Tests for `easydata.tools.inspect`: the summary lines come from the manifest, rows are decoded with the
manifest's tokenizer (raw ids when it is not available here), and packed rows show their segment
boundaries and padding."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pytest

from easydata.errors import ValidationFailed
from easydata.tools.inspect import inspect_output
from easydata.text.tokenizer import TokenizerHandle, load_tokenizer
from tests.conftest import write_synthetic_output

TOKENS = pa.list_(pa.int32())
SCHEMA = pa.schema([("input_ids", TOKENS), ("attention_mask", TOKENS), ("path", pa.string())])
PACKED_SCHEMA = pa.schema([(c, TOKENS) for c in ("input_ids", "segment_ids", "positions", "attention_mask")])
TEXTS = ["the model reads tokens", "café 東京 🙂", "line one\nline two"]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir: Path) -> TokenizerHandle:
    return load_tokenizer(str(tokenizer_dir))


def manifest_tokenizer(tokenizer: TokenizerHandle, name_or_path: Optional[str] = None) -> dict[str, Any]:
    info = tokenizer.info
    return {"name_or_path": name_or_path or info.name_or_path, "content_hash": info.content_hash,
            "vocab_size": info.vocab_size, "bos_token_id": info.bos_token_id, "eos_token_id": info.eos_token_id,
            "pad_token_id": info.pad_token_id}


def encode(tokenizer: TokenizerHandle, text: str) -> list[int]:
    return tokenizer.tokenizer.encode(text, add_special_tokens=False).ids + [tokenizer.eos_token_id]


def unpacked_output(root: Path, tokenizer: TokenizerHandle, name_or_path: Optional[str] = None) -> Path:
    rows = [{"input_ids": ids, "attention_mask": [1] * len(ids), "path": path}
            for ids, path in zip([encode(tokenizer, t) for t in TEXTS], ["a.py", None, "x" * 100])]
    out = root / "out"
    write_synthetic_output(str(out), {"web": [rows[:2], rows[2:]], "empty": []}, SCHEMA,
                           tokenizer=manifest_tokenizer(tokenizer, name_or_path))
    return out


def test_summary_and_decoded_rows(tmp_path: Path, tokenizer: TokenizerHandle, tokenizer_dir: Path) -> None:
    out = unpacked_output(tmp_path, tokenizer)
    lengths = [len(encode(tokenizer, t)) for t in TEXTS]
    text = inspect_output(str(out), num_rows=3)
    lines = text.splitlines()
    info = tokenizer.info
    assert lines[0] == f"output:     {out}"
    assert lines[1].startswith("created:    20") and lines[1].endswith("  (format_version 1)")
    assert lines[2:6] == [
        "format:     parquet / none",
        f"tokenizer:  {tokenizer_dir}  vocab {info.vocab_size}  bos {info.bos_token_id}  eos {info.eos_token_id}"
        f"  pad {info.pad_token_id}",
        "schema:     input_ids, attention_mask, path  packed=False  seq_length=None",
        f"totals:     3 rows, {sum(lengths)} tokens, 2 shards; documents in 5, written 3, rejected 2",
    ]
    # Datasets in name order; an empty one gets its header only. Only the first shard is read.
    assert lines[6:] == [
        "",
        "[empty] 0 shards, 0 rows, 0 tokens",
        "",
        f"[web] 2 shards, 3 rows, {sum(lengths)} tokens",
        f"  row 0: {lengths[0]} tokens  path=a.py",
        "    the model reads tokens</s>",
        f"  row 1: {lengths[1]} tokens  path=None",
        "    café 東京 🙂</s>",
    ]
    assert "tokenizer not available" not in text


def test_rows_span_record_batches_and_stop_at_num_rows(tmp_path: Path) -> None:
    rows = [{"input_ids": [i, i + 1], "attention_mask": [1, 1], "path": f"f{i}"} for i in range(7)]
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [rows]}, SCHEMA, row_group_size=2)  # 4 record batches
    lines = inspect_output(str(out), num_rows=5).splitlines()
    shown = [line for line in lines if line.startswith("  row ")]
    assert shown == [f"  row {i}: 2 tokens  path=f{i}" for i in range(5)]
    assert lines[lines.index("  row 4: 2 tokens  path=f4") + 1] == "    4 5"
    assert lines[-1] == "(tokenizer not available here: showing token ids)"


def test_multiline_text_and_long_fields(tmp_path: Path, tokenizer: TokenizerHandle) -> None:
    ids = encode(tokenizer, TEXTS[2])
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [[{"input_ids": ids, "attention_mask": [1] * len(ids),
                                                "path": "x" * 100}]]}, SCHEMA, tokenizer=manifest_tokenizer(tokenizer))
    lines = inspect_output(str(out), num_rows=1).splitlines()
    # Extra fields are cut to 60 characters; a newline in the text keeps the row's indentation.
    assert lines[-3:] == [f"  row 0: {len(ids)} tokens  path={'x' * 60}", "    line one", "    line two</s>"]


def test_falls_back_to_ids_when_the_tokenizer_is_missing(tmp_path: Path, tokenizer: TokenizerHandle) -> None:
    missing = str(tmp_path / "tokenizer-on-another-machine")
    out = unpacked_output(tmp_path, tokenizer, name_or_path=missing)
    lines = inspect_output(str(out), num_rows=1).splitlines()
    ids = encode(tokenizer, TEXTS[0])
    assert lines[3].startswith(f"tokenizer:  {missing}  vocab ")
    assert lines[-4:] == [f"  row 0: {len(ids)} tokens  path=a.py", "    " + " ".join(map(str, ids)), "",
                          "(tokenizer not available here: showing token ids)"]


def test_zero_rows_shows_only_the_summary(tmp_path: Path, tokenizer: TokenizerHandle) -> None:
    out = unpacked_output(tmp_path, tokenizer, name_or_path=str(tmp_path / "missing"))
    text = inspect_output(str(out), num_rows=0)
    assert "row 0" not in text and "tokenizer not available" not in text
    assert text.splitlines()[-1].startswith("[web] 2 shards, 3 rows, ")


def test_long_rows_are_cut(tmp_path: Path) -> None:
    ids = list(range(1000, 1300))  # 300 ids of 4 digits: 1,499 characters
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [[{"input_ids": ids, "attention_mask": [1] * 300, "path": "p"}]]},
                           SCHEMA, tokenizer={"name_or_path": None, "vocab_size": 2000})
    body = inspect_output(str(out), num_rows=1).splitlines()[-3]
    full = " ".join(map(str, ids))
    assert body == "    " + full[:600] + f"… (+{len(full) - 600} chars)"


def packed_output(root: Path, rows: list[tuple[list[int], list[int]]],
                  tokenizer: Optional[dict[str, Any]] = None) -> Path:
    """Packed rows from `(input_ids, segment_ids)` pairs (seq_length = row length)."""
    table = []
    for ids, segments in rows:
        positions, last = [], None
        for s in segments:
            positions.append(0 if s != last else positions[-1] + 1)
            last = s
        table.append({"input_ids": ids, "segment_ids": segments, "positions": positions,
                      "attention_mask": [int(s > 0) for s in segments]})
    out = root / "packed"
    write_synthetic_output(str(out), {"mixed": [table]}, PACKED_SCHEMA, seq_length=len(rows[0][0]),
                           tokenizer=tokenizer)
    return out


def test_packed_rows_show_segments_and_padding_as_ids(tmp_path: Path) -> None:
    out = packed_output(tmp_path, [
        ([10, 11, 12, 20, 21, 30, 0, 0], [1, 1, 1, 2, 2, 3, 0, 0]),
        ([40, 41, 42, 43, 44, 45, 46, 47], [1, 1, 1, 1, 1, 1, 1, 1]),
        ([50, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]),
    ])
    lines = inspect_output(str(out), num_rows=3).splitlines()
    assert "schema:     input_ids, segment_ids, positions, attention_mask  packed=True  seq_length=8" in lines
    assert lines[-8:] == [
        "  row 0: 8 tokens",
        "    10 11 12 ‖ 20 21 ‖ 30 ‖ <2 pad>",
        "  row 1: 8 tokens",
        "    40 41 42 43 44 45 46 47",
        "  row 2: 8 tokens",
        "    50 ‖ <7 pad>",
        "",
        "(tokenizer not available here: showing token ids)",
    ]


def test_packed_rows_decoded(tmp_path: Path, tokenizer: TokenizerHandle) -> None:
    first, second = encode(tokenizer, "the model"), encode(tokenizer, "reads tokens")
    pad = tokenizer.pad_token_id
    ids = first + second + [pad] * 3
    segments = [1] * len(first) + [2] * len(second) + [0] * 3
    out = packed_output(tmp_path, [(ids, segments)], tokenizer=manifest_tokenizer(tokenizer))
    lines = inspect_output(str(out), num_rows=1).splitlines()
    assert lines[-2:] == [f"  row 0: {len(ids)} tokens", "    the model</s> ‖ reads tokens</s> ‖ <3 pad>"]


def test_no_manifest(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match="has no manifest.json"):
        inspect_output(str(tmp_path))


@pytest.mark.parametrize("command, damage", [  # (inspect sizes nothing by seq_length: it shows rows as they are)
    ("inspect", "empty"), ("inspect", "truncated"), ("stats", "empty"), ("stats", "truncated"),
    ("stats", "absurd-seq-length")])
def test_a_damaged_shard_or_manifest_is_one_line_not_a_traceback(tmp_path: Path, tokenizer: TokenizerHandle,
                                                                  command: str, damage: str, capsys) -> None:
    """Before: tracebacks from pyarrow (and numpy, for seq_length 10**15), as `validate` never gave."""
    import json

    from easydata.cli import main

    out = unpacked_output(tmp_path, tokenizer)
    manifest = json.loads((out / "manifest.json").read_text())
    shard = out / manifest["datasets"]["web"]["shards"][0]["path"]
    if damage == "absurd-seq-length":
        packed = tmp_path / "packed"
        write_synthetic_output(str(packed), {"web": [[{"input_ids": [1, 2, 3, 0], "segment_ids": [1, 1, 2, 0]}]]},
                               pa.schema([("input_ids", TOKENS), ("segment_ids", TOKENS)]), seq_length=4)
        manifest = json.loads((packed / "manifest.json").read_text())
        manifest["schema"]["seq_length"] = 10**15
        (packed / "manifest.json").write_text(json.dumps(manifest))
        out = packed
    else:
        shard.write_bytes(b"" if damage == "empty" else shard.read_bytes()[:100])
    code = main([command, str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    if damage == "absurd-seq-length":
        assert err.endswith("manifest seq_length 1000000000000000 is not a packed row length in [1, 2,097,152]"), err
    else:
        assert err.startswith(f"easydata: error: shard '{shard}' is unreadable (ArrowInvalid: "), err


def test_a_chat_outputs_trained_spans_are_marked_and_stats_give_the_trained_share(tmp_path, tokenizer):
    """SFT outputs: `inspect` marks the tokens a row trains on (loss_mask 1) in the decoded text, and `stats`
    gives each output's trained tokens and their share (the manifest's `trained_tokens`)."""
    import json

    from easydata.tools.inspect import TRAINED_CLOSE, TRAINED_OPEN
    from easydata.tools.stats import compute_stats, format_stats

    prompt, answer = encode(tokenizer, "what is a token")[:-1], encode(tokenizer, "a piece of text")
    ids = prompt + answer + [0, 0]
    row = {"input_ids": ids, "segment_ids": [1] * (len(ids) - 2) + [0, 0], "positions": list(range(len(ids) - 2)) + [0, 0],
           "loss_mask": [0] * len(prompt) + [1] * len(answer) + [0, 0]}
    schema = pa.schema([(c, TOKENS) for c in ("input_ids", "segment_ids", "positions", "loss_mask")])
    out = tmp_path / "sft"
    manifest = write_synthetic_output(str(out), {"chat": [[row]]}, schema, seq_length=len(ids),
                                      tokenizer=manifest_tokenizer(tokenizer))
    manifest["datasets"]["chat"]["trained_tokens"] = len(answer)
    (out / "manifest.json").write_text(json.dumps(manifest))
    text = inspect_output(str(out), num_rows=1)
    rendered = text.split("row 0:", 1)[1].split("\n(", 1)[0]
    assert rendered.count(TRAINED_OPEN) == rendered.count(TRAINED_CLOSE) == 1
    before, trained = rendered.split(TRAINED_OPEN, 1)[0], rendered.split(TRAINED_OPEN, 1)[1].split(TRAINED_CLOSE, 1)[0]
    assert "what is a token" in before and "what is a token" not in trained  # the prompt is not trained on
    assert tokenizer.tokenizer.decode(answer[:-1]).strip() in trained
    assert "<2 pad>" in text and "loss_mask 1" in text
    table = format_stats(compute_stats(str(out)))
    assert f"trained tokens (loss_mask 1) {len(answer):,}, {100 * len(answer) / (len(ids) - 2):.1f}% of its tokens" in table
