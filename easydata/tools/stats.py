"""`easydata stats`: what an output holds, measured from its files, per output, dataset and split.

For every output of the manifest (`web`, or `web/train` and `web/validation` when split) it reads
each shard once, one record batch at a time, and measures:

* `rows`, `tokens` (real tokens) and `padding_tokens` / `padding_ratio` (padding of packed rows,
  `segment_ids == 0`; unpacked rows have none);
* the length distribution of its units: documents (or their windows) for unpacked rows, segments
  for packed rows: `count`, `mean`, `min`, `max` and percentiles (nearest rank: the smallest length
  with at least p % of the units at or below it), exact, from a histogram of lengths;
* `unique_tokens`: distinct token ids;
* from the manifest: `documents` (written), `truncated_documents` / `windowed_documents` /
  `extra_windows` when `tokenize.truncation` cut documents, and each output's share of all tokens.

Outputs named `<dataset>/<split>` are also summed per dataset and per split, and everything into
`total`. Memory: one histogram of lengths and one presence bitmap of token ids per output.
`plot_stats` draws the length histogram and the token shares with matplotlib (extra `plot`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import numpy as np

from easydata.errors import EasyDataError, OutputError, ValidationFailed
from easydata.figures import percent
from easydata.io.formats import iter_shard_batches
from easydata.run.manifest import OutputEntry, member_path, packed_seq_length, read_manifest
from easydata.run.progress import CountProgress

__all__ = ["compute_stats", "format_stats", "plot_stats", "length_bins", "PERCENTILES"]

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
_CUT_KEYS = ("truncated_documents", "truncated_tokens", "windowed_documents", "extra_windows")
#: Counts taken from the manifest's entry of an output (not measurable from its rows alone): the cut
#: documents, and the tokens a chat output trains on (`loss_mask` 1).
_MANIFEST_KEYS = (*_CUT_KEYS, "trained_tokens")


class _Accumulator:
    """Histogram of unit lengths, token presence and counts of one output (or a sum of outputs)."""

    def __init__(self) -> None:
        self.lengths = np.zeros(0, dtype=np.int64)
        self.seen = np.zeros(0, dtype=bool)
        self.counts = {"documents": 0, "rows": 0, "tokens": 0, "padding_tokens": 0}
        self.cut: dict[str, int] = {}

    def add_lengths(self, lengths: np.ndarray) -> None:
        self.lengths = _grown(self.lengths, np.bincount(lengths.astype(np.int64)))

    def add_tokens(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        if int(ids.min()) < 0:
            raise EasyDataError(f"negative token id {int(ids.min())} in the output")
        self.seen = _grown(self.seen, np.zeros(int(ids.max()) + 1, dtype=bool))
        self.seen[ids] = True

    def merge(self, other: "_Accumulator") -> None:
        self.lengths = _grown(self.lengths, other.lengths)
        self.seen = _grown(self.seen, other.seen)
        for key, value in other.counts.items():
            self.counts[key] += value
        for key, value in other.cut.items():
            self.cut[key] = self.cut.get(key, 0) + value

    def summary(self, unit: str, all_tokens: int) -> dict[str, Any]:
        counts = self.counts
        slots = counts["tokens"] + counts["padding_tokens"]
        out: dict[str, Any] = {
            **counts,
            "padding_ratio": round(counts["padding_tokens"] / slots, 6) if slots else 0.0,
            "unique_tokens": int(self.seen.sum()),
            "token_share": round(counts["tokens"] / all_tokens, 6) if all_tokens else 0.0,
            "length": _length_summary(self.lengths, unit),
        }
        out.update(self.cut)
        return out


def _grown(into: np.ndarray, add: np.ndarray) -> np.ndarray:
    """`into` padded to at least `add`'s length, plus `add` (sums counts, ORs booleans)."""
    if len(add) > len(into):
        into = np.pad(into, (0, len(add) - len(into)))
    into[:len(add)] = into[:len(add)] + add if into.dtype != bool else into[:len(add)] | add
    return into


