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


def test_latency_and_start_delay_reach_the_simulated_service(capsys: pytest.CaptureFixture[str]) -> None:
    def run(*argv: str) -> dict:
        assert policy_sim.main(["--member", "m02", "--commits", "120", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    slow, fast = run(), run("--latency", "0.35", "--start-delay", "0.18")
    assert (slow["latency"], slow["start_delay"]) == (2.0, None)
    assert (fast["latency"], fast["start_delay"]) == (0.35, 0.18)
    # merges that land sooner at 5 commits/s keep fewer files live, and read more often
    assert fast["rows"][0]["policy"]["mean_live_files"] < slow["rows"][0]["policy"]["mean_live_files"]
    assert fast["rows"][0]["policy"]["actions"] > slow["rows"][0]["policy"]["actions"]
    assert fast["rows"][0]["baseline"] == slow["rows"][0]["baseline"]  # the bin-pack blocks: no latency


def test_a_timer_lag_reaches_the_simulated_service(capsys: pytest.CaptureFixture[str]) -> None:
    """m01's hours reached by late data go cold by their gaps mid-stream; judged 0.85 s late, a late write
    has often come meanwhile, so fewer of them are finished early (read whole) and finished again."""
    def run(*argv: str) -> dict:
        assert policy_sim.main(["--member", "m01", "--commits", "300", "--latency", "0.35", "--start-delay", "0.18",
                                "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    at_once, lagged = run(), run("--timer-lag", "0.85")
    assert (at_once["timer_lag"], lagged["timer_lag"]) == (0.0, 0.85)
    now, late = at_once["rows"][0]["policy"], lagged["rows"][0]["policy"]
    assert late["bytes_rewritten"] < 0.95 * now["bytes_rewritten"]
    assert late["mean_live_files"] > now["mean_live_files"]  # the same hours keep their files a little longer
    assert lagged["rows"][0]["baseline"] == at_once["rows"][0]["baseline"]


def test_a_start_delay_outside_the_latency_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, said in ((["--latency", "-1"], "--latency must be seconds ≥ 0, got -1.0"),
                       (["--timer-lag", "-0.5"], "--timer-lag must be seconds ≥ 0, got -0.5"),
                       (["--latency", "0.3", "--start-delay", "0.5"], "--start-delay must be seconds within [0, --latency (0.3)]")):
        with pytest.raises(SystemExit) as e:
            policy_sim.main(["--member", "m00", *argv])
        assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_variant_replays_the_member_from_another_seed(capsys: pytest.CaptureFixture[str]) -> None:
    def run(*argv: str) -> dict:
        assert policy_sim.main(["--member", "m05", "--json", *argv]) == 0
        (row,) = json.loads(capsys.readouterr().out)["rows"]
        return row
    own, other = run(), run("--variant", "3")
    assert other["member"] == own["member"] + "~3"
    assert other["baseline"]["bytes_written"] != own["baseline"]["bytes_written"]
    with pytest.raises(SystemExit) as e:
        policy_sim.main(["--member", "m05", "--variant", "-2"])
    assert e.value.code == 2 and "--variant: a variant is a whole number ≥ 0" in capsys.readouterr().err


def test_an_output_model_reaches_both_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Merges that write less than they read (the service's: 0.986 of the bytes, less 52.6 KB per file
    removed, on benchmarks.streaming's m08) shrink what both the policy and the bin-pack rewrite later."""
    def run(*argv: str) -> dict:
        assert policy_sim.main(["--member", "m08", "--commits", "200", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    same, smaller = run(), run("--output-ratio", "0.986", "--file-overhead", "52596")
    assert (smaller["output_ratio"], smaller["file_overhead"]) == (0.986, 52596)
    for side in ("policy", "baseline"):
        assert smaller["rows"][0][side]["bytes_written"] == same["rows"][0][side]["bytes_written"]
        assert smaller["rows"][0][side]["bytes_rewritten"] < same["rows"][0][side]["bytes_rewritten"]
    for argv, said in ((["--output-ratio", "2"], "--output-ratio must be within [0.5, 1.5], got 2.0"),
                       (["--file-overhead", "-1"], "--file-overhead must be bytes ≥ 0, got -1")):
        with pytest.raises(SystemExit) as e:
            policy_sim.main(["--member", "m00", *argv])
        assert e.value.code == 2 and said in capsys.readouterr().err
