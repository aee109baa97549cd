"""Commands about tables and actions: track, optimize, status, explain, whatif, scan, demo."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from autooptimize.cli.common import current_settings, print_result
from autooptimize.cli.progress import wait_with_progress
from autooptimize.domain.suggest import SUGGEST_COLD_AFTER
from autooptimize.errors import InvalidArgument
from spark_actors.session import get_session, stop_server_started_within

OPTIMIZE_FIELDS = ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out", "bytes_in",
                   "bytes_out", "snapshot_id")


def track_command(table: str, tuning: dict) -> str:
    """The ``autooptimize track`` command that sets every knob of a suggested ``tuning``, those at their
    off value included: a knob left out keeps the table's current value, not the suggestion's."""
    flag = {True: "--", False: "--no-"}
    return (f"autooptimize track {table} --merge-price {tuning.get('price', 0)} --merge-fan-in {tuning['fan_in']} "
            f"--cold-after {tuning['cold_after_seconds']:g} --cold-gap-factor {tuning.get('cold_gap_factor', 0):g} "
            f"--leave-alone-below {tuning['leave_alone_below']} {flag[bool(tuning['quiet_merge'])]}quiet-merge "
            f"{flag[bool(tuning.get('cold_absorb'))]}cold-absorb")


def cmd_track(args: argparse.Namespace) -> int:
    from autooptimize.api import track

    tuning = {
        "target_file_size": args.target_size, "tolerance": args.tolerance, "min_input_files": args.min_input_files,
        "priority_class": args.priority, "weight": args.weight, "sort_order": args.sort_order,
        "zorder_columns": args.zorder_columns,
        "allowed_actions": args.allowed_actions, "max_bytes_per_action": args.max_bytes_per_action,
        "min_interval_seconds": args.min_interval, "allow": args.allow, "disallow": args.disallow,
        "merge_fan_in": args.merge_fan_in, "cold_after_seconds": args.cold_after,
        "cold_gap_factor": args.cold_gap_factor, "merge_price": args.merge_price,
        "leave_alone_below": args.leave_alone_below, "quiet_merge": args.quiet_merge,
        "cold_absorb": args.cold_absorb, "auto_tune": args.auto_tune, "tenant": args.tenant,
    }
    result = track(args.table, settings=current_settings(), **{k: v for k, v in tuning.items() if v is not None})
    print_result(result, args.json)
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from autooptimize.api import optimize

    options: dict[str, str] = {}
    for key, value in args.option or []:
        if key in options:
            raise InvalidArgument(f"--option {key} is given twice ({options[key]!r} and {value!r}); give it once")
        options[key] = value
    handle = optimize(args.table, partition=args.partition, action=args.action, priority=args.priority,
                      dry_run=args.dry_run, target_file_size=args.target_size, options=options,
                      settings=current_settings())
    if args.dry_run:  # a preview: planned in memory, no action to wait for
        result = handle.wait(timeout=args.timeout)
    elif args.wait:
        result = wait_with_progress(current_settings(), handle.id, args.timeout)  # WaitTimeout: exit 4
    else:
        result = handle.result
    shown = {k: result.get(k) for k in OPTIMIZE_FIELDS}
    if args.dry_run:
        shown["plan"] = result.get("plan")
    if result.get("error"):
        shown["error"] = result["error"]
    print_result(shown, args.json)
    return 0 if result["state"] in ("succeeded", "skipped", "queued", "running") else 1


def cmd_status(args: argparse.Namespace) -> int:
    from autooptimize.api import status

    if args.queues:
        from autooptimize.api import queues

        backlog = queues(settings=current_settings())
        if args.json:
            print(json.dumps(backlog, default=str))
            return 0
        print(f"dispatch={backlog['dispatch']} slots={backlog['slots']} in flight={backlog['in_flight']} "
              f"queued={backlog['queued']}")
        for cls, entry in backlog["classes"].items():
            tables = ", ".join(f"{t}={n}" for t, n in entry["tables"].items()) or "-"
            print(f"  {cls:10} {entry['queued']:>6}  {tables}")
        if backlog["recommendation"]:
            print(f"recommendation: {backlog['recommendation']}")
        return 0

    result = status(args.table, settings=current_settings())
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    if args.table and result.get("refused"):
        print(f"{result['table']} is refused ({result['refused']['reason']}): {result['refused']['message']}")
        return 0
    if args.table:
        print(f"{result['table']}: {result['files']} files in {len(result['partitions'])} partitions "
              f"(snapshot {result['snapshot_id']})")
        failures = result.get("decision_failures") or {}
        if failures.get("count"):
            print(f"decisions failed: {failures['count']}, last on {failures.get('last_partition')}: "
                  f"{failures.get('last_reason')}")
        print(f"{'partition':40} {'n':>6} {'small':>6} {'bytes':>12} {'rmse':>12}  last action")
        for p in result["partitions"]:
            last = p["last_action"]
            last_s = f"{last['kind']} {last['state']} {last['at']}" if last else "-"
            print(f"{p['partition'] or '(unpartitioned)':40} {p['n']:>6} {p['small_files']:>6} {p['bytes']:>12} "
                  f"{p['rmse_bytes']:>12}  {last_s}")
    elif not result:
        print("no table is tracked yet; track one with `autooptimize track NAMESPACE.TABLE`, or set "
              "AO_AUTO_TRACK to track tables matching a pattern")
    else:
        for line in result:
            print(json.dumps(line, default=str) if "error" in line else
                  f"{line['table']:40} files={line['files']:<6} partitions={line['partitions']:<4} "
                  f"needs_attention={line['needs_attention']:<4} worst={line['worst_partition']}"
                  + (f" decisions_failed={line['decision_failures']} ({line['last_decision_failure']})"
                     if line.get("decision_failures") else ""))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from autooptimize.services.explain import explain

    settings = current_settings()

    def spark() -> object:  # only before the table's first rewrite, to calibrate as the action will

        return get_session(settings)

    with stop_server_started_within(settings):  # a local server its calibration started does not outlive it
        result = explain(settings, args.table, args.partition, args.target_size,
                         spark=None if args.no_calibrate else spark)
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    if result.get("refused"):
        print(f"{result['table']} is refused ({result['refused']['reason']}): {result['refused']['message']}")
        return 0
    print(f"{result['table']} at snapshot {result['snapshot_id']} (target {result['target_file_size']} bytes)")
    for p in result["partitions"]:
        print(f"  {p['partition'] or '(unpartitioned)':40} {p['action']:6} {p['reason']:18} "
              f"{(p.get('rule') or '-'):15} "
              f"files {p['files_replaced']} → {p['files_out']}, {p['bytes_rewritten']} bytes, "
              f"rmse {int(p['mse_before'] ** 0.5)} → {int(p['mse_after'] ** 0.5)}{_budget_text(p.get('budget'))}")
    return 0


def _budget_text(budget: dict[str, Any] | None) -> str:
    """", value V, cost C core-s, budget: verdict (reason)" for explain's line (nothing without a value)."""
    if not budget or "value" not in budget:
        return ""
    reason = f" ({budget['reason']})" if budget.get("reason") else ""
    return (f", value {budget['value']:g}, cost {budget['cost_core_seconds']:g} core-s, "
            f"budget: {budget['verdict']}{reason}")


