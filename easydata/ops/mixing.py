"""Weighted mixing by share of output tokens: the plan and the per-document selection, in numpy.

Weights are shares of output *tokens*, not of documents, so a source of long files and a source of
short posts get the token shares asked for. The mix runs in two passes over each source's
tokenized documents:

1. **Measure.** Every document gets a selection hash `u = hash(seed, "<dataset>#mix", key)` (stable
   64-bit, `easydata.ops.sharding.row_hashes`). Each source's tokens are summed into a histogram over
   the top `HISTOGRAM_BITS` bits of `u` (`token_histogram`); histograms of batches add up, so the
   measure is the same whatever the runner or bundling.
2. **Plan.** `plan_mix` turns the histograms into a token budget `B` and, per source `i` with
   normalised weight `w_i` and `T_i` tokens, a repeat factor `r_i = w_i * B / T_i`:
     - `first_exhausted`: `B = min_i T_i / w_i`, the largest budget no source repeats for (the
       limiting source is used once, the others are subsampled);
     - `all_exhausted` (alias `restart`): `B = max_i T_i / w_i`, every source is used at least once
       and the smaller ones are repeated (upsampled);
     - `total_tokens`: `B` given; sources are subsampled or repeated as the budget needs.
   Every document is written `floor(r_i)` times, plus once more when its selection hash falls below
   the source's *threshold*. The threshold is a histogram bucket boundary chosen so the extra copies
   hold as close as possible to `(r_i - floor(r_i)) * T_i` tokens. With 65,536 buckets, a bucket holds
   one document or a sliver of a huge source, so realized shares match the targets to within about one
   document's tokens: a 2% weight gets its 2% instead of a Bernoulli draw's worth of noise.
3. **Select.** `select_copies` gives each document its number of copies. Copy `c` of a document is a
   new row keyed `<dataset>/<key>#<c>`, whose shuffle hash spreads repeats over the whole output.

All of it depends only on the data, the weights and the seed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping, Optional

import numpy as np

import pyarrow as pa

from easydata.errors import EasyDataError
from easydata.figures import percent
from easydata.io.formats import take_rows
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, row_hashes
from easydata.ops.splits import document_keys
from easydata.rows import piece_counts

__all__ = [
    "HISTOGRAM_BITS",
    "MIXED_NAME",
    "STOP_STRATEGIES",
    "MixPlan",
    "SourcePlan",
    "normalise_weights",
    "mix_budget",
    "plan_mix",
    "selection_buckets",
    "token_histogram",
    "select_copies",
    "mixed_keys",
    "measure_batch",
    "select_batch",
    "budget_setters",
    "describe_mix",
]

HISTOGRAM_BITS = 16
MIXED_NAME = "mixed"  # the output name of a mix (`OUT/mixed/`)
STOP_STRATEGIES = ("first_exhausted", "all_exhausted", "restart")


def normalise_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights scaled to sum to 1 (in name order, so the floats are the same everywhere).

    Raises:
      EasyDataError: for a negative, non-finite or all-zero weight.
    """
    bad = [f"{name}={w}" for name, w in sorted(weights.items()) if not math.isfinite(w) or w < 0]
    if bad:
        raise EasyDataError(f"mix.weights must be finite and >= 0, got {', '.join(bad)}")
    total = math.fsum(weights[name] for name in sorted(weights))
    if total <= 0:
        raise EasyDataError("mix.weights are all zero: give at least one dataset a positive weight")
    return {name: weights[name] / total for name in sorted(weights)}


def mix_budget(source_tokens: Mapping[str, float], weights: Mapping[str, float], stop_strategy: str,
               total_tokens: Optional[int] = None) -> float:
    """Output tokens of the mix (see module docstring); `weights` normalised.

    Raises:
      EasyDataError: when a source with a positive weight has nothing to give.
    """
    active = {name: w for name, w in weights.items() if w > 0}
    empty = sorted(name for name in active if source_tokens.get(name, 0) <= 0)
    if empty:
        raise EasyDataError(f"mix: dataset(s) {', '.join(empty)} have a positive weight but no tokens to mix"
                            " (no documents, or all rejected); give them weight 0 or fix the input")
    if total_tokens is not None:
        return float(total_tokens)
    ratios = [source_tokens[name] / w for name, w in sorted(active.items())]
    if stop_strategy == "first_exhausted":
        return min(ratios)
    if stop_strategy in ("all_exhausted", "restart"):
        return max(ratios)
    raise EasyDataError(f"mix.stop_strategy must be one of {', '.join(STOP_STRATEGIES)}, got {stop_strategy!r}")


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """How one source enters the mix.

    Attributes:
      weight: normalised target share of output tokens.
      tokens: tokens the source has (its documents, once).
      target_tokens: `weight * budget`.
      repeat_factor: `target_tokens / tokens`, the average copies per document.
      full_copies: copies every document gets (`floor(repeat_factor)`).
      threshold: documents whose selection bucket is below it get one copy more.
      planned_tokens: tokens the selection yields (exact: full copies + the buckets below threshold).
    """

    weight: float
    tokens: int
    target_tokens: float
    repeat_factor: float
    full_copies: int
    threshold: int
    planned_tokens: int


