"""Tests for `easydata.text.tokenizer` and `easydata.text.tokenizer_training`: ids equal the tokenizer's own,
special tokens come from the tokenizer files, truncation keeps BOS/EOS, offline loading errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from easydata.config import TokenizerConfig
from easydata.errors import TokenizerError
from easydata.text import tokenizer as tokenizer_module
from easydata.text.tokenizer import TokenizerHandle, _apply_specials, load_tokenizer, preload_tokenizers, \
    resolve_tokenizer_files, shared_tokenizer
from easydata.text.tokenizer_training import DEFAULT_SPECIAL_TOKENS, train_bpe_tokenizer

from tests.conftest import make_texts

# Varied real text: unicode (accents, CJK, RTL, emoji, combining marks), code, odd whitespace.
VARIED_TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nand a carriage\r\nreturn",
    "café naïve résumé — “quotes” «guillemets» ½ ∑ π ≠ ∞",
    "東京は日本の首都です。数据处理管道。한국어 텍스트",
    "مرحبا بالعالم עברית",
    "emoji 🙂👍🏽 👨‍👩‍👧 flags 🇫🇷 and e\u0301 combining",
    "def pack(lengths, capacity):\n    return [l for l in lengths if l <= capacity]  # comment\n",
    "for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; }",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "<html><body><p class=\"x\">markup &amp; entities</p></body></html>",
    "numbers 1234567890 3.14159 -42 1e-10 0x1F",
    "a" * 300,
    " ",
    "\n",
    "x",
    *make_texts(20, seed=11),
]


@pytest.fixture(params=["trained", "mistral"])
def any_tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """Each test runs with the session's small BPE and with the real Mistral tokenizer (when present)."""
    return request.getfixturevalue("tokenizer_dir" if request.param == "trained" else "mistral_tokenizer_dir")


