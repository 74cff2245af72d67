"""Weight schedules, checked once: what `WeightSchedulePoint`s mean as normalised weights per source, and
every way a schedule can be wrong. The reader's `WeightSchedule` (`easydata.reader.schedule`) reads with
it, and config validation checks `schedule` and `mix.weight_schedule` with it, so a schedule the reader
would refuse is refused before the job runs (the config accepted a negative step, an all-zero point or an
unknown dataset, and the job's hours ended in the reader's error)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence, Union

from easydata.config.models import WeightSchedulePoint

__all__ = ["parse_schedule", "schedule_problems"]


def schedule_problems(key: str, points: Sequence[WeightSchedulePoint], dataset_names: Sequence[str]) -> list[str]:
    """What the reader would refuse in a weight schedule over `dataset_names`, as a problem of config `key`
    (`schedule`, `mix.weight_schedule`); empty when it reads."""
    try:
        parse_schedule(points, dataset_names)
    except ValueError as e:
        return [f"{key}: {str(e).rstrip('.')}"]
    return []


def parse_schedule(points: Sequence[Union[WeightSchedulePoint, Mapping[str, Any]]], names: Sequence[str]
                   ) -> list[tuple[int, tuple[float, ...]]]:
    """`(step, weights normalised, in the order of names)` of each point, by step.

    Raises:
      ValueError: no points, a step that is not a non-negative int or appears twice, weights that are not
        a dict, a weight that is negative or not finite, a point whose weights are all 0, a name not in
        `names`.
    """
    names = tuple(names)
    if not points:
        raise ValueError("the schedule needs at least one WeightSchedulePoint, got none.")
    parsed = sorted((_parse_point(p, names) for p in points), key=lambda p: p[0])
    steps = [step for step, _ in parsed]
    duplicates = sorted({s for s in steps if steps.count(s) > 1})
    if duplicates:
        raise ValueError(f"schedule steps must be unique, got step {duplicates[0]} more than once.")
    return parsed


def _parse_point(point: Union[WeightSchedulePoint, Mapping[str, Any]],
                 names: tuple[str, ...]) -> tuple[int, tuple[float, ...]]:
    """`(step, normalised weights in `names` order)` of one point, validated."""
    if isinstance(point, Mapping):
        step, weights = point.get("step"), point.get("weights")
    else:
        step, weights = getattr(point, "step", None), getattr(point, "weights", None)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"a schedule point's `step` must be an int >= 0, got {step!r}.")
    if not isinstance(weights, Mapping):
        raise ValueError(f"the weights of schedule step {step} must be a dict name -> weight, got {weights!r}.")
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ValueError(f"schedule step {step} names {unknown[0]!r}, which is not a source; the sources are"
                         f" {sorted(names)}.")
    values = []
    for name in names:
        value = weights.get(name, 0.0)
        try:
            value = float(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"schedule step {step}: weight of {name!r} must be a number, got {value!r}.") from e
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"schedule step {step}: weight of {name!r} must be finite and >= 0, got {value!r}.")
        values.append(value)
    total = sum(values)
    if total <= 0:
        raise ValueError(f"schedule step {step}: the weights are all 0; give at least one source a positive weight.")
    return step, tuple(v / total for v in values)