def _length_summary(histogram: np.ndarray, unit: str) -> dict[str, Any]:
    n = int(histogram.sum())
    if n == 0:
        return {"unit": unit, "count": 0}
    values = np.arange(len(histogram))
    cumulative = np.cumsum(histogram)
    nonzero = np.flatnonzero(histogram)
    percentiles = {f"p{p}": int(np.searchsorted(cumulative, p * n / 100, side="left")) for p in PERCENTILES}
    return {"unit": unit, "count": n, "mean": round(float((values * histogram).sum() / n), 3),
            "min": int(nonzero[0]), "max": int(nonzero[-1]), **percentiles}


def _measure_output(output_dir: str, fmt: str, output: OutputEntry, seq_length: Optional[int],
                    progress: Optional[CountProgress] = None) -> _Accumulator:
    """One output's counts, read from its shards (`seq_length`: packed rows' length, None: unpacked)."""
    packed = seq_length is not None
    acc = _Accumulator()
    for shard in output.shards:
        for batch in iter_shard_batches(member_path(output_dir, shard.path, "shard path"), fmt, _columns(packed)):
            if progress is not None:
                progress.update(batch.num_rows)
            ids = batch.column("input_ids")
            values = ids.flatten().to_numpy(zero_copy_only=False)
            acc.counts["rows"] += batch.num_rows
            if packed:
                segments = batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False)
                if len(segments) != batch.num_rows * seq_length or len(values) != len(segments):
                    raise ValidationFailed(f"'{shard['path']}': its packed rows are not seq_length={seq_length}"
                                           " tokens long, as the manifest says; `easydata validate` checks the output")
                real = segments != 0
                acc.counts["tokens"] += int(real.sum())
                acc.counts["padding_tokens"] += int((~real).sum())
                acc.add_tokens(values[real])
                acc.add_lengths(_segment_lengths(segments, seq_length))
            else:
                acc.counts["tokens"] += len(values)
                acc.add_tokens(values)
                acc.add_lengths(np.diff(ids.offsets.to_numpy()))
    info = output.fields
    acc.counts["documents"] = int(info.get("documents_selected", output.documents_written))  # a mix: used
    acc.cut = {key: int(info[key]) for key in _MANIFEST_KEYS if key in info}
    return acc


def _columns(packed: bool) -> list[str]:
    return ["input_ids", "segment_ids"] if packed else ["input_ids"]


def _segment_lengths(segments: np.ndarray, seq_length: int) -> np.ndarray:
    """Lengths of the segments of packed rows (`segments`: their flat segment ids, 0 = padding)."""
    rows = segments.reshape(-1, seq_length)
    starts = np.ones_like(rows, dtype=bool)
    starts[:, 1:] = rows[:, 1:] != rows[:, :-1]
    flat_starts = np.flatnonzero(starts.ravel())
    lengths = np.diff(np.append(flat_starts, rows.size))
    return lengths[rows.ravel()[flat_starts] != 0]


def _split_name(output: str) -> tuple[str, Optional[str]]:
    dataset, _, split = output.partition("/")
    return dataset, (split or None)


