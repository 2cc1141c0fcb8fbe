"""Nsight Compute's metric values and units, converted exactly.

ncu prints values scaled to a unit it names beside them (the raw page's units row, the details page's "Metric Unit"
column): `us`, `Mbyte`, `Tbyte/s`, `Ghz`, `%`, `inst/cycle`, ... and, in older versions, `usecond`, `nsecond`,
`cycle/nsecond`. The prefixes are decimal (SI): the H100 fixture's raw page gives `dram__bytes.sum.peak_sustained`
as 1.28 `Kbyte/cycle` beside `dram__bytes.avg.peak_sustained` 32 `byte/cycle` over 40 channels (1280 bytes), and
the public details page prints the 32 KiB shared-memory configuration as 32,768 `byte` where the H100 one prints
32.77 `Kbyte`. Numbers carry thousands separators ("1,980,000"). Conversion goes through Decimal, so that 11.008
us is 11008 ns exactly and not 11007.999999999998.

Canonical units: time in ns (a duration), rates per second, frequencies in hz, bytes in bytes, counts as counts.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

_SI = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_TIME_S = {  # seconds per unit
    "ns": Decimal("1e-9"),
    "nsecond": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "usecond": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "msecond": Decimal("1e-3"),
    "s": Decimal(1),
    "second": Decimal(1),
}
# Units that count things: kept as they are (an SI prefix, where ncu scales one, is applied).
_COUNTS = {
    "byte",
    "cycle",
    "inst",
    "sector",
    "sectors",
    "warp",
    "thread",
    "block",
    "register",
    "SM",
    "pass",
    "request",
    "sample",
    "branches",
    "cluster",
    "%",
    "",
}


class UnitError(ValueError):
    pass


def _part(text: str, denominator: bool) -> tuple[Decimal, str]:
    """One side of a unit: (how many canonical units one of it is, the canonical unit's name)."""
    if text in _TIME_S:
        s = _TIME_S[text]
        return (s, "s") if denominator else (s / Decimal("1e-9"), "ns")
    if text.lower().endswith("hz") and text[:-2] in _SI:
        return Decimal(_SI[text[:-2]]), "hz"
    if text in _COUNTS:
        return Decimal(1), text
    if len(text) > 1 and text[0] in _SI and text[1:] in _COUNTS:
        return Decimal(_SI[text[0]]), text[1:]
    raise UnitError(text)


def factor(unit: str) -> tuple[Decimal, str]:
    """('Tbyte/s') -> (10**12, 'byte/s'); raises UnitError for a unit roseprof does not know."""
    unit = unit.strip()
    num, _, den = unit.partition("/")
    f, name = _part(num, False)
    if den:
        g, den_name = _part(den, True)
        f, name = f / g, f"{name}/{den_name}"
    if name == "cycle/s":  # older ncu: cycle/nsecond for clocks
        name = "hz"
    return f, name


def number(text: str) -> Decimal | None:
    """A cell as ncu printed it: '1,980,000' -> 1980000; '' or 'n/a' -> None; 'nan' -> NaN."""
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "na", "-"):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def convert(text: str, unit: str) -> tuple[float, str] | None:
    """(value in the canonical unit, that unit), or None where the cell holds no number."""
    n = number(text)
    if n is None:
        return None
    f, name = factor(unit)
    if n.is_nan():
        return math.nan, name
    return float(n * f), name