def cmd_whatif(args: argparse.Namespace) -> int:
    from autooptimize.services.explain import whatif

    if args.suggest:
        return _suggest(args)
    if args.apply or args.cold_after or args.no_calibrate:
        raise InvalidArgument("--apply, --cold-after and --no-calibrate go with --suggest")
    if not args.target_size:
        raise InvalidArgument("whatif needs --target-size (e.g. 64MiB,128MiB) or --suggest")
    # spaces around the commas are fine; any other character (a newline) is part of a size and refused there
    targets = [t.strip(" ") for t in args.target_size.split(",") if t.strip(" ")]
    tolerances = [t.strip(" ") for t in args.tolerance.split(",") if t.strip(" ")] if args.tolerance else None
    rows = whatif(current_settings(), args.table, targets, tolerances)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'target':>12} {'tolerance':>12} {'files':>14} {'replaced':>9} {'bytes rewritten':>16} {'rmse after':>12}")
    for r in rows:
        print(f"{r['target_file_size']:>12} {r['tolerance']:>12} {r['files_before']:>6} → {r['files_after']:<5} "
              f"{r['files_replaced']:>9} {r['bytes_rewritten']:>16} {int(r['mse_after'] ** 0.5):>12}")
    return 0


def _calibration_text(c: dict[str, Any]) -> str:
    alone = (f"a writer's file rewritten alone weighs {c['first_ratio']:.3f}× its bytes, before that; "
             if c.get("file_overhead") is not None and c.get("first_ratio", 1.0) != 1.0 else "")
    return (f"calibrated: {alone}{c['groups']} groups and {c.get('singles', 0)} single files of the table's, "
            f"{c['bytes_read']} bytes, rewritten by the {c['engine']} engine and removed; the table has no fit "
            f"of its own")