def _docs(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    assert flat.dtype == np.int32 and offsets.dtype == np.int64
    assert offsets[0] == 0 and offsets[-1] == len(flat) and np.all(np.diff(offsets) >= 0)
    return [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def _copy_tokenizer(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---- ids equal the tokenizer's own ---------------------------------------------------------------


def test_ids_equal_the_tokenizers_own_ids(any_tokenizer_dir: Path) -> None:
    own = Tokenizer.from_file(str(any_tokenizer_dir / "tokenizer.json"))
    handle = load_tokenizer(str(any_tokenizer_dir))
    flat, offsets = handle.encode_batch(VARIED_TEXTS, add_bos=None, add_eos=False)
    docs = _docs(flat, offsets)
    assert len(docs) == len(VARIED_TEXTS)
    for text, ids in zip(VARIED_TEXTS, docs):
        assert ids == own.encode(text).ids, text


def test_add_eos_appends_exactly_one_eos(any_tokenizer_dir: Path) -> None:
    own = Tokenizer.from_file(str(any_tokenizer_dir / "tokenizer.json"))
    handle = load_tokenizer(str(any_tokenizer_dir))
    eos = handle.eos_token_id
    assert eos == own.token_to_id("</s>")
    docs = _docs(*handle.encode_batch(VARIED_TEXTS, add_bos=None, add_eos=True))
    for text, ids in zip(VARIED_TEXTS, docs):
        assert ids == own.encode(text).ids + [eos], text


@pytest.mark.parametrize("add_eos", [False, True])
@pytest.mark.parametrize("add_bos", [False, True])
def test_explicit_add_bos(any_tokenizer_dir: Path, add_bos: bool, add_eos: bool) -> None:
    own = Tokenizer.from_file(str(any_tokenizer_dir / "tokenizer.json"))
    handle = load_tokenizer(str(any_tokenizer_dir))
    bos, eos = handle.bos_token_id, handle.eos_token_id
    docs = _docs(*handle.encode_batch(VARIED_TEXTS, add_bos=add_bos, add_eos=add_eos))
    for text, ids in zip(VARIED_TEXTS, docs):
        body = own.encode(text, add_special_tokens=False).ids
        assert ids == [bos] * add_bos + body + [eos] * add_eos, text


def test_batching_does_not_change_ids(any_tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(any_tokenizer_dir))
    for options in ({"add_bos": None, "add_eos": True}, {"add_bos": True, "add_eos": True, "max_length": 5}):
        batched = _docs(*handle.encode_batch(VARIED_TEXTS, **options))
        one_by_one = [_docs(*handle.encode_batch([t], **options))[0] for t in VARIED_TEXTS]
        assert batched == one_by_one


def test_mistral_literal_ids(mistral_tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(mistral_tokenizer_dir))
    assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (1, 2, None)
    assert handle.info.vocab_size == 32000
    cases = [
        ({"add_bos": None, "add_eos": False}, [1, 6312, 28709, 1526]),
        ({"add_bos": None, "add_eos": True}, [1, 6312, 28709, 1526, 2]),
        ({"add_bos": False, "add_eos": False}, [6312, 28709, 1526]),
        ({"add_bos": True, "add_eos": True}, [1, 6312, 28709, 1526, 2]),
    ]
    for options, expected in cases:
        assert _docs(*handle.encode_batch(["hello world"], **options)) == [expected], options


def test_special_tokens_already_present_are_not_doubled(mistral_tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(mistral_tokenizer_dir))
    docs = _docs(*handle.encode_batch(["<s>hi", "hello</s>"], add_bos=True, add_eos=True))
    assert docs == [[1, 5365, 2], [1, 6312, 28709, 2]]


# ---- truncation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_length, expected", [
    (1, [1]),
    (2, [1, 2]),
    (3, [1, 6312, 2]),
    (4, [1, 6312, 28709, 2]),
    (5, [1, 6312, 28709, 1526, 2]),  # exact fit: nothing cut
    (50, [1, 6312, 28709, 1526, 2]),
])
def test_truncation_keeps_bos_and_eos_literal(mistral_tokenizer_dir: Path, max_length: int,
                                              expected: list[int]) -> None:
    handle = load_tokenizer(str(mistral_tokenizer_dir))
    docs = _docs(*handle.encode_batch(["hello world"], add_bos=True, add_eos=True, max_length=max_length))
    assert docs == [expected]


def test_truncating_a_document_that_already_ends_with_eos_keeps_an_eos(mistral_tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(mistral_tokenizer_dir))
    # "hello</s>" encodes to [6312, 28709, 2]: the cut body loses its own EOS, so one is appended.
    assert _docs(*handle.encode_batch(["hello</s>"], add_bos=True, add_eos=True, max_length=3)) == [[1, 6312, 2]]
    assert _docs(*handle.encode_batch(["hello</s>"], add_bos=True, add_eos=True, max_length=4)) == \
        [[1, 6312, 28709, 2]]


def test_cut_documents_ending_with_eos_keep_bos_and_eos(any_tokenizer_dir: Path) -> None:
    own = Tokenizer.from_file(str(any_tokenizer_dir / "tokenizer.json"))
    handle = load_tokenizer(str(any_tokenizer_dir))
    bos, eos = handle.bos_token_id, handle.eos_token_id
    text = "the model reads tokens</s>"
    body = own.encode(text, add_special_tokens=False).ids
    assert body[-1] == eos and len(body) >= 4
    for max_length in range(2, len(body) + 3):
        (ids,) = _docs(*handle.encode_batch([text], add_bos=True, add_eos=True, max_length=max_length))
        expected = [bos] + body if max_length > len(body) else [bos] + body[:max_length - 2] + [eos]
        assert ids == expected, max_length


@pytest.mark.parametrize("add_bos", [None, True])
@pytest.mark.parametrize("max_length", [1, 2, 3, 8, 64])
def test_truncation_invariants(any_tokenizer_dir: Path, add_bos: bool | None, max_length: int) -> None:
    handle = load_tokenizer(str(any_tokenizer_dir))
    full = _docs(*handle.encode_batch(VARIED_TEXTS, add_bos=add_bos, add_eos=True))
    cut = _docs(*handle.encode_batch(VARIED_TEXTS, add_bos=add_bos, add_eos=True, max_length=max_length))
    bos, eos = handle.bos_token_id, handle.eos_token_id
    truncated = 0
    for text, whole, ids in zip(VARIED_TEXTS, full, cut):
        assert len(ids) == min(len(whole), max_length), text
        if len(whole) <= max_length:
            assert ids == whole
            continue
        truncated += 1
        if add_bos and max_length >= 1:
            assert ids[0] == bos
        if max_length >= 2 and (add_bos or whole[0] != bos):
            assert ids[-1] == eos
        keep_front = 1 if add_bos else 0
        body_end = len(ids) - (1 if ids[-1] == eos and len(ids) > keep_front else 0)
        assert ids[keep_front:body_end] == whole[keep_front:body_end], "body must be a prefix"
    assert truncated > 0, "the test must exercise truncation"


# ---- special-token layout (vectorised over a batch) -----------------------------------------------

BOS, EOS = 1, 2


def _layout_reference(docs: list[list[int]], bos: bool, eos: bool, max_length: int | None
                      ) -> tuple[list[list[int]], list[list[int]]]:
    """Document by document: BOS unless present, body, EOS unless present; a cut body keeps both, and a
    document cut to one token keeps its BOS. Also an aligned mark per position: 0 for an added special,
    9 for a kept input id."""
    ids, marks = [], []
    for doc in docs:
        front = [BOS] if bos and not doc[:1] == [BOS] else []
        back = [EOS] if eos and not doc[-1:] == [EOS] else []
        whole = front + doc + back
        if max_length == 1 and bos and len(whole) > 1:  # BOS before EOS when only one fits
            ids.append([BOS])
            marks.append([0] if front else [9])
            continue
        if max_length is not None:
            front = front[:max_length]
            if eos and len(front) + len(doc) + len(back) > max_length:
                back = [EOS]  # a cut document loses the EOS it may end with
            back = back[:max_length - len(front)]
            doc = doc[:max_length - len(front) - len(back)]
        ids.append(front + doc + back)
        marks.append([0] * len(front) + [9] * len(doc) + [0] * len(back))
    return ids, marks


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from([BOS, EOS, 5, 6, 7]), max_size=12), max_size=8),
       bos=st.booleans(), eos=st.booleans(), max_length=st.one_of(st.none(), st.integers(1, 14)))
