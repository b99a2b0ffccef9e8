"""Numbers as the pages write them."""

from __future__ import annotations

import pytest

from leaderboard.site import format as fmt


@pytest.mark.parametrize("value,text", [
    (1.234e15, "1.23 POPS"), (9.996e14, "1.00 POPS"), (12.34e12, "12.3 TOPS"), (183e15, "183 POPS"),
    (2.5e18, "2.50 EOPS"), (999.0, "999 OPS"), (0, "0 OPS"), (None, "–"), (float("nan"), "–"),
])
def test_ops_with_si_prefixes(value, text):
    assert fmt.ops(value) == text


def test_other_units():
    assert fmt.flops(989.4e12) == "989 TFLOP/s"
    assert fmt.percent(0.7512, 2) == "75.12 %"
    assert fmt.percent(0.000297) == "0.03 %" and fmt.percent(0) == "0.0 %"
    assert fmt.duration(3725) == "1 h 02 min"
    assert fmt.duration(65.2) == "1 min 05 s"
    assert fmt.country("de") == "Germany" and fmt.country("ZZ") == "ZZ"
    assert fmt.number(True) == "yes" and fmt.number([1, 2]) == "1, 2" and fmt.number({"a": 1}) == "a: 1"
    assert fmt.number(0.123456) == "0.1235" and fmt.number(3600.0) == "3,600"
