"""`easydata.figures.percent`: a share is never written as 0 % or 100 % when it is not."""

from __future__ import annotations

from hypothesis import given, strategies as st

from easydata.figures import percent


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
