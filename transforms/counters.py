"""`SumCounters`: every step's `easydata.run.counters.RunCounters`, summed into one for the commit.

Each step reports its counters as a `RunCounters` per bundle or work unit, on an output tagged `stats`
(`STATS_TAG`); the batch pipeline flattens them and combines them with `beam.CombineGlobally(SumCounters())`,
so the commit receives one `RunCounters` (a singleton side input), not a list of every bundle's report.
"""

from __future__ import annotations

from typing import Iterable

import apache_beam as beam

from easydata.run.counters import RunCounters
from transforms.failures import classified_failures

__all__ = ["SumCounters", "STATS_TAG"]

#: The output tag every step reports its `RunCounters` on.
STATS_TAG = "stats"


@classified_failures
class SumCounters(beam.CombineFn):
    """Adds `RunCounters` up (exact, order-independent)."""

    def create_accumulator(self) -> RunCounters:
        return RunCounters()

    def add_input(self, total: RunCounters, counters: RunCounters) -> RunCounters:
        return total.merge(counters)

    def merge_accumulators(self, totals: Iterable[RunCounters]) -> RunCounters:
        return RunCounters.sum(totals)

    def extract_output(self, total: RunCounters) -> RunCounters:
        return total
