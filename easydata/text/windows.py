"""Cutting tokenized documents to `tokenize.max_length`: `truncate` and sliding `window`s.

Both work on a batch of documents already encoded with their special tokens (BOS / EOS), as flat
ids plus offsets, vectorised over the batch:

* `truncate` keeps a document's first `max_length` tokens; a cut document keeps its BOS and still
  ends with EOS when EOS is appended (the last kept token becomes EOS), except that a document cut to
  one token keeps its BOS (BOS before EOS when only one fits). The one truncation of the project:
  `TokenizerHandle.encode_batch(max_length=...)` truncates through it too.
* `window` cuts a document longer than `max_length` into overlapping windows of `max_length`
  tokens. Window `k` starts at `k * (max_length - stride)`; windows are emitted until one reaches
  the end, so the last window may be shorter (it always holds more than `stride` tokens, at least
  one of them new). `stride` is the overlap between consecutive windows (Hugging Face's meaning):
  every token is in at least one window, consecutive windows share exactly `stride` tokens, and
  window 0 followed by every later window minus its first `stride` tokens gives back the document.
  A document of `n > max_length` tokens makes `1 + ceil((n - max_length) / (max_length - stride))`
  windows. Windows are plain slices: only the first holds BOS and only the last EOS.

Every output row records which piece of its document it is in the hidden column `PIECE_COLUMN`
(int32): 0 for a whole document, `k >= 1` for the k-th piece of a document that was cut (truncated
documents have one piece, windowed ones several). Counting documents therefore never counts a
window twice (`piece_counts`). Cost: one gather of the batch's ids, O(tokens).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

__all__ = ["PIECE_COLUMN", "Pieces", "plan_windows", "cut_documents", "piece_counts", "PieceCounts"]

from easydata.rows import PIECE_COLUMN, PieceCounts, piece_counts  # the row schema's owner


def plan_windows(lengths: np.ndarray, max_length: int, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each window of each document starts, and how long it is.

    Args:
      lengths: token count of each document.
      max_length: window length.
      stride: overlap of consecutive windows, `0 <= stride < max_length`.

    Returns:
      `(doc, start, size)`: per window, its document index, its first token within the document and
      its length, windows of a document consecutive and in order. An empty document gets one empty
      window (it stays one row, as without windows).

    Raises:
      ValueError: on a `max_length` / `stride` outside the ranges above.
    """
    if max_length <= 0:
        raise ValueError(f"`max_length` must be positive, got {max_length}.")
    if not 0 <= stride < max_length:
        raise ValueError(f"`stride` must be in [0, max_length={max_length}), got {stride}.")
    lengths = np.asarray(lengths, dtype=np.int64)
    step = max_length - stride
    # Windows start at 0, step, 2*step, ... while the previous window has not reached the end.
    count = np.where(lengths > max_length, -(-(lengths - max_length) // step) + 1, 1)
    doc = np.repeat(np.arange(len(lengths)), count)
    k = np.arange(len(doc)) - np.repeat(np.cumsum(count) - count, count)
    start = k * step
    size = np.minimum(lengths[doc] - start, max_length)
    return doc, start, size


@dataclasses.dataclass(frozen=True)
class Pieces:
    """Documents after cutting.

    Attributes:
      ids: flat token ids of every row.
      offsets: row boundaries (`len(rows) + 1`).
      doc: the input document of each row.
      piece: `PIECE_COLUMN` values (0: whole document, k: k-th piece of a cut document).
      mask: the loss mask cut the same way (None when the input had none).
    """

    ids: np.ndarray
    offsets: np.ndarray
    doc: np.ndarray
    piece: np.ndarray
    mask: Optional[np.ndarray] = None


def _gather(values: np.ndarray, offsets: np.ndarray, doc: np.ndarray, start: np.ndarray,
            size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows `values[offsets[doc] + start : ... + size]` back to back, and their offsets."""
    out_offsets = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    rank = np.arange(int(out_offsets[-1])) - np.repeat(out_offsets[:-1], size)
    src = np.repeat(offsets[:-1][doc] + start, size) + rank
    return values[src], out_offsets


def cut_documents(ids: np.ndarray, offsets: np.ndarray, *, mode: str, max_length: int, stride: int = 0,
                  eos: Optional[int] = None, bos: Optional[int] = None, mask: Optional[np.ndarray] = None) -> Pieces:
    """Applies `truncate` or `window` to encoded documents (see the module docstring).

    Args:
      ids, offsets: the documents, with their special tokens.
      mode: `truncate` or `window`.
      max_length: row length limit.
      stride: window overlap (`window` only).
      eos: for `truncate`, the EOS id a cut document ends with (None: plain cut).
      bos: for `truncate`, the BOS id documents were given (None: none added); a document cut to
        its first token keeps that BOS rather than become EOS.
      mask: an optional per-token loss mask, cut like the ids (a replaced last token gets 0).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    if mode == "window":
        doc, start, size = plan_windows(lengths, max_length, stride)
        windows_of = np.bincount(doc, minlength=len(lengths))
        first = np.concatenate([[0], np.cumsum(windows_of)[:-1]])
        piece = np.where(windows_of[doc] > 1, np.arange(len(doc)) - first[doc] + 1, 0).astype(np.int32)
    elif mode == "truncate":
        if max_length <= 0:
            raise ValueError(f"`max_length` must be positive, got {max_length}.")
        doc = np.arange(len(lengths))
        start = np.zeros(len(lengths), dtype=np.int64)
        size = np.minimum(lengths, max_length)
        piece = (lengths > max_length).astype(np.int32)
    else:
        raise ValueError(f"`mode` must be 'truncate' or 'window', got {mode!r}.")
    out_ids, out_offsets = _gather(ids, offsets, doc, start, size)
    out_mask = _gather(mask, offsets, doc, start, size)[0] if mask is not None else None
    if mode == "truncate" and eos is not None:
        last = out_offsets[1:][piece > 0] - 1
        if bos is not None:
            last = last[~((size[piece > 0] == 1) & (out_ids[last] == bos))]
        out_ids[last] = eos
        if out_mask is not None:
            out_mask[last] = 0
    return Pieces(ids=out_ids, offsets=out_offsets, doc=doc, piece=piece, mask=out_mask)


