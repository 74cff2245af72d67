"""Mixing weights over training steps, and how many rows of each source one global batch takes.

`WeightSchedule` turns `WeightSchedulePoint`s into normalised weights at any step: `step` keeps a
point's weights until the next point, `linear` and `cosine` move between consecutive points; before
the first point its weights hold, after the last point the last ones do.

`allocate` splits a global batch of `G` rows into exact integer counts per source that track the
cumulative target: each source is owed `expected_i = sum over steps of G * w_i(step)` rows and has
taken `consumed_i`; a step gives each source the whole rows it is owed, then the rows left go to the
sources still owed a part of a row, earliest deadline first: the one that would first be a whole row
behind at its weight (ties: the order of `names`; the largest remaining debt first, as before, let a
light source take the row a heavy one owed as much needed, which then fell more than a row behind). A
source is never a whole row ahead of its target; while the weights stay fixed it is at most one row
behind. When the weights change, a source that was a fraction of a row ahead keeps those rows (counts
are never negative), so another can fall behind by up to two rows until the next steps repay it; no
allocation can do better. A weight too small for one row per batch (`G * w < 1`) still gets its share
over several batches; a source whose weight has always been 0 gets nothing.

Everything here is pure Python on floats and ints, a deterministic function of its arguments: every
process of a job computes the same counts from the same state, and resumed runs recompute them.
Cost: O(sources) per point lookup and O(sources * log sources) per allocation.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Mapping, Sequence, Union

from easydata.config import WeightSchedulePoint
from easydata.config.schedule import parse_schedule

__all__ = ["INTERPOLATIONS", "WeightSchedule", "allocate"]

INTERPOLATIONS = ("step", "linear", "cosine")


class WeightSchedule:
    """Normalised mixing weights as a function of the training step.

    Args:
      points: `WeightSchedulePoint`s (or mappings with `step` and `weights`), in any order. A name absent
        from a point has weight 0 there.
      names: every source name; the order breaks ties in `allocate` and orders `vector_at`.
      interpolation: `step`, `linear` or `cosine`.

    Raises:
      ValueError: no points, a step that is not a non-negative int or appears twice, a weight that is
        negative or not finite, a point whose weights are all 0, a name not in `names`, or an unknown
        interpolation.
    """

    def __init__(self, points: Sequence[Union[WeightSchedulePoint, Mapping[str, Any]]], names: Sequence[str],
                 interpolation: str = "step"):
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"`interpolation` must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}.")
        self.names = tuple(names)
        if not self.names or len(set(self.names)) != len(self.names):
            raise ValueError(f"`names` must be distinct and non-empty, got {list(self.names)}.")
        parsed = parse_schedule(points, self.names)
        self.interpolation = interpolation
        self.steps: tuple[int, ...] = tuple(step for step, _ in parsed)
        self.weights: tuple[tuple[float, ...], ...] = tuple(w for _, w in parsed)

    def vector_at(self, step: int) -> tuple[float, ...]:
        """Normalised weights at `step`, in the order of `names`."""
        i = bisect.bisect_right(self.steps, step) - 1  # last point with point.step <= step
        if i < 0:
            return self.weights[0]
        if i == len(self.steps) - 1 or self.interpolation == "step":
            return self.weights[i]
        t = (step - self.steps[i]) / (self.steps[i + 1] - self.steps[i])
        if self.interpolation == "cosine":
            t = (1.0 - math.cos(math.pi * t)) / 2.0
        return tuple(w0 + (w1 - w0) * t for w0, w1 in zip(self.weights[i], self.weights[i + 1]))

    def weights_at(self, step: int) -> dict[str, float]:
        """Normalised weights at `step`, by source name (every name, 0 included)."""
        return dict(zip(self.names, self.vector_at(step)))

    def to_json(self) -> list[dict[str, Any]]:
        """The normalised points as JSON data (what a reader state records to refuse another schedule)."""
        return [{"step": s, "weights": dict(zip(self.names, w))} for s, w in zip(self.steps, self.weights)]

    def __repr__(self) -> str:
        return f"WeightSchedule({self.to_json()!r}, interpolation={self.interpolation!r})"


def allocate(weights: Sequence[float], expected: Sequence[float], consumed: Sequence[int],
             global_batch: int) -> tuple[list[int], list[float]]:
    """Rows each source gives to one global batch, tracking the cumulative target.

    Args:
      weights: this step's normalised weights, one per source (in `names` order).
      expected: rows each source was owed before this step (the running sum of `G * w`).
      consumed: rows each source has given before this step.
      global_batch: `G`, rows in the global batch.

    Returns:
      `(counts, expected after this step)`; the counts are >= 0 and sum to `global_batch`.
    """
    n = len(weights)
    if not n == len(expected) == len(consumed):
        raise ValueError(f"weights, expected and consumed must have one entry per source, got {n},"
                         f" {len(expected)} and {len(consumed)}.")
    if global_batch <= 0:
        raise ValueError(f"`global_batch` must be positive, got {global_batch}.")
    expected = [e + global_batch * w for e, w in zip(expected, weights)]
    owed = [e - c for e, c in zip(expected, consumed)]
    counts = [max(math.floor(d), 0) for d in owed]
    # A source ahead of its target (owed < 0, by less than a row) is clipped to 0, so the whole rows of
    # the others can exceed G by a row or two: take them back from the sources least owed.
    for _ in range(sum(counts) - global_batch):
        i = min((i for i in range(n) if counts[i] > 0), key=lambda i: (owed[i] - counts[i], -i))
        counts[i] -= 1
    # The rows left go to sources still owed a part of a row (never a whole row ahead then), the one that
    # would first fall a whole row behind at its weight first (earliest deadline); the largest remaining
    # debt alone is not enough: a light source owed as much as a heavy one can wait, the heavy one cannot.
    remaining = [owed[i] - counts[i] for i in range(n)]

    def deadline(i: int) -> float:
        rate = global_batch * weights[i]
        return (1.0 - remaining[i]) / rate if rate > 0 else math.inf

    ranking = sorted((i for i in range(n) if remaining[i] > 0), key=lambda i: (deadline(i), i))
    ranking += sorted((i for i in range(n) if remaining[i] <= 0), key=lambda i: (-remaining[i], i))
    for k in range(global_batch - sum(counts)):
        counts[ranking[k % n]] += 1
    return counts, expected
