"""benchmarks.policy_sim: the policy's --price (the priced live rule by default, 0: the tiers)."""

from __future__ import annotations

import json

import pytest

from benchmarks import policy_sim


def _rules(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, int]:
    assert policy_sim.main(["--member", "m00", "--json", *argv]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    return row["policy"]["rules"]


def test_the_default_is_the_services_priced_rule_and_price_0_is_the_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    default = _rules(capsys)
    tiers = _rules(capsys, "--price", "0")
    assert default.get("priced", 0) > 0 and default.get("filled", 0) > 0  # hours that fill a target
    assert tiers.get("tiered", 0) > 0 and "priced" not in tiers and "filled" not in tiers


def test_a_negative_price_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        policy_sim.main(["--member", "m00", "--price", "-1"])
    assert e.value.code == 2 and "--price must be a whole number ≥ 0 (0: the tiers), got -1" in capsys.readouterr().err