@dataclasses.dataclass(frozen=True)
class MixPlan:
    """The mix of every source (picklable: a side input of the selection step)."""

    stop_strategy: str
    total_tokens: Optional[int]
    budget: float
    sources: dict[str, SourcePlan]

    def as_dict(self) -> dict[str, object]:
        """The manifest's `mix` entry (without realized counters, which the pipeline adds)."""
        return {
            "stop_strategy": self.stop_strategy,
            "total_tokens": self.total_tokens,
            "budget_tokens": round(self.budget),
            "target_weights": {name: p.weight for name, p in self.sources.items()},
            "repeat_factors": {name: round(p.repeat_factor, 6) for name, p in self.sources.items()},
        }


def _fractional_threshold(histogram: np.ndarray, wanted: float) -> tuple[int, int]:
    """The bucket boundary whose tokens below are closest to `wanted`: `(boundary, tokens below)`."""
    cumulative = np.concatenate([[0], np.cumsum(histogram, dtype=np.int64)])
    right = int(np.searchsorted(cumulative, wanted, side="left"))
    candidates = [b for b in (right - 1, right) if 0 <= b < len(cumulative)]
    best = min(candidates, key=lambda b: (abs(cumulative[b] - wanted), b))
    return best, int(cumulative[best])


#: Copies of one document a mix may make (all_exhausted upsampling or a `total_tokens` budget).
MAX_REPEAT_FACTOR = 10_000


def plan_mix(histograms: Mapping[str, np.ndarray], weights: Mapping[str, float], *, stop_strategy: str,
             total_tokens: Optional[int] = None) -> MixPlan:
    """Plans the mix from each source's token histogram (`token_histogram`, summed over the source).

    Args:
      histograms: source name -> tokens per selection bucket; every weighted source must be present.
      weights: source name -> weight (normalised here).
      stop_strategy: `first_exhausted`, `all_exhausted` or `restart`.
      total_tokens: explicit budget (overrides the stop strategy).

    Raises:
      EasyDataError: a source would have to be repeated more than `MAX_REPEAT_FACTOR` times.
    """
    normalised = normalise_weights(weights)
    size = 1 << HISTOGRAM_BITS
    hist = {name: np.asarray(histograms.get(name, np.zeros(size, np.int64)), dtype=np.int64) for name in normalised}
    tokens = {name: int(h.sum()) for name, h in hist.items()}
    budget = mix_budget(tokens, normalised, stop_strategy, total_tokens)
    sources = {}
    for name, weight in normalised.items():
        target = weight * budget
        rate = target / tokens[name] if tokens[name] else 0.0
        if rate > MAX_REPEAT_FACTOR:  # each copy is a row: refused before any is made
            raise EasyDataError(f"mix: the budget of {budget:,.0f} tokens needs dataset '{name}' ({tokens[name]:,}"
                                f" tokens) repeated {rate:,.0f} times, more than {MAX_REPEAT_FACTOR:,}: lower"
                                " mix.total_tokens or that dataset's weight")
        full = int(math.floor(rate))
        threshold, extra = _fractional_threshold(hist[name], (rate - full) * tokens[name])
        sources[name] = SourcePlan(weight=weight, tokens=tokens[name], target_tokens=target, repeat_factor=rate,
                                   full_copies=full, threshold=threshold, planned_tokens=full * tokens[name] + extra)
    return MixPlan(stop_strategy=stop_strategy, total_tokens=total_tokens, budget=budget, sources=sources)


def selection_buckets(seed: int, dataset: str, keys: Iterable[str]) -> np.ndarray:
    """Each document's selection bucket (top `HISTOGRAM_BITS` bits of its selection hash)."""
    return (row_hashes(seed, f"{dataset}#mix", keys) >> np.uint64(64 - HISTOGRAM_BITS)).astype(np.int64)