def compute_stats(output_dir: str, progress: bool = False) -> dict[str, Any]:
    """Statistics of an output directory (see the module docstring), as plain JSON-compatible data; with
    `progress`, the rows read so far on stderr (`easydata.run.progress.CountProgress`).

    Raises:
      ValidationFailed: no readable manifest.
    """
    manifest = read_manifest(output_dir)
    fmt, packed = manifest.format, manifest.packed
    unit = "segment" if packed else "document"
    seq_length = packed_seq_length(output_dir, manifest["schema"]) if packed else None
    shown = CountProgress(sum(s.rows for o in manifest.outputs.values() for s in o.shards), "reading shards",
                          unit="rows") if progress else None
    with shown or contextlib.nullcontext():
        outputs = {name: _measure_output(output_dir, fmt, output, seq_length, shown)
                   for name, output in sorted(manifest.outputs.items())}
    total = _Accumulator()
    datasets: dict[str, _Accumulator] = {}
    splits: dict[str, _Accumulator] = {}
    for name, acc in outputs.items():
        total.merge(acc)
        dataset, split = _split_name(name)
        if split is not None:
            datasets.setdefault(dataset, _Accumulator()).merge(acc)
            splits.setdefault(split, _Accumulator()).merge(acc)
    all_tokens = total.counts["tokens"]
    result = {
        "output_dir": output_dir, "format": fmt, "packed": packed, "seq_length": seq_length,
        "vocab_size": (manifest.get("tokenizer") or {}).get("vocab_size"),
        "documents_in": manifest.get("documents_in"), "documents_rejected": manifest.get("documents_rejected"),
        # Read but left out by a mix (subsampled): neither in the output nor rejected.
        "documents_unused": sum(int(e.get("documents_unused", 0)) for e in (manifest.get("datasets") or {}).values()),
        "outputs": {name: acc.summary(unit, all_tokens) for name, acc in outputs.items()},
        "datasets": {name: acc.summary(unit, all_tokens) for name, acc in sorted(datasets.items())},
        "splits": {name: acc.summary(unit, all_tokens) for name, acc in sorted(splits.items())},
        "total": total.summary(unit, all_tokens),
    }
    mix = manifest.get("mix") if isinstance(manifest.get("mix"), dict) else None
    if mix and isinstance(mix.get("sources"), dict):  # which source gave what: rows do not name their source
        result["mix_sources"] = {name: {"documents": s.get("documents_selected", 0), "copies": s.get("document_copies", 0),
                                        "tokens": s.get("tokens_out", 0), "token_share": s.get("realized_token_share", 0.0),
                                        "target_share": (mix.get("target_weights") or {}).get(name)}
                                 for name, s in mix["sources"].items()}
    result["_histograms"] = {name: acc.lengths for name, acc in outputs.items()}
    return result


def format_stats(stats: dict[str, Any]) -> str:
    """A table of `compute_stats` results for the terminal."""
    length_unit = stats["total"]["length"]["unit"]
    shape = f"packed to {stats['seq_length']}" if stats["packed"] else "unpacked"
    unused = stats.get("documents_unused") or 0
    read = stats["documents_in"] or 0
    lines = [f"output: {stats['output_dir']}  ({stats['format']}, {shape}; documents read {read:,},"
             f" rejected {stats['documents_rejected'] or 0:,}"
             + (f", left out by the mix {unused:,}" if unused else "") + ")",
             f"{'':24} {'documents':>10} {'rows':>10} {'tokens':>13} {'share':>7} {'padding':>8} {'unique':>8}"
             f"  {length_unit} length p50 / p90 / p99 / max"]

    def row(name: str, entry: dict[str, Any]) -> str:
        length = entry["length"]
        lengths = (f"{length['p50']} / {length['p90']} / {length['p99']} / {length['max']}  (mean {length['mean']})"
                   if length["count"] else "-")
        line = (f"{name:24} {entry['documents']:>10,} {entry['rows']:>10,} {entry['tokens']:>13,}"
                f" {100 * entry['token_share']:>6.2f}% {100 * entry['padding_ratio']:>7.2f}%"
                f" {entry['unique_tokens']:>8,}  {lengths}")
        cut = ", ".join(f"{key.replace('_', ' ')} {entry[key]:,}" for key in _CUT_KEYS if entry.get(key))
        if entry.get("trained_tokens") is not None and entry["tokens"]:
            trained = (f"trained tokens (loss_mask 1) {entry['trained_tokens']:,},"
                       f" {percent(entry['trained_tokens'], entry['tokens'], 1)} of its tokens")
            cut = f"{cut}; {trained}" if cut else trained
        return line + (f"\n{'':24} {cut}" if cut else "")

    for title, key in (("", "outputs"), ("per dataset", "datasets"), ("per split", "splits")):
        if stats[key]:
            if title:
                lines.append(f"{title}:")
            lines.extend(row(("  " if title else "") + name, entry) for name, entry in stats[key].items())
    if stats.get("mix_sources"):
        lines.append("per source of the mix (from the manifest; rows: the copies of its documents):")
        for name, entry in stats["mix_sources"].items():
            target = entry.get("target_share")
            lines.append(f"  {name:22} {entry['documents']:>10,} {entry['copies']:>10,} {entry['tokens']:>13,}"
                         f" {100 * entry['token_share']:>6.2f}%" + (f"  target {100 * target:.2f}%" if target is not None
                                                                     else ""))
    lines.append(row("total", stats["total"]))
    return "\n".join(lines)


