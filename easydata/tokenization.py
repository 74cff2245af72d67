"""Turning a batch of documents into a batch of token rows (one Arrow record batch per call).

This is the per-batch work of the tokenize stage: one batched tokenizer call, vectorised special
tokens and truncation, Arrow list columns built from flat buffers, plus the two hidden columns the
shuffle needs (`__key__`, `__hash__`).
"""

from __future__ import annotations

import dataclasses

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


def tokenize_documents(batch: DocumentBatch, tokenizer: TokenizerHandle, config: TokenizeStageConfig,
                       seed: int) -> tuple[pa.RecordBatch, TokenizedStats]:
    """Tokenizes a document batch into unpacked rows with shuffle keys.

    Returns:
      The record batch (`input_ids`, `attention_mask`, additional fields, `__key__`, `__hash__`) and
      its counters.
    """
    max_length = config.max_length if config.truncation != "none" else None
    flat, offsets = tokenizer.encode_batch(batch.texts, add_bos=config.add_bos, add_eos=config.add_eos,
                                           max_length=max_length)
    hidden = {
        KEY_COLUMN: pa.array(batch.keys, type=pa.string()),
        HASH_COLUMN: pa.array(row_hashes(seed, batch.dataset, batch.keys), type=pa.uint64()),
    }
    record_batch = documents_to_batch(flat, offsets, batch.fields, hidden)
    return record_batch, TokenizedStats(documents=len(batch), tokens=int(offsets[-1]))
