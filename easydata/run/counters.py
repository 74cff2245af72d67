"""`RunCounters`: what a run counted, typed, with one way to add two of them up.

Every step of a batch run reports what it counted as a `RunCounters` (a bundle's or a work unit's
worth); a combiner (`transforms.counters.SumCounters`) merges them into one, which the commit reads
(`easydata.run.finalize`). Counts are kept per name: a dataset's, or an output's (`mixed`,
`<dataset>/<split>`).

Fields:
  counts: name -> counter -> int. The counters: `documents_in`, `documents_rejected`, `input_bytes`
    (reading, chat), `packed_documents`, `rows`, ... (packing: `easydata.ops.pack_stage.PackStats`),
    `mix_documents`, `mix_tokens`, `mix_copies`, `mix_selected`, `mix_tokens_out` (a mix's selection).
  engines: dataset -> what its fast tokenizer engine did (`documents`, `verified`, `mismatches`,
    `hf_documents`: `easydata.text.engines.VerifiedEngine.take_counts`).
  shuffled_bytes: shuffle stage (`pack`, `sort`) -> encoded bytes of the token rows it carried.
  partial_inputs: dataset -> the files read only in part (`easydata.io.documents.Reject.partial_entry`).

Example:
    total = RunCounters.of("web", documents_in=10, documents_rejected=1)
    total = total.merge(RunCounters(engines={"web": {"documents": 9}}))
    total.count("web")["documents_in"]  # 10
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Optional

__all__ = ["RunCounters"]


def _add(into: dict[str, dict[str, int]], other: dict[str, dict[str, int]]) -> None:
    for name, values in other.items():
        target = into.setdefault(name, {})
        for key, value in values.items():
            target[key] = target.get(key, 0) + int(value)


@dataclasses.dataclass
class RunCounters:
    """A run's counters (see module docstring)."""

    counts: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    engines: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    shuffled_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    partial_inputs: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, name: str, counts: Optional[dict[str, int]] = None, **more: int) -> "RunCounters":
        """The counters `name` gets from one report: `counts` and the keywords, zeros left out."""
        values = {k: int(v) for k, v in {**(counts or {}), **more}.items() if v}
        return cls(counts={name: values} if values else {})

    def merge(self, other: "RunCounters") -> "RunCounters":
        """Adds `other` into these counters (in place: a combiner's accumulator) and returns them."""
        _add(self.counts, other.counts)
        _add(self.engines, other.engines)
        for stage, value in other.shuffled_bytes.items():
            self.shuffled_bytes[stage] = self.shuffled_bytes.get(stage, 0) + int(value)
        for name, entries in other.partial_inputs.items():
            self.partial_inputs.setdefault(name, []).extend(entries)
        return self

    @classmethod
    def sum(cls, parts: Iterable["RunCounters"]) -> "RunCounters":
        total = cls()
        for part in parts:
            total.merge(part)
        return total

    def to_json(self) -> dict[str, Any]:
        """A JSON-able copy (a work unit's checkpoint keeps its reader's counters: `easydata.run.checkpoint`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunCounters":
        return cls(counts={n: dict(v) for n, v in data.get("counts", {}).items()},
                   engines={n: dict(v) for n, v in data.get("engines", {}).items()},
                   shuffled_bytes=dict(data.get("shuffled_bytes", {})),
                   partial_inputs={n: list(v) for n, v in data.get("partial_inputs", {}).items()})

    def count(self, name: str) -> collections.Counter:
        """`name`'s counters (zeros for those never reported)."""
        return collections.Counter(self.counts.get(name, {}))