def token_histogram(buckets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Tokens per selection bucket of a batch of documents (int64, `2**HISTOGRAM_BITS` long)."""
    return np.bincount(buckets, weights=lengths, minlength=1 << HISTOGRAM_BITS).astype(np.int64)


def select_copies(buckets: np.ndarray, source: SourcePlan) -> np.ndarray:
    """Copies of each document in the mix: `full_copies`, plus one below the threshold."""
    return source.full_copies + (buckets < source.threshold).astype(np.int64)


def mixed_keys(dataset: str, keys: list[str], copies: np.ndarray) -> list[str]:
    """Keys of the mixed rows, `<dataset>/<key>#<copy>`, in document order, copies together."""
    return [f"{dataset}/{key}#{c}" for key, n in zip(keys, copies.tolist()) for c in range(n)]


def _lengths(batch: pa.RecordBatch) -> np.ndarray:
    return np.diff(batch.column("input_ids").offsets.to_numpy()).astype(np.int64)


def measure_batch(batch: pa.RecordBatch, dataset: str, seed: int) -> np.ndarray:
    """A batch of one source's token rows as a token histogram over selection buckets (pass 1)."""
    buckets = selection_buckets(seed, dataset, document_keys(batch.column(KEY_COLUMN).to_pylist()))
    return token_histogram(buckets, _lengths(batch))


def select_batch(batch: pa.RecordBatch, dataset: str, seed: int, source: SourcePlan
                 ) -> tuple[Optional[pa.RecordBatch], dict[str, int]]:
    """A batch of one source's token rows in the mix (pass 3): each document repeated or dropped as
    `source` says, the copies re-keyed (`mixed_keys`) and re-hashed for the shuffle; None when the mix
    takes none of them. Also the batch's counters: `mix_documents`, `mix_tokens`, `mix_copies`,
    `mix_selected` (documents taken at least once) and `mix_tokens_out`."""
    keys = batch.column(KEY_COLUMN).to_pylist()
    copies = select_copies(selection_buckets(seed, dataset, document_keys(keys)), source)
    lengths = _lengths(batch)
    stats = {"mix_documents": piece_counts(batch).documents, "mix_tokens": int(lengths.sum()),
             "mix_copies": int(copies.sum()), "mix_selected": int(np.count_nonzero(copies)),
             "mix_tokens_out": int((lengths * copies).sum())}
    if not copies.any():
        return None, stats
    rows = take_rows(batch, np.repeat(np.arange(batch.num_rows), copies))
    new_keys = mixed_keys(dataset, keys, copies)
    rows = rows.set_column(rows.schema.get_field_index(KEY_COLUMN), KEY_COLUMN, pa.array(new_keys, pa.string()))
    rows = rows.set_column(rows.schema.get_field_index(HASH_COLUMN), HASH_COLUMN,
                           pa.array(row_hashes(seed, MIXED_NAME, new_keys), pa.uint64()))
    return rows, stats


def budget_setters(source_tokens: Mapping[str, float], weights: Mapping[str, float], stop_strategy: str,
                   total_tokens: Optional[int] = None) -> list[str]:
    """The sources whose size set the budget (used exactly once): for `first_exhausted` those that run
    out first (the others are subsampled), for `all_exhausted` those that run out last (the others are
    repeated); none for an explicit `total_tokens`. `weights` need not be normalised."""
    if total_tokens is not None:
        return []
    active = {name: w for name, w in weights.items() if w > 0 and source_tokens.get(name, 0) > 0}
    if not active:
        return []
    ratios = {name: source_tokens[name] / w for name, w in active.items()}
    pick = min if stop_strategy == "first_exhausted" else max
    best = pick(ratios.values())
    return sorted(name for name, r in ratios.items() if math.isclose(r, best, rel_tol=1e-12))


def describe_mix(entry: Mapping[str, object]) -> list[str]:
    """What a committed mix did, from a manifest's `mix` entry, as the run summary and `easydata stats`
    print it: per source its realized and target share of output tokens, the tokens it gave and how often
    its documents were used, the source(s) that set the budget and what each subsampled source left out."""
    sources = entry.get("sources") or {}
    if not isinstance(sources, Mapping) or not sources:
        return []
    strategy, total = entry.get("stop_strategy"), entry.get("total_tokens")
    how = f"total_tokens {total:,}" if total is not None else str(strategy)
    lines = [f"mix ({how}): {int(entry.get('tokens_out', 0)):,} tokens out of a budget of"
             f" {int(entry.get('budget_tokens', 0)):,}"]
    width = max(len(name) for name in sources)
    for name, s in sources.items():
        lines.append(f"  {name:<{width}}  {100 * s['realized_token_share']:6.2f}% of output tokens (target"
                     f" {100 * entry['target_weights'][name]:.2f}%): {s['tokens_out']:,} tokens from its {s['tokens']:,}"
                     f" (x{s['repeat_factor']:.3g}), {s['documents_selected']:,} of its {s['documents_mixed']:,}"
                     f" documents used, {s['document_copies']:,} copies")
    setters = budget_setters({n: s["tokens"] for n, s in sources.items()}, entry["target_weights"], str(strategy),
                             total)  # type: ignore[arg-type]
    if setters:
        role = "ran out first" if strategy == "first_exhausted" else "ran out last"
        lines.append(f"  budget set by {', '.join(setters)} (it {role}: used once)")
    left = [(n, s["tokens"] - s["tokens_out"], s["tokens"]) for n, s in sources.items() if s["tokens_out"] < s["tokens"]]
    if left:
        lines.append("  left out: " + ", ".join(f"{n} {out:,} of {had:,} tokens ({percent(out, had)})"
                                                for n, out, had in left if had))
    return lines

