"""The one place where units are converted: bytes, bandwidths, durations, money, CP-SAT integer scaling.

Every quantity elsewhere names its unit (`memory_bytes`, `time_s`, `bandwidth_bytes_per_s`).
"""

from __future__ import annotations

import math
import re

from optsearch.errors import SpecError

BYTES_PER_GIB = 1024**3
BYTES_PER_GB = 1e9
SECONDS_PER_MINUTE = 60.0
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
SECONDS_PER_YEAR = 365.25 * SECONDS_PER_DAY

# Upper limits on what a user may ask for: far beyond any training run, and small enough that every quantity derived
# from them stays representable (CP-SAT works in int64; a deadline of 1e308 s cannot be scaled into it).
MAX_DURATION_S = 100 * SECONDS_PER_YEAR
MAX_USD = 1e12


def gib_to_bytes(gib: float) -> float:
    return gib * BYTES_PER_GIB


def bytes_to_gib(num_bytes: float) -> float:
    return num_bytes / BYTES_PER_GIB


def gbyte_per_s_to_bytes_per_s(gbyte_per_s: float) -> float:
    """GB/s (10^9 bytes per second, as vendors quote NVLink, PCIe and HBM) to bytes/s."""
    return gbyte_per_s * 1e9


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """Gbit/s (as NICs are quoted) to bytes/s."""
    return gbit_per_s * 1e9 / 8.0


def tflop_per_s_to_flop_per_s(tflop_per_s: float) -> float:
    return tflop_per_s * 1e12


def hours(seconds: float) -> float:
    return seconds / SECONDS_PER_HOUR


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_DURATION_UNIT_S = {"d": SECONDS_PER_DAY, "h": SECONDS_PER_HOUR, "m": SECONDS_PER_MINUTE, "s": 1.0}


def parse_duration_s(text: str, *, option: str = "duration", max_s: float = MAX_DURATION_S) -> float:
    """'90m', '36h', '7d', '1d12h', '1d 12h' (as format_duration writes it), '3600' or '3600s' -> seconds, at most
    `max_s` (100 years). Raises SpecError on anything else, the empty string included."""
    raw = re.sub(r"(?<=[dhms])\s+(?=\d)", "", text.strip().lower())
    try:
        value = float(raw)
    except ValueError:
        parts = _DURATION_PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise SpecError(
                f"{option} = {text!r}: not a duration; use seconds or a sum of d/h/m/s parts such as 90m, 36h, 7d, 1d12h"
            ) from None
        value = sum(float(n) * _DURATION_UNIT_S[u] for n, u in parts)
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{option} = {text!r}: must be a finite, positive duration")
    if value > max_s:
        raise SpecError(f"{option} = {text!r}: must be at most {max_s / SECONDS_PER_YEAR:g} years ({max_s:,.0f} s)")
    return value


def parse_money_usd(text: str, *, option: str = "money", max_usd: float = MAX_USD) -> float:
    """'250000', '250,000', '$250000' -> 250000.0 USD, at most `max_usd` ($1 trillion). Raises SpecError on anything
    else, the empty string included."""
    raw = text.strip().replace(",", "").removeprefix("$")
    try:
        value = float(raw)
    except ValueError:
        raise SpecError(f"{option} = {text!r}: not an amount of USD; use a plain number such as 250000") from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{option} = {text!r}: must be a finite, positive amount of USD")
    if value > max_usd:
        raise SpecError(f"{option} = {text!r}: must be at most {format_usd(max_usd)}")
    return value


def format_duration(seconds: float) -> str:
    """Seconds -> '2d 7h', '5h 12m', '3m 20s', '1.42 s' (for people; JSON keeps seconds), rounded to the last unit
    shown."""
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600 - 0.5:
        mins, secs = divmod(int(round(seconds)), 60)
        return f"{mins}m {secs}s"
    if seconds < SECONDS_PER_DAY - 30:
        hrs, mins = divmod(int(round(seconds / 60)), 60)
        return f"{hrs}h {mins}m"
    days, hrs = divmod(int(round(seconds / 3600)), 24)
    return f"{days}d {hrs}h" if hrs else f"{days}d"


def format_budget_duration(seconds: float) -> str:
    """A duration the user gave (--max-time), echoed without rounding: format_duration where that reads back to the
    same seconds, else every d/h/m/s part ('1d 12h 30m', not '1d 12h'); parse_duration_s reads either back."""
    short = format_duration(seconds)
    if not math.isfinite(seconds) or seconds < 60:
        return short
    try:
        if parse_duration_s(short) == seconds:
            return short
    except SpecError:
        pass
    days, rest = divmod(seconds, SECONDS_PER_DAY)
    hrs, rest = divmod(rest, SECONDS_PER_HOUR)
    mins, secs = divmod(rest, SECONDS_PER_MINUTE)
    parts = [f"{int(days)}d" if days else "", f"{int(hrs)}h" if hrs else "", f"{int(mins)}m" if mins else "",
             f"{secs:g}s" if secs else ""]
    return " ".join(p for p in parts if p)


def format_usd(usd: float) -> str:
    return f"${usd:,.0f}" if abs(usd) >= 100 else f"${usd:,.2f}"


# CP-SAT integer scaling lives with the CP-SAT backend (formulation/cpsat.py, `ticks_per_s`): the tick is chosen per
# model from its largest time, so it cannot be one constant here.
