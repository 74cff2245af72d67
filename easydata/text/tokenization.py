"""Turning a batch of documents into a batch of token rows (one Arrow record batch per call).

This is the per-batch work of the tokenize stage: one batched tokenizer call, vectorised special
tokens and truncation, Arrow list columns built from flat buffers, plus the two hidden columns the
shuffle needs (`__key__`, `__hash__`).

Chat documents (those with trained spans from the chat stage) are tokenized without added special
tokens (their template placed them) and with character offsets, which turn the spans into a
`loss_mask`; plain documents in the same batch get a mask of ones. Batches without chat documents
take the fast path and have no `loss_mask` column.

With `truncation: truncate` or `window`, documents are encoded whole and then cut
(`easydata.text.windows`): a windowed document becomes several rows, keyed `<key>#w<k>` from its second
window on, and every row gets the hidden `__piece__` column so later stages count documents, not rows.

The chat stage and these two parts are composed once, in `easydata.text.stages.DocumentStages`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from easydata.config import TokenizeStageConfig
from easydata.io.formats import documents_to_batch
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, row_hashes
from easydata.io.sources import DocumentBatch
from easydata.text.tokenizer import TokenizerHandle
from easydata.text.windows import PIECE_COLUMN, cut_documents

__all__ = ["EncodedDocuments", "TokenizedStats", "encode_documents", "rows_from_encoded"]


@dataclasses.dataclass
class TokenizedStats:
    """Counters of one tokenized batch: documents, tokens written, and the tokens `truncation: truncate`
    cut off (the tails not written; windows keep every token)."""

    documents: int = 0
    tokens: int = 0
    truncated_tokens: int = 0


def _interleave(parts: list[tuple[list[int], np.ndarray, np.ndarray, np.ndarray]], n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merges per-group `(doc indices, flat ids, offsets, flat mask)` back into document order."""
    lengths = np.zeros(n, dtype=np.int64)
    for index, _, offsets, _ in parts:
        lengths[index] = np.diff(offsets)
    out_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.empty(int(out_offsets[-1]), dtype=np.int32)
    mask = np.empty(int(out_offsets[-1]), dtype=np.int32)
    for index, flat, offsets, flat_mask in parts:
        sizes = np.diff(offsets)
        rank = np.arange(len(flat)) - np.repeat(offsets[:-1], sizes)
        dst = np.repeat(out_offsets[:-1][index], sizes) + rank
        ids[dst] = flat
        mask[dst] = flat_mask
    return ids, out_offsets, mask


@dataclasses.dataclass
class EncodedDocuments:
    """The tokenizer's raw output for one document batch (`encode_documents`), not yet converted.

    Attributes:
      plain: indices of the documents encoded with the plain call, and their `Encoding`s.
      chat: indices of the chat documents (encoded with offsets), and their `Encoding`s.
    """

    plain: tuple[list[int], list[Any]]
    chat: tuple[list[int], list[Any]]


def encode_documents(batch: DocumentBatch, tokenizer: TokenizerHandle, config: TokenizeStageConfig,
                     engine: Any = None) -> EncodedDocuments:
    """The Rust part of tokenizing a batch: one batched call per kind of document, no Python per token.

    The calls release the GIL, so a worker runs this on a helper thread while its own thread turns
    the previous batch into rows (`rows_from_encoded`). `engine`: a verified fast engine for the plain
    documents (`easydata.text.engines.VerifiedEngine`); chat documents always go through `tokenizers`,
    whose character offsets make their loss masks.
    """
    spans = batch.spans or [None] * len(batch)
    chat = [i for i, s in enumerate(spans) if s is not None]
    plain = [i for i, s in enumerate(spans) if s is None]
    texts = batch.texts
    plain_texts = texts if not chat else [texts[i] for i in plain]
    plain_keys = batch.keys if not chat else [batch.keys[i] for i in plain]
    return EncodedDocuments(
        plain=(plain, tokenizer.encode_plain(plain_texts, add_bos=config.add_bos, keys=plain_keys, engine=engine)
               if plain else []),
        chat=(chat, tokenizer.encode_chat([texts[i] for i in chat]) if chat else []))


def rows_from_encoded(batch: DocumentBatch, encoded: EncodedDocuments, tokenizer: TokenizerHandle,
                      config: TokenizeStageConfig, seed: int) -> tuple[pa.RecordBatch, TokenizedStats]:
    """The Python part of tokenizing a batch: special tokens, truncation, loss masks, Arrow columns."""
    plain, plain_encodings = encoded.plain
    chat, chat_encodings = encoded.chat
    mask = None
    if not chat:
        ids, offsets = tokenizer.plain_ids(plain_encodings, add_bos=config.add_bos, add_eos=config.add_eos)
    else:
        spans = batch.spans
        parts = []
        if plain:
            flat, plain_offsets = tokenizer.plain_ids(plain_encodings, add_bos=config.add_bos,
                                                      add_eos=config.add_eos)
            parts.append((plain, flat, plain_offsets, np.ones(len(flat), dtype=np.int32)))
        flat, chat_offsets, chat_mask = tokenizer.chat_ids(chat_encodings, [spans[i] for i in chat],
                                                           add_eos=config.add_eos)
        parts.append((chat, flat, chat_offsets, chat_mask))
        ids, offsets, mask = _interleave(parts, len(batch))
    keys, fields, extra = batch.keys, batch.fields, {}
    truncated = 0
    if config.truncation_mode != "none" and config.max_length is not None:
        whole = int(offsets[-1])
        eos = tokenizer.eos_token_id if config.add_eos else None
        bos = tokenizer.bos_token_id if config.add_bos else None
        pieces = cut_documents(ids, offsets, mode=config.truncation_mode, max_length=config.max_length,
                               stride=config.stride or 0, eos=eos, bos=bos, mask=mask)
        ids, offsets, mask = pieces.ids, pieces.offsets, pieces.mask
        if config.truncation_mode == "truncate":
            truncated = whole - int(offsets[-1])
        doc, piece = pieces.doc.tolist(), pieces.piece.tolist()
        keys = [keys[d] if p <= 1 else f"{keys[d]}#w{p}" for d, p in zip(doc, piece)]
        if len(doc) != len(batch):  # windows: every row carries its document's fields
            fields = {name: [values[d] for d in doc] for name, values in fields.items()}
        extra[PIECE_COLUMN] = pa.array(pieces.piece, type=pa.int32())
    hidden = {
        KEY_COLUMN: pa.array(keys, type=pa.string()),
        HASH_COLUMN: pa.array(row_hashes(seed, batch.dataset, keys), type=pa.uint64()),
        **extra,
    }
    record_batch = documents_to_batch(ids, offsets, fields, hidden, loss_mask=mask, field_types=batch.field_types)
    return record_batch, TokenizedStats(documents=len(batch), tokens=int(offsets[-1]), truncated_tokens=truncated)
