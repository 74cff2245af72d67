"""Column presets for training code: `raw`, `maxtext`, `hf`.

Input is a batch of fixed-length rows as numpy arrays `[B, L]`: `input_ids`, `segment_ids` (0 =
padding), `positions`, and `loss_mask` when the data has one.

* `raw`: those arrays as stored.
* `maxtext`: `inputs`, `inputs_segmentation`, `inputs_position`, and `targets` = inputs shifted left by
  one (last column padded), `targets_segmentation` = the segment id where the target is a real token of
  the same segment (and trained, when there is a loss mask), else 0; `targets_position` =
  `inputs_position`.
* `maxtext-stock`: MaxText's own convention (its `ShiftData`): the same keys, but
  `targets_segmentation` is the *target's* segment, so the position whose target is the next
  document's first token is trained too (as MaxText's stock pipelines do), and padding targets are
  the pad id, and (as in MaxText) no target equal to the pad id is trained: use a pad id that is no
  real token. With `pad_id=0` (MaxText pads with its tokenizer's pad or unk, 0) the batches equal
  what MaxText's own `shift_and_refine` makes of the same packed rows (tests/test_maxtext.py).
* `hf`: `input_ids`, `attention_mask` (1 on real tokens), `position_ids`, `labels` = `input_ids` with
  -100 on padding, on untrained tokens (loss mask 0), and on each segment's first token (Hugging Face
  models shift labels themselves, and the first token of a document must not be predicted from the
  previous document).

Every array is int32 as stored; `dtype="int64"` widens a batch's arrays after the layout, for
training code that wants 64-bit indices (PyTorch's `cross_entropy` takes int64 targets only).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["DTYPES", "LAYOUTS", "apply_layout", "check_layout"]


def _raw(batch: dict[str, np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    return batch


def _next(values: np.ndarray, fill: int) -> np.ndarray:
    """Each row's values shifted one position left (the next token's), `fill` at the end."""
    out = np.full_like(values, fill)
    out[:, :-1] = values[:, 1:]
    return out


def _maxtext(batch: dict[str, np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    ids, seg, pos = batch["input_ids"], batch["segment_ids"], batch["positions"]
    targets = _next(ids, pad_id)
    target_seg = np.where((_next(seg, 0) == seg) & (seg != 0), seg, 0)
    if "loss_mask" in batch:
        target_seg = np.where(_next(batch["loss_mask"], 0) != 0, target_seg, 0)
    return {"inputs": ids, "inputs_segmentation": seg, "inputs_position": pos, "targets": targets,
            "targets_segmentation": target_seg.astype(seg.dtype), "targets_position": pos}


def _maxtext_stock(batch: dict[str, np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    ids, seg, pos = batch["input_ids"], batch["segment_ids"], batch["positions"]
    targets = _next(ids, pad_id)
    target_seg = _next(seg, 0)
    if "loss_mask" in batch:
        target_seg = np.where(_next(batch["loss_mask"], 0) != 0, target_seg, 0)
    target_seg = np.where(targets != pad_id, target_seg, 0)  # as MaxText: a pad-id target is never trained
    return {"inputs": ids, "inputs_segmentation": seg, "inputs_position": pos, "targets": targets,
            "targets_segmentation": target_seg.astype(seg.dtype), "targets_position": pos}


def _hf(batch: dict[str, np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    ids, seg, pos = batch["input_ids"], batch["segment_ids"], batch["positions"]
    trained = (seg != 0) & (pos != 0)
    if "loss_mask" in batch:
        trained &= batch["loss_mask"] != 0
    return {"input_ids": ids, "attention_mask": (seg != 0).astype(np.int32), "position_ids": pos,
            "labels": np.where(trained, ids, -100).astype(ids.dtype)}


LAYOUTS: dict[str, Callable[[dict[str, np.ndarray], int], dict[str, np.ndarray]]] = {
    "raw": _raw, "maxtext": _maxtext, "maxtext-stock": _maxtext_stock, "hf": _hf}


DTYPES = ("int32", "int64")


def check_layout(name: str, dtype: str = "int32") -> None:
    """Raises ValueError for an unknown layout or batch dtype (readers check at construction)."""
    if name not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {name!r}.")
    if str(dtype) not in DTYPES:
        raise ValueError(f"`dtype` must be one of {', '.join(DTYPES)}, got {dtype!r}.")


def apply_layout(name: str, batch: dict[str, np.ndarray], pad_id: int, dtype: str = "int32",
                 pad_override: bool = False) -> dict[str, np.ndarray]:
    """Converts a raw batch to the named preset, its arrays as `dtype` (int32 as stored, or int64);
    `pad_override`: `pad_id` is not the stored padding, so padding positions of `input_ids` are
    rewritten to it first."""
    check_layout(name, dtype)
    if pad_override:
        batch = {**batch, "input_ids": np.where(batch["segment_ids"] == 0, np.int32(pad_id), batch["input_ids"])}
    out = LAYOUTS[name](batch, pad_id)
    if str(dtype) != "int32":
        out = {key: array.astype(dtype) for key, array in out.items()}
    return out
