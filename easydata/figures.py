"""How the figures a user reads are written: a share as a percentage that is never rounded to 0 % or 100 %
when it is not (a run summary that says "100%" of a source was left out when 19 tokens of it were kept is a
wrong number). This module imports nothing, so any layer may use it.
"""

from __future__ import annotations

__all__ = ["percent"]


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