#: A length distribution whose longest unit is this many times its median is drawn on log axes.
LONG_TAIL_RATIO = 20


def length_bins(histograms: dict[str, np.ndarray]) -> tuple[np.ndarray, bool]:
    """Bin edges for the length histograms, and whether they are logarithmic: 60 even bins, or 60
    geometric ones from 1 when the lengths are long-tailed (the longest over `LONG_TAIL_RATIO` times the
    median), as web text and code are."""
    longest = max((len(h) for h in histograms.values()), default=1)
    counts = np.zeros(max(longest, 1), dtype=np.int64)
    for h in histograms.values():
        counts[:len(h)] += h
    total = int(counts.sum())
    median = int(np.searchsorted(np.cumsum(counts), (total + 1) // 2)) if total else 0
    if total and longest > LONG_TAIL_RATIO * max(median, 1):
        return np.unique(np.geomspace(1, longest, 61).astype(np.int64)), True
    return np.unique(np.linspace(0, max(longest, 1), 61).astype(np.int64)), False


def _pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive backend.

    Raises:
      EasyDataError: matplotlib is not installed (`pip install "easydata-beam[plot]"`).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EasyDataError("--plot needs matplotlib: pip install \"easydata-beam[plot]\" (or pip install"
                            " matplotlib)") from None
    return plt


def plot_format(path: str) -> str:
    """The image format `path`'s extension names (`png` without one), checked before any statistic is
    computed: `p.svg` was a PNG file named `.svg`, and a missing matplotlib was found only once a large
    output had been read.

    Raises:
      EasyDataError: matplotlib is not installed, or the extension is no format it writes.
    """
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if not suffix:
        return "png"
    supported = FigureCanvasBase.get_supported_filetypes()  # no figure made (and none of the caller's closed)
    if suffix not in supported:
        raise EasyDataError(f"--plot '{path}': '.{suffix}' is not an image format matplotlib writes"
                            f" ({', '.join(sorted(supported))})")
    return suffix


def plot_stats(stats: dict[str, Any], path: str) -> str:
    """Draws the length histogram (per output) and the outputs' token shares into an image file, of the
    format its extension names (`plot_format`).

    Raises:
      EasyDataError: matplotlib is not installed, or the extension is no image format.
      OutputError: the file cannot be written there.
    """
    image_format = plot_format(path)
    plt = _pyplot()
    histograms = stats["_histograms"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    edges, logarithmic = length_bins(histograms)
    if logarithmic:  # a long tail on a linear axis is one bar at 0 and an empty plot
        left.set_xscale("log")
        left.set_yscale("log")
    for name, histogram in histograms.items():
        if histogram.sum():
            lengths = np.arange(len(histogram))
            left.hist(lengths, bins=edges, weights=histogram, histtype="step", linewidth=1.5, label=name)
    unit = stats["total"]["length"]["unit"]
    left.set_xlabel(f"{unit} length (tokens)")
    left.set_ylabel(f"{unit}s")
    left.set_title(f"{unit} length distribution")
    if histograms:
        left.legend(fontsize="small")
    shares = stats["outputs"]
    names = list(shares)
    right.barh(names, [100 * shares[n]["token_share"] for n in names], color="tab:blue")
    for i, n in enumerate(names):
        right.text(100 * shares[n]["token_share"], i, f" {shares[n]['tokens']:,}", va="center", fontsize="small")
    right.set_xlim(0, 125 * max([shares[n]["token_share"] for n in names], default=1) or 1)  # room for labels
    right.set_xlabel("share of tokens (%)")
    right.set_title("tokens per output")
    right.invert_yaxis()
    figure.tight_layout()
    try:
        figure.savefig(path, format=image_format, dpi=100)
    except OSError as e:  # a folder that does not exist, no permission: the user's path, one line
        raise OutputError(f"cannot write the plot to '{path}': {e.strerror or e}") from None
    finally:
        plt.close(figure)
    return path
