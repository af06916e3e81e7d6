"""The environment API's own helpers (`envs.api.base`)."""

from __future__ import annotations

from envs.api.base import parse_int
from envs.api.fuzz import HUGE


def test_parse_int_reads_only_bounded_ascii_integers():
    assert [parse_int(s) for s in ("0", "-42", "+7", "007", "9" * 18)] == [0, -42, 7, 7, 10**18 - 1]
    for bad in ("", "-", "+", " 1", "1 ", "1\n", "1_000", "١٦", "𝟏", "²", "9" * 19, HUGE, "1.0", "0x1",
                "--1"):
        assert parse_int(bad) is None, bad
    assert parse_int("12345", max_digits=4) is None and parse_int("1234", max_digits=4) == 1234