def _suggest(args: argparse.Namespace) -> int:
    from autooptimize.services.autotune import suggest

    if args.target_size:
        raise InvalidArgument("--suggest keeps the table's target size; leave out --target-size")

    cold: tuple[float, ...] = SUGGEST_COLD_AFTER
    if args.cold_after:
        try:
            cold = tuple(float(x) for x in args.cold_after.split(",") if x.strip())
        except ValueError:
            cold = ()
        if not cold or not all(0 <= c <= 86400 for c in cold):
            raise InvalidArgument(f"--cold-after must be seconds from 0 to 86400, comma-separated (got {args.cold_after!r})")
    settings = current_settings()

    def spark() -> object:  # only for a table with no output model of its own and no calibration recorded
        return get_session(settings)

    with stop_server_started_within(settings):  # a local server its calibration started does not outlive it
        out = suggest(settings, args.table, apply=True if args.apply else None, cold_after=cold,
                      spark=None if args.no_calibrate else spark)
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    t = out["tuning"]
    print(f"{out['table']}: {out['commits']} writer commits over {out['history_seconds']:.0f} s replayed, "
          f"{out['tried']} tunings tried")
    print(f"suggested: {describe_tuning(t)}"
          + ("" if out["meets_goal"] else "; no candidate keeps the file goal: the fewest live files shown"))
    print(f"the same by hand: {track_command(out['table'], t)}")
    calibration = out.get("output_calibration")
    if out.get("file_overhead") is not None:
        source = (f"the service's last {out['output_commits']} merges of other tables; the table has no "
                  f"REPLACE commit of its own" if out.get("output_borrowed")
                  else _calibration_text(calibration) if calibration
                  else f"the table's {out['output_commits']} REPLACE commits")
        print(f"a merge writes {out['output_ratio']:.3f}× the bytes it reads, less {out['file_overhead'] / 1024:.1f} KiB "
              f"for each file it removes (fitted on {source})")
    elif calibration:
        print(f"merged bytes weigh {out['output_ratio']:.3f}× their inputs ({_calibration_text(calibration)}; "
              "too alike to tell a weight per file apart)")
    elif out.get("output_ratio", 1.0) != 1.0:
        print(f"merged bytes weigh {out['output_ratio']:.2f}× their inputs (learned from the table's REPLACE commits)")
    if out.get("output_calibration_failed"):
        print(f"calibrating the output model failed ({out['output_calibration_failed']}); replayed without it")
    if out.get("latency_learned") or out.get("latency_merges"):
        start = out.get("start_delay_seconds")
        if out.get("latency_borrowed"):
            source = (f"median of the service's last {out['latency_merges']} merges of other tables; the table has "
                      f"{out.get('latency_own_merges', 0)} merge(s) of its own, too few to learn it from")
        elif out.get("latency_learned"):
            source = f"median of the table's last {out['latency_merges']} merges"
        else:
            source = f"assumed: the table has {out['latency_merges']} merge(s), too few to learn it from"
        if out.get("latency_learned") and start is not None and not out.get("start_delay_learned"):
            source += (f"; each taken to run {out.get('assumed_run_seconds', 0):.2f} s before it lands, too few "
                       f"of them recorded their start")
        print(f"a merge lands {out['latency_seconds']:.2f} s after the write that prompted it"
              + ("" if start is None else f" and plans {start:.2f} s after it") + f" ({source})")
    pace = out.get("size_pace")
    if pace:
        print(f"a merge runs {100 * pace['seconds_per_mb']:.2f} s longer for each 100 MB it reads over "
              f"{pace['reference_mb']:.1f} MB, and as much shorter under"
              + (f" down to {pace['floor_seconds']:.2f} s" if pace["seconds_per_mb"] else "")
              + f" (fitted on {pace['merges']} merges' bytes and runs"
              + ("" if pace["seconds_per_mb"] else ": their sizes too close to show a slope") + ")")
    if out.get("timer_lag_seconds") is not None:
        n = out.get("timer_lag_merges", 0)
        print(f"a settled or cold partition is judged {out['timer_lag_seconds']:.2f} s after its moment"
              + (f" (median of the table's last {n} merges a timer prompted)" if out.get("timer_lag_learned")
                 else f" (the service's measured lag; the table has {n} merge(s) a timer prompted)"))
    if out.get("clock_phases"):
        print(f"the figures are the mean of {out['clock_phases']} replays, each with the listener's passes "
              f"{out['listener_pass_seconds']:g} s apart at another phase")
    print(f"{'':24}{'suggested':>12}{'current':>12}{'bin-pack':>12}")
    rows = (("mean live files", "mean_live_files", "{:.1f}"), ("files replaced", "files_replaced", "{:.0f}"),
            ("bytes rewritten", "bytes_rewritten", "{:.0f}"), ("write amplification", "write_amplification", "{:.2f}"),
            ("files at the end", "end_files", "{:.0f}"))
    for label, key, fmt in rows:
        print(f"{label:<24}" + "".join(f"{fmt.format(out[col][key]):>12}" for col in ("predicted", "defaults", "baseline")))
    print_check(out)
    if out.get("live_files_bias", 1.0) > 1.0:
        weighed = out.get("margin_checks", 1)
        which = "that margin" if weighed <= 1 else f"the largest margin its last {weighed} checks ask"
        print(f"so this suggestion keeps the file goal with {which}: judged on {out['live_files_bias']:.3f}× "
              f"the live files its replay predicts")
    print_passed_over(out)
    print("applied as the table's tuning" if out["applied"] else
          "recorded (apply with --apply, or let it apply itself: track --auto-tune)")
    return 0


