"""How the figures a user reads are written: a share as a percentage that is never rounded to 0 % or 100 %
when it is not (a run summary that says "100%" of a source was left out when 19 tokens of it were kept is a
wrong number), a size in the unit that shows it (a 5 KB input is not "0.0 MB"), and a count with its noun
in the singular for one ("1 shard"). This module imports
nothing, so any layer may use it.
"""

from __future__ import annotations

__all__ = ["count", "percent", "size"]


def count(number: int, noun: str) -> str:
    """`number` with thousands separators and `noun` in the singular for one ("1 shard", "2,048 rows")."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def percent(part: float, whole: float, decimals: int = 0) -> str:
    """`part` of `whole` (> 0) as a percentage with at least `decimals` decimals, and more (up to 3 past them)
    where fewer would round a part to 0 % or 100 % it is not: 19 of 9,420 is "0.2%", 9,401 of 9,420 "99.8%";
    a part smaller still is "<0.001%" (or ">99.999%")."""
    share = 100 * part / whole
    places = decimals
    for places in range(decimals, decimals + 4):
        text = f"{share:.{places}f}"
        if (float(text) != 0 or part == 0) and (float(text) != 100 or part == whole):
            return f"{text}%"
    step = 10.0 ** -places
    return f"<{step:.{places}f}%" if share < 50 else f">{100 - step:.{places}f}%"


_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")  # decimal, as the config's sizes (`max_shard_size: 500MB`)


def size(nbytes: float) -> str:
    """A byte count in the largest decimal unit it reaches, one decimal past bytes: "512 B", "5.2 KB",
    "1,234.5 TB"."""
    value, unit = float(nbytes), 0
    while round(abs(value), 1 if unit else 0) >= 1000 and unit < len(_UNITS) - 1:  # 999,960 B is 1.0 MB
        value, unit = value / 1000, unit + 1
    return f"{int(nbytes):,} B" if unit == 0 else f"{value:,.1f} {_UNITS[unit]}"
