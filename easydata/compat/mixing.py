"""EasyData's in-memory mixing: `block_mixture_interleave`, `MixedShardedSource`, `WeightScheduler`.

These mix row iterables (sources, `datasets` objects, lists) as a trainer reads them. Selection is
deterministic and exact rather than sampled: the next row comes from the source furthest below its
target share (`w_i * emitted - taken_i`; ties broken in a `seed`-dependent order). Shares are counted
in **tokens** when rows carry `input_ids` (what a model actually trains on, as the Beam job's mix
does) and in rows otherwise, so a small weight gets its share from the first block on and never
starves. `block_size` is accepted for EasyData's signatures; exact selection needs no blocks.

Stop strategies: `first_exhausted` ends when any source with a positive weight runs out;
`all_exhausted` (and its alias `restart`, EasyData's default) restarts a source that runs out and
ends once every such source has run out at least once.
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from easydata.config import WeightSchedulePoint
from easydata.core.protocols import ShardedDataSource
from easydata.reader.schedule import WeightSchedule

__all__ = ["WeightScheduler", "WeightSchedulePoint", "MixedShardedSource", "block_mixture_interleave"]

STOP_STRATEGIES = ("restart", "first_exhausted", "all_exhausted")


class WeightScheduler:
    """Mixing weights as a function of the step (`easydata.reader.schedule.WeightSchedule`).

    Args:
      points: `WeightSchedulePoint(step=..., weights={...})`s.
      interpolation: `step`, `linear` or `cosine` between points.
    """

    def __init__(self, points: Sequence[WeightSchedulePoint], interpolation: str = "step"):
        names: list[str] = []
        for point in points:
            names.extend(n for n in point.weights if n not in names)
        self.points, self.interpolation = list(points), interpolation
        self.schedule = WeightSchedule(points, names, interpolation)

    @property
    def names(self) -> tuple[str, ...]:
        return self.schedule.names

    def get_weights(self, step: int) -> dict[str, float]:
        """The normalised weights at `step`."""
        return self.schedule.weights_at(step)

    __call__ = get_weights


def _units(row: Any) -> int:
    ids = row.get("input_ids") if isinstance(row, Mapping) else None
    return len(ids) if ids is not None else 1


class MixedShardedSource(ShardedDataSource):
    """Several sources as one stream (one shard, `"mixed"`), by fixed weights or a schedule.

    Args:
      sources: `{name: source}` or a list (named `dataset_0`, ... unless `weights` is a dict of the
        same length, whose keys then name them in order). Anything iterable works.
      weights: `{name: weight}` or a list in source order; None: equal weights.
      weight_scheduler: weights that change with the step (rows emitted so far); overrides `weights`.
      block_size: accepted (see the module docstring).
      seed: breaks ties between sources equally far below their share.
      stop_strategy: `restart`, `first_exhausted` or `all_exhausted`.
    """

    def __init__(self, sources: Union[Mapping[str, Iterable[Any]], Sequence[Iterable[Any]]],
                 weights: Union[Mapping[str, float], Sequence[float], None] = None,
                 weight_scheduler: Optional[WeightScheduler] = None, block_size: int = 1000, seed: int = 0,
                 stop_strategy: str = "restart", **_: Any):
        if stop_strategy not in STOP_STRATEGIES:
            raise ValueError(f"stop_strategy must be one of {', '.join(STOP_STRATEGIES)}, got {stop_strategy!r}")
        if isinstance(sources, Mapping):
            self.sources = dict(sources)
        else:
            sources = list(sources)
            names = list(weights) if isinstance(weights, Mapping) and len(weights) == len(sources) else \
                [f"dataset_{i}" for i in range(len(sources))]
            self.sources = dict(zip(names, sources))
        if not self.sources:
            raise ValueError("MixedShardedSource needs at least one source")
        names = list(self.sources)
        if weights is None:
            self.weights = {n: 1.0 for n in names}
        elif isinstance(weights, Mapping):
            unknown = sorted(set(weights) - set(names))
            if unknown:
                raise ValueError(f"weights name {unknown}, which are not sources ({names})")
            self.weights = {n: float(weights.get(n, 0.0)) for n in names}
        else:
            if len(weights) != len(names):
                raise ValueError(f"{len(weights)} weights for {len(names)} sources")
            self.weights = {n: float(w) for n, w in zip(names, weights)}
        if any(w < 0 for w in self.weights.values()) or not any(w > 0 for w in self.weights.values()):
            raise ValueError(f"weights must be >= 0 with at least one positive, got {self.weights}")
        self.weight_scheduler, self.block_size, self.seed = weight_scheduler, block_size, seed
        self.stop_strategy = stop_strategy

    @property
    def shard_names(self) -> list[str]:
        return ["mixed"]

    def _weights_at(self, step: int) -> dict[str, float]:
        if self.weight_scheduler is None:
            return self.weights
        at = self.weight_scheduler.get_weights(step)
        return {n: at.get(n, 0.0) for n in self.sources}

    def open_shard(self, shard_name: str) -> Iterator[Any]:
        if shard_name != "mixed":
            raise ValueError(f"unknown shard {shard_name!r}; a mix has one shard, 'mixed'")
        names = list(self.sources)
        order = names[:]
        random.Random(self.seed).shuffle(order)  # tie-break order: the seed's
        rank = {n: i for i, n in enumerate(order)}
        iterators = {n: iter(self.sources[n]) for n in names}
        taken = {n: 0.0 for n in names}
        exhausted: set[str] = set()
        must_run_out = {n for n in names if self.weights_or_schedule_positive(n)}  # zero throughout: never chosen
        emitted_units, step = 0.0, 0
        while True:
            weights = self._weights_at(step)
            total = sum(weights.values())
            live = [n for n in names if weights[n] > 0]
            if not live or total <= 0:
                return
            name = max(live, key=lambda n: (weights[n] / total * emitted_units - taken[n], -rank[n]))
            row = next(iterators[name], _END)
            if row is _END:
                if self.stop_strategy == "first_exhausted":
                    return
                exhausted.add(name)
                iterators[name] = iter(self.sources[name])
                row = next(iterators[name], _END)
                if row is _END:  # empty, or a one-shot iterator: nothing to restart
                    return
                if exhausted >= must_run_out:
                    return
            units = _units(row)
            taken[name] += units
            emitted_units += units
            step += 1
            yield row

    def weights_or_schedule_positive(self, name: str) -> bool:
        """Whether `name` can be chosen at all (a zero weight throughout never exhausts)."""
        if self.weight_scheduler is None:
            return self.weights[name] > 0
        return any(point.weights.get(name, 0) > 0 for point in self.weight_scheduler.points)


_END = object()


def block_mixture_interleave(datasets: Union[Mapping[str, Iterable[Any]], Sequence[Iterable[Any]]],
                             weights: Union[Mapping[str, float], Sequence[float], None] = None,
                             block_size: int = 1000, seed: int = 0, stop: str = "restart",
                             **kwargs: Any) -> MixedShardedSource:
    """Mixes `datasets` (a dict, or a list named by `weights`' keys in order) by `weights`; returns a
    `MixedShardedSource`, iterable as one stream of rows."""
    return MixedShardedSource(datasets, weights=weights, block_size=block_size, seed=seed, stop_strategy=stop,
                              **kwargs)
