"""Very long documents encoded in pieces, to the very ids the whole document gets, in bounded memory.

`tokenizers` keeps many bytes per character while it encodes one text (its normalized string with
alignments, every symbol of a word being merged, the `Encoding`'s tokens, offsets and masks), so a
document of tens of megabytes takes gigabytes (figures: docs/performance.md#figures-behind-design-choices). Cut at places where no
token can span the cut, the pieces encode to the same ids in a fraction of the memory and time, a few
pieces at a time.

Where no token can span a cut follows from the tokenizer's own structure, so a cut rule is given only to
tokenizer families whose structure proves it (`cut_rule`), and each rule is checked on the tokenizer at
load time against whole-text encoding of a probe full of cut places (`CutRule.verified`):

- `metaspace`: a SentencePiece-style BPE (Mistral, Llama 2): no normalizer, a `Metaspace` pre-tokenizer that
  does not split (`split: false`), so the text is one word of `▁`-joined characters, and no vocabulary
  entry holds a `▁` after another character. A merge across a place where a space follows a non-space
  would make such an entry, so no merge crosses it: cut there, the piece starting with the space (which
  Metaspace turns into the `▁` the whole text has there; it prepends nothing to a piece that starts so).
- `newline-letter`: a byte-level BPE with a known split regex (Qwen2/3, Llama 3, GPT-2): normalizer
  none or NFC, the regex, then `ByteLevel` without a prefix space. None of the regex's alternatives
  matches across a newline that follows a non-space and precedes a letter, and matching is left to
  right, so that place ends a pre-token in the whole text and in the piece before it alike; BPE works
  within pre-tokens. (NFC composes nothing across a newline.)

Added tokens are matched before all this: a rule is refused for a tokenizer whose added tokens contain
what a cut place is made of (a space, a newline).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

__all__ = ["LONG_TEXT_CHARS", "PIECE_CHARS", "CutRule", "cut_rule", "cut_places", "encode_in_pieces",
           "PiecedEncoding", "encode_flat", "is_long", "post_processor_ids", "rule_for"]

#: Texts longer than this (characters) are encoded in pieces when the tokenizer has a cut rule.
LONG_TEXT_CHARS = 1 << 20
#: The length a piece aims at (it ends at the first cut place from there on).
PIECE_CHARS = 1 << 18
#: Pieces encoded by one call: their `Encoding`s are what the encoding holds in memory at once.
PIECES_PER_CALL = 4

#: Split regexes (`pre_tokenizer` `Split`, `Isolated`) whose alternatives end a pre-token at a newline that
#: follows a non-space and precedes a letter: Qwen2/Qwen3 and Llama 3 (the latter with `\p{N}{1,3}`).
_KNOWN_REGEXES = frozenset({
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
})


def _metaspace_place(text: str, at: int) -> bool:
    return text[at] == " " and text[at - 1] != " "


def _newline_letter_place(text: str, at: int) -> bool:
    return text[at - 1] == "\n" and at >= 2 and not text[at - 2].isspace() and text[at].isalpha()


_PLACES = {"metaspace": _metaspace_place, "newline-letter": _newline_letter_place}


@dataclasses.dataclass(frozen=True)
class CutRule:
    """Where a tokenizer's texts may be cut without changing their ids (see the module docstring)."""

    name: str

    def is_place(self, text: str, at: int) -> bool:
        """Whether `text` may be cut before character `at` (0 < at < len(text))."""
        return _PLACES[self.name](text, at)

    def verified(self, tokenizer: Any) -> bool:
        """Whether pieces of a probe text full of cut places encode to the whole text's ids."""
        line = "Tokens 12 don't cross: a b  c\t\u00e9t\u00e9 \u6771\u4eac !?" * 3
        probe = "\n".join(f"{line} {i}" for i in range(40)) + "\nend"
        whole = tokenizer.encode(probe, add_special_tokens=False).ids
        pieces = _pieces(probe, self, 50)
        return len(pieces) > 10 and [i for p in pieces for i in tokenizer.encode(
            p, add_special_tokens=False).ids] == whole


def _model_bpe(config: dict[str, Any]) -> bool:
    model = config.get("model") or {}
    return model.get("type") == "BPE" and not model.get("dropout") and not model.get("ignore_merges")


def _added_contents(config: dict[str, Any]) -> list[str]:
    return [str(t.get("content", "")) for t in config.get("added_tokens") or []]


def cut_rule(tokenizer_json: Union[str, dict[str, Any]]) -> Optional[CutRule]:
    """The cut rule a tokenizer's structure proves (from its `tokenizer.json`, as text or parsed), or None."""
    try:
        config = json.loads(tokenizer_json) if isinstance(tokenizer_json, str) else tokenizer_json
    except ValueError:
        return None
    if not isinstance(config, dict) or not _model_bpe(config):
        return None
    pre, normalizer = config.get("pre_tokenizer") or {}, config.get("normalizer")
    added = _added_contents(config)
    if normalizer is None and pre.get("type") == "Metaspace" and pre.get("split") is False \
            and pre.get("replacement") == "\u2581" and pre.get("prepend_scheme", "always") in ("first", "always") \
            and not any(" " in a or "\u2581" in a for a in added):
        vocab = (config.get("model") or {}).get("vocab") or {}
        if not any(token[i] == "\u2581" and token[i - 1] != "\u2581" for token in vocab for i in range(1, len(token))):
            return CutRule("metaspace")
    if (normalizer is None or normalizer.get("type") == "NFC") and not any("\n" in a for a in added):
        steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
        if len(steps or []) == 2:
            split, byte_level = steps
            pattern = (split.get("pattern") or {}).get("Regex")
            if split.get("type") == "Split" and pattern in _KNOWN_REGEXES and split.get("behavior") == "Isolated" \
                    and not split.get("invert") and byte_level.get("type") == "ByteLevel" \
                    and not byte_level.get("add_prefix_space") and not byte_level.get("use_regex", True):
                return CutRule("newline-letter")
    return None


