"""`easydata.figures`: a share is never written as 0 % or 100 % when it is not; a size in the unit that shows it."""

from __future__ import annotations

from hypothesis import given, strategies as st

from easydata.figures import count, percent, size


def test_percent_keeps_whole_numbers_where_they_are_true():
    assert percent(900, 1000) == "90%" and percent(0, 5) == "0%" and percent(5, 5) == "100%"
    assert percent(19, 9420) == "0.2%" and percent(9401, 9420) == "99.8%"
    assert percent(1, 100_000) == "0.001%" and percent(99_999, 100_000) == "99.999%"
    assert percent(2, 52, 2) == "3.85%"
    assert percent(1, 10**9) == "<0.001%" and percent(10**9 - 1, 10**9) == ">99.999%"
    assert percent(1, 10**9, 2) == "<0.00001%"


@given(st.integers(1, 10**9), st.data())
def test_a_part_is_never_written_as_none_or_all_of_the_whole(whole, data):
    part = data.draw(st.integers(0, whole))
    text = percent(part, whole)
    value = float(text.lstrip("<>").rstrip("%"))
    assert (value == 0) == (part == 0) and (value == 100) == (part == whole)
    assert abs(value - 100 * part / whole) <= 0.5
    if text[0] in "<>":  # a bound, and a true one
        assert (100 * part / whole < value) if text[0] == "<" else (100 * part / whole > value)


def test_size_is_in_the_unit_that_shows_it():
    """The dry run said "1 file(s), 0.0 MB" of a 5 KB input."""
    assert [size(n) for n in (0, 999, 1000, 5234, 999_949, 999_960, 12_345_678, 3 * 10**18)] == \
        ["0 B", "999 B", "1.0 KB", "5.2 KB", "999.9 KB", "1.0 MB", "12.3 MB", "3,000.0 PB"]


def test_count_is_singular_for_one():
    """Summaries said "1 shards", "1 rows" and "1 documents read" (`easydata run`, `validate`, `inspect`, progress)."""
    assert [count(n, "shard") for n in (0, 1, 2, 1_000_000)] == ["0 shards", "1 shard", "2 shards", "1,000,000 shards"]
