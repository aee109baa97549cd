"""Buffer rules: which rule fires, and which fires next."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.buffer_rules import BufferLevel, BufferRules, evaluate
from autooptimize.errors import InvalidArgument


def test_empty_buffer_never_fires():
    d = evaluate(BufferRules(max_age_seconds=1), BufferLevel(0, 0, None))
    assert not d.fire and d.rule is None and d.next_rule is None


def test_age_fires_whatever_the_size():
    rules = BufferRules(max_age_seconds=60, min_bytes=10**9, max_bytes=2 * 10**9, max_files=10**6)
    assert evaluate(rules, BufferLevel(1, 10, 59.0)).fire is False
    d = evaluate(rules, BufferLevel(1, 10, 60.0))
    assert d.fire and d.rule == "max_age"


def test_max_bytes_fires_before_age():
    rules = BufferRules(max_age_seconds=900, max_bytes=1000)
    d = evaluate(rules, BufferLevel(3, 1000, 1.0))
    assert d.fire and d.rule == "max_bytes"


def test_max_files_waits_for_min_bytes():
    rules = BufferRules(max_age_seconds=900, min_bytes=500, max_files=10)
    assert not evaluate(rules, BufferLevel(10, 499, 1.0)).fire
    d = evaluate(rules, BufferLevel(10, 500, 1.0))
    assert d.fire and d.rule == "max_files"


def test_next_rule_is_the_fullest():
    rules = BufferRules(max_age_seconds=100, max_files=10)
    d = evaluate(rules, BufferLevel(9, 5, 10.0))
    assert not d.fire and d.next_rule == "max_files" and d.seconds_to_next == pytest.approx(90.0)
    d = evaluate(rules, BufferLevel(1, 5, 80.0))
    assert d.next_rule == "max_age"


@pytest.mark.parametrize("kwargs", [{"max_age_seconds": 0}, {"max_age_seconds": 5, "min_bytes": -1},
                                    {"max_age_seconds": 5, "max_files": 0},
                                    {"max_age_seconds": 5, "min_bytes": 10, "max_bytes": 5}])
def test_invalid_rules_are_refused(kwargs):
    with pytest.raises(ValueError):
        BufferRules(**kwargs)
    with pytest.raises(InvalidArgument, match="max_|min_"):  # inside the error tree, naming the rule
        BufferRules(**kwargs)


@given(files=st.integers(1, 10**6), size=st.integers(0, 10**12), age=st.floats(0, 10**6),
       max_age=st.integers(1, 10**5))
def test_a_buffer_older_than_max_age_always_fires(files, size, age, max_age):
    d = evaluate(BufferRules(max_age_seconds=max_age, max_files=50, max_bytes=10**9), BufferLevel(files, size, age))
    if age >= max_age:
        assert d.fire
    if not d.fire:
        assert d.seconds_to_next is not None and d.seconds_to_next > 0
