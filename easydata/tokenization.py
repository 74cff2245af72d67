"""Turning a batch of documents into a batch of token rows (one Arrow record batch per call).

This is the per-batch work of the tokenize stage: one batched tokenizer call, vectorised special
tokens and truncation, Arrow list columns built from flat buffers, plus the two hidden columns the
shuffle needs (`__key__`, `__hash__`).

Chat documents (those with trained spans from the chat stage) are tokenized without added special
tokens (their template placed them) and with character offsets, which turn the spans into a
`loss_mask`; plain documents in the same batch get a mask of ones. Batches without chat documents
take the fast path and have no `loss_mask` column.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from easydata.config import TokenizeStageConfig
from easydata.formats import documents_to_batch
from easydata.sharding import HASH_COLUMN, KEY_COLUMN, row_hashes
from easydata.sources import DocumentBatch
from easydata.tokenizer import TokenizerHandle

__all__ = ["TokenizedStats", "tokenize_documents"]


@dataclasses.dataclass
class TokenizedStats:
    """Counters of one tokenized batch."""

    documents: int = 0
    tokens: int = 0


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


def tokenize_documents(batch: DocumentBatch, tokenizer: TokenizerHandle, config: TokenizeStageConfig,
                       seed: int) -> tuple[pa.RecordBatch, TokenizedStats]:
    """Tokenizes a document batch into unpacked rows with shuffle keys.

    Returns:
      The record batch (`input_ids`, `attention_mask`, [`loss_mask`,] additional fields, `__key__`,
      `__hash__`) and its counters.
    """
    max_length = config.max_length if config.truncation != "none" else None
    hidden = {
        KEY_COLUMN: pa.array(batch.keys, type=pa.string()),
        HASH_COLUMN: pa.array(row_hashes(seed, batch.dataset, batch.keys), type=pa.uint64()),
    }
    spans = batch.spans or [None] * len(batch)
    chat = [i for i, s in enumerate(spans) if s is not None]
    if not chat:
        flat, offsets = tokenizer.encode_batch(batch.texts, add_bos=config.add_bos, add_eos=config.add_eos,
                                               max_length=max_length)
        record_batch = documents_to_batch(flat, offsets, batch.fields, hidden)
        return record_batch, TokenizedStats(documents=len(batch), tokens=int(offsets[-1]))
    plain = [i for i, s in enumerate(spans) if s is None]
    parts = []
    if plain:
        flat, offsets = tokenizer.encode_batch([batch.texts[i] for i in plain], add_bos=config.add_bos,
                                               add_eos=config.add_eos, max_length=max_length)
        parts.append((plain, flat, offsets, np.ones(len(flat), dtype=np.int32)))
    flat, offsets, mask = tokenizer.encode_chat_batch([batch.texts[i] for i in chat], [spans[i] for i in chat],
                                                      add_eos=config.add_eos, max_length=max_length)
    parts.append((chat, flat, offsets, mask))
    ids, offsets, mask = _interleave(parts, len(batch))
    record_batch = documents_to_batch(ids, offsets, batch.fields, hidden, loss_mask=mask)
    return record_batch, TokenizedStats(documents=len(batch), tokens=int(offsets[-1]))