def cut_places(text: str, rule: CutRule, piece_chars: int = PIECE_CHARS) -> list[int]:
    """Where `text` is cut: the first place of `rule` at or after every `piece_chars` characters."""
    places, at = [], piece_chars
    while at < len(text):
        while at < len(text) and not rule.is_place(text, at):
            at += 1
        if at >= len(text):
            break
        places.append(at)
        at += piece_chars
    return places


def _pieces(text: str, rule: CutRule, piece_chars: int) -> list[str]:
    bounds = [0, *cut_places(text, rule, piece_chars), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@dataclasses.dataclass
class PiecedEncoding:
    """A long text's encoding from its pieces: what `chat_ids` and `flat_ids` read of an `Encoding`."""

    ids: np.ndarray          # int32
    offsets: np.ndarray      # int64 (n, 2): character offsets in the whole text

    def __len__(self) -> int:
        return len(self.ids)


def _groups(text: str, rule: CutRule, piece_chars: int) -> Iterator[tuple[list[str], list[int]]]:
    bounds = [0, *cut_places(text, rule, piece_chars), len(text)]
    starts = bounds[:-1]
    for i in range(0, len(starts), PIECES_PER_CALL):
        chunk = range(i, min(i + PIECES_PER_CALL, len(starts)))
        yield [text[bounds[k]:bounds[k + 1]] for k in chunk], [bounds[k] for k in chunk]


def encode_in_pieces(tokenizer: Any, text: str, rule: CutRule, *, with_offsets: bool = False,
                     piece_chars: int = PIECE_CHARS) -> PiecedEncoding:
    """`text`'s ids without special tokens (and, `with_offsets`, each token's character offsets in
    `text`), encoded `PIECES_PER_CALL` pieces at a time: equal to `tokenizer.encode(text,
    add_special_tokens=False)`'s for a tokenizer whose rule holds."""
    ids: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    for pieces, starts in _groups(text, rule, piece_chars):
        encodings = (tokenizer.encode_batch(pieces, add_special_tokens=False) if with_offsets else
                     getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)(pieces, add_special_tokens=False))
        for encoding, start in zip(encodings, starts):
            ids.append(np.asarray(encoding.ids, dtype=np.int32))
            if with_offsets:
                offsets.append(np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2) + start)
        del encodings
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int32)
    spans = np.concatenate(offsets) if offsets else np.zeros((0, 2), np.int64)
    return PiecedEncoding(flat, spans)


def rule_for(tokenizer: Any) -> Optional[CutRule]:
    """The cut rule of a loaded `tokenizers.Tokenizer`, verified on it; None when it has none."""
    rule = cut_rule(tokenizer.to_str())
    return rule if rule is not None and rule.verified(tokenizer) else None


def is_long(texts: Sequence[str]) -> bool:
    """Whether any of `texts` is long enough to be encoded in pieces."""
    return any(len(t) > LONG_TEXT_CHARS for t in texts)


def post_processor_ids(tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ids a tokenizer's post-processor puts before and after a single text (`TemplateProcessing`'s BOS,
    ...), found by encoding a probe with and without special tokens.

    Raises:
      ValueError: the post-processor changes the text's own ids (then they cannot be added around pieces).
    """
    probe = "a b"
    bare = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe, add_special_tokens=True).ids
    at = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), None)
    if at is None:
        raise ValueError("the tokenizer's post-processor changes the document's own ids")
    return np.asarray(full[:at], dtype=np.int32), np.asarray(full[at + len(bare):], dtype=np.int32)


def encode_flat(tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool,
                rule: Optional[CutRule]) -> tuple[np.ndarray, np.ndarray]:
    """`(flat int32 ids, int64 lengths)` of `texts` as `tokenizer` encodes them, the long ones (over
    `LONG_TEXT_CHARS`) in pieces when there is a `rule`; the others in one batched call."""
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    long = {i for i, t in enumerate(texts) if len(t) > LONG_TEXT_CHARS} if rule is not None else set()
    parts: list[Optional[np.ndarray]] = [None] * len(texts)
    short = [i for i in range(len(texts)) if i not in long]
    if short:
        for i, encoding in zip(short, encode([texts[i] for i in short], add_special_tokens=add_special_tokens)):
            parts[i] = np.asarray(encoding.ids, dtype=np.int32)
    if long:
        prefix, suffix = post_processor_ids(tokenizer) if add_special_tokens else (np.zeros(0, np.int32),) * 2
        for i in sorted(long):
            parts[i] = np.concatenate([prefix, encode_in_pieces(tokenizer, texts[i], rule).ids, suffix])
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    flat = np.concatenate(parts).astype(np.int32, copy=False) if parts else np.zeros(0, np.int32)
    return flat, lengths
