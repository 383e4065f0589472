"""Units: the durations and amounts people type and read (units.py)."""

from __future__ import annotations

import pytest

from optsearch.errors import SpecError
from optsearch.units import format_duration, format_usd, parse_duration_s, parse_money_usd


@pytest.mark.parametrize("seconds,text", [
    (1.4213, "1.42 s"),
    (59.9, "59.9 s"),
    (60.0, "1m 0s"),
    (100.64, "1m 41s"),  # was "2m -19s": minutes rounded before the seconds were taken
    (119.5, "2m 0s"),
    (3599.4, "59m 59s"),
    (3599.6, "1h 0m"),  # rounds up into the next unit, never "60m 0s"
    (5 * 3600 + 12 * 60 + 29, "5h 12m"),
    (5 * 3600 + 12 * 60 + 31, "5h 13m"),
    (86369.0, "23h 59m"),
    (86371.0, "1d"),
    (2 * 86400 + 7 * 3600 + 29 * 60, "2d 7h"),
    (2 * 86400 + 7 * 3600 + 31 * 60, "2d 8h"),  # rounded to the hour shown, not cut
    (float("inf"), "inf"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text,seconds", [
    ("90m", 5400.0), ("36h", 129600.0), ("7d", 604800.0), ("1d12h", 129600.0), ("3600", 3600.0), ("3600s", 3600.0),
    ("1.5h", 5400.0), (" 2D ", 172800.0), ("1d 12h", 129600.0), ("27d 15h", 27 * 86400 + 15 * 3600.0),
])
def test_parse_duration(text, seconds):
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "1 d", "1d 12", "-3h", "0", "nan", "h"])
def test_parse_duration_rejects(text):
    with pytest.raises(SpecError, match="--max-time = "):
        parse_duration_s(text, option="--max-time")


@pytest.mark.parametrize("text,usd", [("250000", 250000.0), ("250,000", 250000.0), ("$1,200.50", 1200.5)])
def test_parse_money(text, usd):
    assert parse_money_usd(text) == usd


@pytest.mark.parametrize("text", ["", "ten", "-5", "0", "inf"])
def test_parse_money_rejects(text):
    with pytest.raises(SpecError, match="--max-cost = "):
        parse_money_usd(text, option="--max-cost")


def test_a_formatted_duration_reads_back_within_its_rounding():
    for seconds in (100.64, 5 * 3600 + 12 * 60 + 29, 2 * 86400 + 7 * 3600 + 29 * 60):
        assert abs(parse_duration_s(format_duration(seconds)) - seconds) <= 30 * 60


def test_format_usd():
    assert (format_usd(37947.27), format_usd(57.2), format_usd(100.0)) == ("$37,947", "$57.20", "$100")