def test_apply_specials_matches_per_document_reference(docs: list[list[int]], bos: bool, eos: bool,
                                                       max_length: int | None) -> None:
    """Adding specials, then truncating the one way documents are truncated (`cut_documents`), gives
    the per-document result, for the ids and for an aligned mask alike."""
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    flat = np.array([t for d in docs for t in d], dtype=np.int32)
    ids, offsets, marks = _apply_specials(flat, lengths, bos=BOS if bos else None, eos=EOS if eos else None,
                                          max_length=max_length, mask=np.full(len(flat), 9, dtype=np.int32))
    expected_ids, expected_marks = _layout_reference(docs, bos, eos, max_length)
    assert ids.dtype == marks.dtype == np.int32
    assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == expected_ids
    assert [marks[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == expected_marks


# ---- edge cases ----------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    {"add_bos": None, "add_eos": False},
    {"add_bos": None, "add_eos": True},
    {"add_bos": True, "add_eos": True},
    {"add_bos": False, "add_eos": True, "max_length": 3},
])
def test_empty_batch(tokenizer_dir: Path, options: dict) -> None:
    flat, offsets = load_tokenizer(str(tokenizer_dir)).encode_batch([], **options)
    assert flat.dtype == np.int32 and flat.tolist() == []
    assert offsets.dtype == np.int64 and offsets.tolist() == [0]


def test_empty_string(tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(tokenizer_dir))
    bos, eos = handle.bos_token_id, handle.eos_token_id
    cases = [
        ({"add_bos": None, "add_eos": False}, []),
        ({"add_bos": None, "add_eos": True}, [eos]),
        ({"add_bos": True, "add_eos": False}, [bos]),
        ({"add_bos": True, "add_eos": True}, [bos, eos]),
        ({"add_bos": True, "add_eos": True, "max_length": 1}, [bos]),
    ]
    for options, expected in cases:
        # Alone, in a batch of empty strings, and next to a non-empty document: always the same.
        assert _docs(*handle.encode_batch([""], **options)) == [expected], options
        assert _docs(*handle.encode_batch(["", ""], **options)) == [expected, expected], options
        assert _docs(*handle.encode_batch(["", "x"], **options))[0] == expected, options


