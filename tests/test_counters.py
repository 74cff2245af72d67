"""`RunCounters`: a run's counters, typed, summed the same whatever the bundles (`merge`, `SumCounters`)."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from easydata.run.counters import RunCounters

_NAMES = st.sampled_from(["web", "code", "mixed", "web/train"])
_KEYS = st.sampled_from(["documents_in", "documents_rejected", "input_bytes", "packed_rows", "mix_selected"])
_REPORT = st.one_of(
    st.builds(lambda n, c: RunCounters.of(n, c), _NAMES, st.dictionaries(_KEYS, st.integers(0, 10**9), max_size=4)),
    st.builds(lambda n, c: RunCounters(engines={n: c}), _NAMES,
              st.dictionaries(st.sampled_from(["documents", "verified", "mismatches"]), st.integers(1, 99), min_size=1)),
    st.builds(lambda s, b: RunCounters(shuffled_bytes={s: b}), st.sampled_from(["pack", "sort"]), st.integers(1, 10**9)),
    st.builds(lambda n, o: RunCounters(partial_inputs={n: [{"path": f"{n}.jsonl", "offset": o}]}), _NAMES,
              st.integers(0, 10**6)),
)


def _canonical(counters: RunCounters) -> dict:
    data = counters.to_json()
    data["partial_inputs"] = {n: sorted(v, key=json.dumps) for n, v in data["partial_inputs"].items()}
    return data


@settings(max_examples=200, deadline=None)
@given(st.lists(_REPORT, max_size=30), st.randoms(use_true_random=False), st.integers(1, 6))
def test_any_grouping_and_order_of_reports_gives_the_same_total(reports, rng, parts):
    """What a combiner computes (partial sums in any bundles, merged in any order) equals the plain sum."""
    expected = _canonical(RunCounters.sum(RunCounters.from_json(r.to_json()) for r in reports))
    shuffled = [RunCounters.from_json(r.to_json()) for r in reports]
    rng.shuffle(shuffled)
    groups = [RunCounters.sum(shuffled[i::parts]) for i in range(parts)]
    rng.shuffle(groups)
    assert _canonical(RunCounters.sum(groups)) == expected
    total = RunCounters.sum(RunCounters.from_json(r.to_json()) for r in reports)
    for name in total.counts:
        assert total.count(name) == sum((r.count(name) for r in reports), start=total.count("none"))


def test_zero_counts_are_left_out_and_unknown_names_count_zero():
    counters = RunCounters.of("web", documents_in=3, documents_rejected=0)
    assert counters.counts == {"web": {"documents_in": 3}}
    assert counters.count("code")["documents_in"] == 0
    assert RunCounters.from_json(json.loads(json.dumps(counters.to_json()))) == counters