def describe_tuning(t: dict[str, Any]) -> str:
    """A tuning (``PolicyTuning.as_dict()``) in words."""
    gaps = t.get("cold_gap_factor", 0)
    own = f" (or {gaps:g} × a partition's recent gaps between writes, at least 5 s)" if gaps else ""
    price = f"the priced rule at price {t['price']}, " if t.get("price") else ""
    return (f"{price}fan-in {t['fan_in']}, cold after {t['cold_after_seconds']:g} s{own}, leave alone below "
            f"{t['leave_alone_below']} bytes, quiet merge {'on' if t['quiet_merge'] else 'off'}"
            f"{', the cold finish absorbs its remainder' if t.get('cold_absorb') else ''} "
            f"(target {t['target']} bytes, settle {t['settle_seconds']:g} s)")


def print_passed_over(out: dict[str, Any]) -> None:
    """The better tuning the tuning in force was kept over (``out["passed_over"]``), and why."""
    over = out.get("passed_over")
    if not over:
        return
    why = (f"under the {over['switch_saving']:.0%} a change needs" if over["reason"] == "saving" else
           f"but fewer on only {over['phases_fewer']} of the clock's {over['phases']} phases")
    print(f"the tuning in force is kept over {describe_tuning(over['tuning'])}: it would rewrite "
          f"{over['saving']:.2%} fewer bytes ({over['predicted']['bytes_rewritten']:.0f}), {why}")