def test_empty_string_with_the_tokenizers_own_bos(mistral_tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(mistral_tokenizer_dir))
    assert _docs(*handle.encode_batch([""], add_bos=None, add_eos=True)) == [[1, 2]]
    assert _docs(*handle.encode_batch([""], add_bos=True, add_eos=True)) == [[1, 2]]


def test_decode_round_trips_byte_level_bpe(tokenizer_dir: Path) -> None:
    handle = load_tokenizer(str(tokenizer_dir))
    texts = VARIED_TEXTS[:12]
    docs = _docs(*handle.encode_batch(texts, add_bos=None, add_eos=False))
    assert [handle.decode(ids) for ids in docs] == texts
    with_specials = _docs(*handle.encode_batch(["abc"], add_bos=True, add_eos=True))[0]
    assert handle.decode(with_specials) == "<s>abc</s>"
    assert handle.decode(with_specials, skip_special_tokens=True) == "abc"


# ---- special tokens ------------------------------------------------------------------------------


def test_special_token_ids_come_from_tokenizer_config(tokenizer_dir: Path) -> None:
    own = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    handle = load_tokenizer(str(tokenizer_dir))
    assert handle.bos_token_id == own.token_to_id("<s>") == 0
    assert handle.eos_token_id == own.token_to_id("</s>") == 1
    assert handle.pad_token_id == own.token_to_id("<pad>") == 2
    info = handle.info
    assert info.to_manifest() == {
        "name_or_path": str(tokenizer_dir), "content_hash": info.content_hash,
        "vocab_size": own.get_vocab_size(with_added_tokens=True),
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
    }


def test_declared_tokens_win_over_conventional_names(tokenizer_dir: Path, tmp_path: Path) -> None:
    # Declare EOS as `<pad>` and PAD as `</s>`, once as strings and once in the AddedToken dict form.
    for form in ("string", "dict"):
        copy = _copy_tokenizer(tokenizer_dir, tmp_path / form)
        config = json.loads((copy / "tokenizer_config.json").read_text())
        config["eos_token"] = "<pad>" if form == "string" else {"content": "<pad>", "special": True}
        config["pad_token"] = "</s>" if form == "string" else {"content": "</s>", "special": True}
        (copy / "tokenizer_config.json").write_text(json.dumps(config))
        handle = load_tokenizer(str(copy))
        assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (0, 2, 1), form


