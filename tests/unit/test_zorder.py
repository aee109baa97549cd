"""The z-order key (autooptimize.domain.zorder): order kept per column, bits interleaved, nulls first,
strings past their shared prefix, negative numbers and timestamps; and the decision's zorder candidate."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.decision import MergeFacts, PartitionFacts, SortFacts, decide
from autooptimize.domain.zorder import (
    ZKey,
    bits_per_column,
    common_prefix,
    interleave,
    key_for,
    ordinal,
    scale,
    z_value,
)

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
BITS = bits_per_column(2)


@given(st.lists(LONGS, min_size=2, max_size=50))
def test_codes_of_integers_keep_their_order_including_negatives(values):
    key = key_for("a", "number", min(values), max(values), BITS)
    codes = [scale(key, v) for v in sorted(values)]
    assert codes == sorted(codes)
    assert all(1 <= c < 2**BITS for c in codes)
    # values are placed on a float line: ints closer than a float can tell apart share one code
    assert codes[0] == 1 and codes[-1] == 2**BITS - 1 or float(min(values)) == float(max(values))


@given(st.lists(st.floats(allow_nan=False, allow_infinity=True, width=64), min_size=2, max_size=50))
def test_codes_of_floats_keep_their_order(values):
    finite = [v for v in values if abs(v) != float("inf")] or [0.0]
    key = key_for("x", "number", min(finite), max(finite), BITS)
    codes = [scale(key, v) for v in sorted(values)]
    assert codes == sorted(codes)


def test_bounds_whose_span_a_float_cannot_hold_order_nothing_and_never_fail():
    values = [1.1928934952297603e299, 1.1928934952297604e299, -1.7976931336694223e308]  # found by hypothesis
    key = key_for("x", "number", min(values), max(values), BITS)
    assert (key.low, key.high) == (None, None)  # high − low overflows: the column orders nothing
    assert [scale(key, v) for v in sorted(values)] == [1, 1, 1]


@given(st.lists(st.text(min_size=0, max_size=12), min_size=2, max_size=40))
def test_codes_of_strings_keep_their_utf8_order(values):
    ordered = sorted(values, key=lambda s: s.encode("utf-8"))
    key = key_for("s", "string", ordered[0], ordered[-1], BITS)
    codes = [scale(key, v) for v in ordered]
    assert codes == sorted(codes)


def test_strings_are_told_apart_after_the_prefix_every_value_shares():
    values = [f"user-{i:08d}" for i in range(0, 10**6, 997)]
    key = key_for("s", "string", values[0], values[-1], BITS)
    assert key.prefix == common_prefix(b"user-00000000", values[-1].encode())
    assert key.prefix == len("user-00")
    codes = [scale(key, v) for v in values]
    assert len(set(codes)) > len(values) // 2  # without the prefix, all 6 bytes would be "user-0"
    assert codes == sorted(codes)


def test_nulls_come_first_and_only_nulls_get_zero():
    key = key_for("a", "number", -5, 5, BITS)
    assert scale(key, None) == 0
    assert scale(key, -5) == 1 and scale(key, -10**9) == 1  # out of bounds: clamped, never 0
    assert scale(key, 5) == 2**BITS - 1 and scale(key, 10**9) == 2**BITS - 1
    unknown = key_for("a", "number", None, None, BITS)
    assert [scale(unknown, v) for v in (None, 3, -3)] == [0, 1, 1]


def test_nan_sorts_above_every_number():
    key = key_for("x", "number", -1.0, 1.0, BITS)
    assert scale(key, float("nan")) == scale(key, float("inf")) == 2**BITS - 1 > scale(key, 0.99)


def test_dates_and_timestamps_are_days_and_microseconds():
    day = (dt.date(2026, 1, 2) - dt.date(1970, 1, 1)).days
    assert ordinal("date", day) == float(day)
    micros = 1_767_225_600_000_000
    key = key_for("ts", "timestamp", micros, micros + 3_600_000_000, BITS)
    codes = [scale(key, micros + s * 1_000_000) for s in range(0, 3600, 60)]
    assert codes == sorted(codes) and len(set(codes)) == len(codes)
    with pytest.raises(TypeError):
        ordinal("timestamp", dt.datetime(2026, 1, 1))


def test_interleave_takes_one_bit_of_each_code_from_the_top():
    assert interleave([0b11, 0b00], 2) == 0b1010
    assert interleave([0b00, 0b11], 2) == 0b0101
    assert interleave([0b10, 0b01], 2) == 0b1001
    assert interleave([1, 1, 1], 1) == 0b111
    top = 2**BITS - 1
    assert interleave([top, top], BITS) == 2 ** (2 * BITS) - 1 < 2**63


@given(st.lists(st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000)), min_size=2, max_size=40))
def test_z_value_is_monotone_in_each_column(rows):
    keys = [key_for("a", "number", -1000, 1000, BITS), key_for("b", "number", -1000, 1000, BITS)]
    for a, b in rows:
        z = z_value(keys, [a, b])
        assert z_value(keys, [a + 1, b]) >= z and z_value(keys, [a, b + 1]) >= z
        assert 0 <= z < 2**63


def test_the_curve_visits_quadrants_one_after_another():
    keys = [key_for("a", "number", 0, 99, BITS), key_for("b", "number", 0, 99, BITS)]
    points = sorted(((a, b) for a in range(100) for b in range(100)), key=lambda p: z_value(keys, list(p)))
    quarters = [points[i * 2500:(i + 1) * 2500] for i in range(4)]
    # each quarter of the curve is one quadrant: a box of about half of each column's range
    for quarter in quarters:
        assert max(a for a, _ in quarter) - min(a for a, _ in quarter) < 55
        assert max(b for _, b in quarter) - min(b for _, b in quarter) < 55


def test_column_counts_outside_two_to_four_are_refused():
    assert [bits_per_column(k) for k in (2, 3, 4)] == [31, 21, 15]
    for k in (1, 5):
        with pytest.raises(ValueError, match="2 to 4"):
            bits_per_column(k)
    assert ZKey.from_dict(key_for("s", "string", "ab", "ac", 31).as_dict()) == key_for("s", "string", "ab", "ac", 31)


def _facts(zorder: SortFacts | None, allowed=frozenset({"merge", "zorder"})) -> PartitionFacts:
    tolerance = 1 << 20
    merge = MergeFacts(bytes_rewritten=40 << 20, files_in=40, files_out=1, mse_before=float((60 << 20) ** 2),
                       mse_after=0.0)
    return PartitionFacts(files=40, bytes=40 << 20, mse=float((60 << 20) ** 2), tolerance=tolerance, merge=merge,
                          zorder=zorder, allowed=allowed)


def test_decide_offers_zorder_when_files_overlap_on_the_zorder_columns():
    overlapping = SortFacts(overlapping_bytes=40 << 20, partition_bytes=40 << 20, files=40,
                            bytes_rewritten=40 << 20, files_in=40, files_out=1, mse_after=0.0)
    decision = decide(_facts(overlapping))
    assert (decision.kind, decision.reason) == ("zorder", "unclustered")
    assert {c.kind for c in decision.candidates} == {"merge", "zorder"}
    assert decide(_facts(None)).kind == "merge"  # no z-order columns: no candidate
    assert decide(_facts(overlapping, frozenset({"merge"}))).kind == "merge"
    clustered = SortFacts(overlapping_bytes=0, partition_bytes=40 << 20, files=40, bytes_rewritten=40 << 20,
                          files_in=40, files_out=1, mse_after=0.0)
    assert decide(_facts(clustered)).kind == "merge"