def print_check(out: dict[str, Any]) -> None:
    """The check of the previous prediction in a suggestion (``out["check"]``), and how it judged the tuning in force."""
    check = out.get("check")
    if check:
        p, r, e = check["predicted"], check["realised"], check["relative_error"]
        rel = {k: "-" if v is None else f"{v:+.0%}" for k, v in e.items()}
        print(f"since the last suggestion or tuning ({check['commits']} writer commits, tuning in force: fan-in "
              f"{check['tuning']['fan_in']}, cold after {check['tuning']['cold_after_seconds']:g} s): predicted "
              f"WA {p['write_amplification']:.2f} and {p['mean_live_files']:.1f} live files, realised "
              f"WA {_fmt(r['write_amplification'], '{:.2f}')} ({rel['write_amplification']}) and "
              f"{_fmt(r['mean_live_files'], '{:.1f}')} ({rel['mean_live_files']})")
        end = check.get("end")
        if end:
            def layout(x: dict) -> str:
                return f"{x['end_files']:.0f} files, {x['end_excess_mse_mib2']:.1f} MiB²"
            print(f"on the {end['partitions']} partition(s) finished since (no write for "
                  f"{end['finished_after_seconds']:.0f} s): predicted {layout(end['predicted'])}, realised "
                  f"{layout(end['realised'])}, bin-pack's replay {layout(end['baseline'])}")
    if out.get("end_in_force") is not None:
        verdict = "held" if out["end_in_force"] == 0 else f"missed by {out['end_in_force']:.0%}"
        earlier = _earlier_check(check, out.get("end_checked_since_ms"))
        print(f"the tuning in force's end layout is judged on what the table did ({verdict}{earlier}), not on its replay")
    if out.get("live_in_force") is not None:
        earlier = _earlier_check(check, out.get("live_checked_since_ms"))
        print(f"the tuning in force's live files are judged on what the table kept: {out['live_in_force']:.3f}× "
              f"its replay's{earlier}")


def _earlier_check(check: dict[str, Any] | None, since: int | None) -> str:
    """Which check a judgement of the tuning in force came from, when not this suggestion's own."""
    if since is None or (check and check.get("since_ms") == since):
        return ""
    at = dt.datetime.fromtimestamp(since / 1000, dt.UTC).isoformat(timespec="seconds")
    return f", as the check of the commits since {at} saw it"


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def cmd_scan(args: argparse.Namespace) -> int:
    import dataclasses

    from autooptimize.iceberg.catalog import load_table
    from autooptimize.iceberg.files import parse_partition
    from autooptimize.services.observe.scan import scan_table

    settings = current_settings()
    table = load_table(settings, args.table)
    key = parse_partition(table, args.partition).key if args.partition else None
    report = scan_table(settings, args.table, key, reason="requested")  # a table that is not tracked: exit 2

    print_result(dataclasses.asdict(report), args.json)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from autooptimize.demo import run_demo
    from autooptimize.services.tracking import size_arg

    size_arg("target_file_size", args.target_size)  # before the demo writes its table
    result = run_demo(current_settings(), files=args.files, partitions=args.partitions, target_size=args.target_size,
                      as_json=args.json, warehouse=args.warehouse)
    ok = (result["files_after"] * 4 <= result["files_before"] and result["rows_after"] == result["rows_before"]
          and result["checksum_after"] == result["checksum_before"])
    return 0 if ok else 1


def cmd_notify(args: argparse.Namespace) -> int:
    from autooptimize.api import notify

    print_result(notify(args.table, args.snapshot, settings=current_settings()), args.json)
    return 0