def test_special_tokens_map_is_read(tokenizer_dir: Path, tmp_path: Path) -> None:
    copy = _copy_tokenizer(tokenizer_dir, tmp_path / "tok")
    (copy / "tokenizer_config.json").unlink()
    (copy / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<pad>"}))
    handle = load_tokenizer(str(copy))
    assert handle.eos_token_id == 2
    assert handle.bos_token_id == 0, "undeclared tokens fall back to the conventional special names"


def test_without_config_files_special_tokens_are_found_by_name(tokenizer_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    shutil.copy(tokenizer_dir / "tokenizer.json", tmp_path / "tok" / "tokenizer.json")
    handle = load_tokenizer(str(tmp_path / "tok"))
    assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (0, 1, 2)


def test_overrides_pick_other_special_tokens(tokenizer_dir: Path) -> None:
    handle = load_tokenizer(TokenizerConfig(name_or_path=str(tokenizer_dir), bos_token="</s>", eos_token="<pad>",
                                            pad_token="<s>"))
    assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (1, 2, 0)
    assert handle.info.eos_token_id == 2
    flat, offsets = handle.encode_batch(["abc"], add_bos=True, add_eos=True)
    assert _docs(flat, offsets)[0][0] == 1 and _docs(flat, offsets)[0][-1] == 2


@pytest.mark.parametrize("kind", ["bos", "eos", "pad"])
def test_unknown_override_is_a_tokenizer_error(tokenizer_dir: Path, kind: str) -> None:
    config = TokenizerConfig(name_or_path=str(tokenizer_dir), **{f"{kind}_token": "<|nope|>"})
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(config)
    assert str(info.value) == f"{kind}_token '<|nope|>' is not in the vocabulary of '{tokenizer_dir}'"


# ---- loading -------------------------------------------------------------------------------------


def test_loads_from_directory_file_and_config(tokenizer_dir: Path) -> None:
    file = tokenizer_dir / "tokenizer.json"
    assert resolve_tokenizer_files(str(tokenizer_dir)) == (file, tokenizer_dir)
    assert resolve_tokenizer_files(str(file)) == (file, tokenizer_dir)
    by_dir = load_tokenizer(str(tokenizer_dir))
    by_file = load_tokenizer(str(file))
    by_config = TokenizerHandle(TokenizerConfig(name_or_path=str(tokenizer_dir)))
    assert by_file.eos_token_id == by_dir.eos_token_id == by_config.eos_token_id == 1
    assert by_file.info.content_hash == by_dir.info.content_hash == by_config.info.content_hash


@pytest.mark.parametrize("name, message", [
    ("no-such-org/no-such-tokenizer-xyz", "is not in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading it"),
    ("surely_not_a_tokenizer_xyz", "not found: give a directory"),
])
def test_unknown_tokenizer_is_a_tokenizer_error(name: str, message: str, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TokenizerError, match=f"tokenizer '{name}' {message}"):
        load_tokenizer(name)


def test_missing_path_is_a_tokenizer_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no such file or directory"):
        load_tokenizer(str(tmp_path / "missing" / "tokenizer.json"))


def test_directory_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="has no tokenizer.json"):
        load_tokenizer(str(tmp_path))


def test_corrupt_files_are_tokenizer_errors(tokenizer_dir: Path, tmp_path: Path) -> None:
    broken = _copy_tokenizer(tokenizer_dir, tmp_path / "broken")
    (broken / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerError, match="cannot load tokenizer"):
        load_tokenizer(str(broken))
    bad_config = _copy_tokenizer(tokenizer_dir, tmp_path / "bad_config")
    (bad_config / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(TokenizerError, match="tokenizer_config.json' is not valid JSON"):
        load_tokenizer(str(bad_config))


def test_content_hash_tracks_the_tokenizer_files(tokenizer_dir: Path, tmp_path: Path) -> None:
    original = load_tokenizer(str(tokenizer_dir)).info.content_hash
    assert original.startswith("sha256:") and len(original) == len("sha256:") + 64
    same = _copy_tokenizer(tokenizer_dir, tmp_path / "same")
    assert load_tokenizer(str(same)).info.content_hash == original, "the hash depends on content, not location"

    changed = _copy_tokenizer(tokenizer_dir, tmp_path / "changed")
    tok = Tokenizer.from_file(str(changed / "tokenizer.json"))
    tok.add_special_tokens(["<|extra|>"])
    tok.save(str(changed / "tokenizer.json"))
    changed_hash = load_tokenizer(str(changed)).info.content_hash
    assert changed_hash != original

    config_changed = _copy_tokenizer(tokenizer_dir, tmp_path / "config_changed")
    config = json.loads((config_changed / "tokenizer_config.json").read_text())
    config["eos_token"] = "<pad>"
    (config_changed / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_tokenizer(str(config_changed)).info.content_hash not in (original, changed_hash)


def test_chat_template_is_read_from_tokenizer_config(tokenizer_dir: Path, tmp_path: Path) -> None:
    assert load_tokenizer(str(tokenizer_dir)).info.chat_template is None
    copy = _copy_tokenizer(tokenizer_dir, tmp_path / "chat")
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    info = load_tokenizer(str(copy)).info
    assert info.chat_template == config["chat_template"]
    assert "chat_template" not in info.to_manifest()


# ---- training ------------------------------------------------------------------------------------


def test_train_bpe_tokenizer_layout(tmp_path: Path) -> None:
    out = train_bpe_tokenizer(make_texts(300, seed=2), tmp_path / "tok", vocab_size=300)
    assert out == tmp_path / "tok"
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == DEFAULT_SPECIAL_TOKENS
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert 256 + 3 <= tok.get_vocab_size() <= 300
    assert [tok.token_to_id(t) for t in DEFAULT_SPECIAL_TOKENS] == [0, 1, 2]
    handle = load_tokenizer(str(out))
    text = "any text, even 東京 🙂, is encodable by a byte-level BPE"
    assert handle.decode(_docs(*handle.encode_batch([text], add_bos=None, add_eos=False))[0]) == text


def test_train_bpe_tokenizer_is_deterministic(tmp_path: Path) -> None:
    texts = make_texts(300, seed=9)
    a = train_bpe_tokenizer(texts, tmp_path / "a", vocab_size=320)
    b = train_bpe_tokenizer(texts, tmp_path / "b", vocab_size=320)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_train_bpe_tokenizer_custom_special_tokens(tmp_path: Path) -> None:
    out = train_bpe_tokenizer(make_texts(200, seed=3), tmp_path / "tok", vocab_size=300,
                              special_tokens=("<|bos|>", "<|eos|>", "<|pad|>", "<|extra|>"))
    handle = load_tokenizer(str(out))
    assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (0, 1, 2)


def test_train_bpe_tokenizer_rejects_tiny_vocab(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`vocab_size` must be at least 259 for a byte-level tokenizer .* got 100"):
        train_bpe_tokenizer(["abc"], tmp_path / "tok", vocab_size=100)
    assert not (tmp_path / "tok").exists()


def test_preloaded_tokenizers_are_shared_and_unloadable_ones_left_to_the_step(tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "_PRELOADED", {})
    config = TokenizerConfig(name_or_path=str(tokenizer_dir))
    missing = TokenizerConfig(name_or_path=str(tokenizer_dir / "nowhere"))
    assert shared_tokenizer(config) is not shared_tokenizer(config)  # nothing preloaded: a load per call

    preload_tokenizers([config, missing, config])
    assert list(tokenizer_module._PRELOADED) == [config]  # once each; the missing one is not kept
    handle = shared_tokenizer(config)
    assert handle is shared_tokenizer(config)
    assert handle.encode_batch(["shared ids"], add_bos=False, add_eos=True)[0].tolist() == \
        load_tokenizer(config).encode_batch(["shared ids"], add_bos=False, add_eos=True)[0].tolist()
    with pytest.raises(TokenizerError, match="no such file or directory"):  # the step loading it reports the error
        shared_tokenizer(missing)

    not_utf8 = tmp_path / "not_utf8"  # a config file that is not UTF-8: skipped here, one clear error in the step
    shutil.copytree(tokenizer_dir, not_utf8)
    (not_utf8 / "tokenizer_config.json").write_bytes(b'{"bos_token": "\xff\xfe"}')
    preload_tokenizers([TokenizerConfig(name_or_path=str(not_utf8))])
    assert list(tokenizer_module._PRELOADED) == [config]
    with pytest.raises(TokenizerError, match="is not valid JSON"):
        shared_tokenizer(TokenizerConfig(name_or_path=str(not_utf8)))
    other = TokenizerConfig(name_or_path=str(tokenizer_dir), eos_token="<pad>")  # other overrides: another handle
    assert shared_tokenizer(other) is not handle


def test_preloading_loads_the_fast_engine_beside_hf_and_leaves_no_thread(qwen3_tokenizer_dir, monkeypatch):
    """A worker server's preload starts the fast engine's own tokenizer (fastokens: ~3 s for Qwen3's vocabulary,
    without the GIL) before `hf`'s load, not after it; the engine it hands out is that one, and no loading
    thread is left when it returns (the server forks next)."""
    import threading

    from easydata.text import engines

    monkeypatch.setattr(tokenizer_module, "_PRELOADED", {})
    monkeypatch.setattr(engines, "_PREFETCH", {})  # not what an earlier planning in this process left
    events: list[str] = []
    real_native, real_init = engines.FastokensEngine.load_native, TokenizerHandle.__init__

    def native(tokenizer_file):
        loaded = real_native(tokenizer_file)
        natives.append(loaded)
        return loaded

    def init(self, config):  # what is loading (or loaded) when hf's load starts
        events.extend(name for _, name in engines._PREFETCH)
        real_init(self, config)

    natives: list = []
    monkeypatch.setattr(engines.FastokensEngine, "load_native", staticmethod(native))
    monkeypatch.setattr(TokenizerHandle, "__init__", init)
    config = TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir))
    preload_tokenizers([config], ["fastokens", "gigatoken"])
    assert events == ["fastokens"]  # before: hf, then the engine
    engine = shared_tokenizer(config).engine("fastokens")
    assert len(natives) == 1 and engine._tokenizer is natives[0]  # loaded once, the prefetched one
    assert not engines._PREFETCH and not [t for t in threading.enumerate() if "prefetch" in t.name]
    ids = engine.encode(["preloaded ids"], False)[0].tolist()
    assert ids == Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json")).encode("preloaded ids").ids


_FORK_AFTER_PRELOAD = """
import os, sys
from easydata.config import TokenizerConfig
from easydata.text.tokenizer import preload_tokenizers, shared_tokenizer
config = TokenizerConfig(name_or_path=sys.argv[1])
preload_tokenizers([config])
texts = [line for line in sys.stdin.read().split("\\n") if line]
pid = os.fork()
if pid == 0:  # the child encodes with the parent's handle, on two tokenizer threads
    ids, offsets = shared_tokenizer(config).encode_batch(texts, add_bos=False, add_eos=True)
    print(len(texts), int(offsets[-1]), int(ids.sum()), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_fork_after_preloading_encodes_in_parallel_like_a_fresh_load(tokenizer_dir):
    """A worker forked after the preload encodes on its own tokenizer threads, silently, with the ids of
    a fresh load (tokenizers releases that saw their threads run before a fork turn parallel encoding
    off in the child and print a warning: preloading runs none)."""
    import subprocess
    import sys

    texts = make_texts(400, seed=5)
    child = subprocess.run([sys.executable, "-c", _FORK_AFTER_PRELOAD, str(tokenizer_dir)], input="\n".join(texts),
                           capture_output=True, text=True, timeout=120,
                           env={**{k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"},
                                "RAYON_NUM_THREADS": "2"})
    assert child.returncode == 0, child.stderr
    assert child.stderr == ""
    ids, offsets = load_tokenizer(str(tokenizer_dir)).encode_batch(texts, add_bos=False, add_eos=True)
    assert child.stdout.split() == [str(len(texts)), str(int(offsets[-1])), str(int(ids.sum()))]


def test_a_remote_tokenizer_is_copied_once_per_machine(tokenizer_dir: Path, tmp_path: Path, memory_fs,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes that fetch the same remote tokenizer share one local copy, named by its content (a
    copy per process was never removed); a directory of that name holding other bytes is not used."""
    import tempfile

    from easydata.text.tokenizer import resolve_tokenizer_files, stage_tokenizer_files

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(tokenizer_module, "_FETCHED", {})
    url = stage_tokenizer_files(str(tokenizer_dir), "memory://staging/run-1/tok")
    again = stage_tokenizer_files(str(tokenizer_dir), "memory://staging/run-2/tok")  # the next run's staged copy
    first, _ = resolve_tokenizer_files(url)
    monkeypatch.setattr(tokenizer_module, "_FETCHED", {})  # another worker process
    second, _ = resolve_tokenizer_files(again)
    assert first == second and first.read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    assert [p.name for p in temp.iterdir()] == [first.parent.name]  # one copy, no half-written leftovers
    assert load_tokenizer(str(first.parent)).encode_batch(["hello"], add_bos=False, add_eos=False)[0].size

    (first.parent / "tokenizer.json").write_text("{}")  # something else under that name
    monkeypatch.setattr(tokenizer_module, "_FETCHED", {})
    own, _ = resolve_tokenizer_files(url)
    assert own != first and own.read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    shutil.rmtree(first.parent)
    monkeypatch.setattr(tokenizer_module, "_FETCHED", {})
    shared, _ = resolve_tokenizer_files(url)
    assert shared == first  # made again
    shared.parent.chmod(0o777)  # writable by anyone: not to be trusted
    monkeypatch.setattr(tokenizer_module, "_FETCHED", {})
    assert resolve_tokenizer_files(url)[0] != first
