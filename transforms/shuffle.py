"""`ShuffleRows`: token rows -> their hash groups, in few bytes, with the bytes shuffled counted.

  rows --split by hash group, encode (`easydata.io.compact_rows`)--> (group, bytes)
       --GroupByKey (or `GroupViaFiles`)--> (group, [bytes]) --decode--> (group, [RecordBatch])

The one place token data crosses a shuffle in a batch run (packing and the unpacked sort both group
through it). Each routing bundle counts the encoded size of every element it emits, as the element's
coder encodes it (`KEYED_ROWS_CODER`: what a remote runner's shuffle carries), and reports it on the
`stats` output as a `RunCounters` (`shuffled_bytes` of its stage); the run adds them up in its
manifest (`shuffle`). A retried bundle's report is dropped with its other outputs.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, List, Optional, Tuple

import apache_beam as beam
import pyarrow as pa
from apache_beam import coders, typehints
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from easydata.io.compact_rows import decode_rows, encode_row_ranges
from easydata.ops.sharding import group_ranges
from easydata.run.counters import RunCounters
from transforms.group_files import GroupViaFiles
from transforms.counters import STATS_TAG
from transforms.failures import classified_failures

__all__ = ["ShuffleRows", "KEYED_ROWS_CODER", "KeyedRows"]

#: `(hash group, encoded rows)`: what crosses the shuffle.
KeyedRows = Tuple[int, bytes]
#: `(hash group, all its rows)`: what comes out.
GroupedRows = Tuple[int, List[pa.RecordBatch]]
#: The coder Beam gives `KeyedRows` elements (the routing step declares that type): a variable-length
#: integer and length-prefixed bytes (`tests/test_coders.py` checks it is the one the job uses).
KEYED_ROWS_CODER = coders.registry.get_coder(typehints.Tuple[int, bytes])


@classified_failures
def _route(batch: pa.RecordBatch, num_groups: int, dictionary: Optional[bytes] = None) -> Iterator[KeyedRows]:
    """Splits a batch by hash group and encodes each part (`encode_rows` of each, in one pass)."""
    rows, groups, starts, stops = group_ranges(batch, num_groups)
    yield from zip(groups, encode_row_ranges(rows, starts, stops, dictionary=dictionary))


@classified_failures
class _CountFn(beam.DoFn):
    """Counts the encoded size of the elements entering the shuffle, reported once per bundle."""

    def __init__(self, stage: str):
        self._stage = stage
        self._bytes = 0

    def start_bundle(self) -> None:
        self._bytes = 0

    def process(self, element: KeyedRows) -> Iterator[Any]:
        self._bytes += KEYED_ROWS_CODER.estimate_size(element)
        return iter(())

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._bytes:
            yield WindowedValue(RunCounters(shuffled_bytes={self._stage: self._bytes}), MAX_TIMESTAMP, (GlobalWindow(),))


@classified_failures
def _decode(element: tuple[int, Any], dictionary: Optional[bytes] = None) -> tuple[int, list[pa.RecordBatch]]:
    group, encoded = element
    return group, [decode_rows(e, dictionary) for e in encoded]


class ShuffleRows(beam.PTransform):
    """Groups one output's token rows by hash group (see module docstring).

    Args:
      num_groups: hash groups (`easydata.ops.sharding.choose_num_groups`).
      stage: the stage's name in the manifest's `shuffle` (`pack`, `sort`).
      group_dir: group through files in this directory (`GroupViaFiles`, for runners whose workers
        share this machine's files); None: Beam's GroupByKey.
      dictionary: the run's zstd dictionary for the elements (`easydata.ops.shuffle_dictionary`), if any.

    Returns:
      Outputs `groups`, `(group, [RecordBatch, ...])` per non-empty group, and `stats` (`RunCounters`).
    """

    def __init__(self, *, num_groups: int, stage: str, group_dir: Optional[str] = None,
                 dictionary: Optional[bytes] = None):
        super().__init__()
        self._num_groups, self._stage, self._group_dir = num_groups, stage, group_dir
        self._dictionary = dictionary

    def expand(self, rows: beam.PCollection) -> dict[str, beam.PCollection]:
        routed = rows | "RouteToGroups" >> beam.FlatMap(_route, self._num_groups,
                                                        self._dictionary).with_output_types(KeyedRows)
        stats = routed | "CountShuffled" >> beam.ParDo(_CountFn(self._stage))
        if self._group_dir is None:
            grouped = (routed
                       | "Group" >> beam.GroupByKey()
                       | "Decode" >> beam.Map(_decode, self._dictionary).with_output_types(GroupedRows))
        else:  # decoded as each group's files are read
            grouped = routed | "Group" >> GroupViaFiles(self._group_dir, functools.partial(
                decode_rows, dictionary=self._dictionary), GroupedRows)
        return {"groups": grouped, STATS_TAG: stats}
