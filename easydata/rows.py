"""The row schema, one owner: the token columns of every output row and the hidden columns that travel with
rows between the pipeline's stages and are never written.

Token columns (`TOKEN_COLUMNS`) are `list<int32>`. Hidden columns: `KEY_COLUMN` (`"<dataset>/<position>"`,
a row's stable identity), `HASH_COLUMN` (its 64-bit shuffle hash, `easydata.ops.sharding.row_hashes`) and
`PIECE_COLUMN` (which window of a cut document a row is: 0 a whole document, 1 the first piece of a cut
one, 2.. the others, `easydata.ops.windows`). `piece_counts` counts documents, not rows, from it. This
module imports only numpy and pyarrow, so every layer (io, ops, text, transforms) can name them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

__all__ = ["TOKEN_COLUMNS", "KEY_COLUMN", "HASH_COLUMN", "PIECE_COLUMN", "HIDDEN_COLUMNS", "PieceCounts",
           "piece_counts"]

TOKEN_COLUMNS = ("input_ids", "attention_mask", "loss_mask", "segment_ids", "positions")
KEY_COLUMN = "__key__"
HASH_COLUMN = "__hash__"
PIECE_COLUMN = "__piece__"
HIDDEN_COLUMNS = (HASH_COLUMN, KEY_COLUMN, PIECE_COLUMN)  # never written to an output


@dataclasses.dataclass(frozen=True)
class PieceCounts:
    """What rows stand for: `documents` (rows that start a document), `cut_documents` (documents that
    were truncated or windowed) and `continuation_rows` (windows after a document's first)."""

    documents: int
    cut_documents: int
    continuation_rows: int


def piece_counts(batch: pa.RecordBatch | pa.Table) -> PieceCounts:
    """Counts a batch's documents from its `PIECE_COLUMN` (every row is a document without it)."""
    if PIECE_COLUMN not in batch.schema.names:
        return PieceCounts(documents=batch.num_rows, cut_documents=0, continuation_rows=0)
    column = batch.column(PIECE_COLUMN)
    piece = (column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column).to_numpy(
        zero_copy_only=False)
    continuation = int(np.count_nonzero(piece >= 2))
    return PieceCounts(documents=len(piece) - continuation, cut_documents=int(np.count_nonzero(piece == 1)),
                       continuation_rows=continuation)
