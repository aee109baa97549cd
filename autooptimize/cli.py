"""The ``autooptimize`` command line. Exit codes: 0 done, 1 the action did not succeed, 2 bad input
(unknown table, malformed partition, invalid option or configuration), 3 a service is unreachable,
4 timed out waiting."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from autooptimize.errors import (
    ActionNotFound,
    AutoOptimizeError,
    ConfigError,
    InvalidArgument,
    ServiceUnavailable,
    TableNotFound,
)

OPTIMIZE_FIELDS = ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out", "bytes_in",
                   "bytes_out", "snapshot_id")


def _print(obj: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, default=str))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            print(f"{key:>18}: {value}")
    else:
        print(obj)


def _settings():  # type: ignore[no-untyped-def]
    from autooptimize.config import get_settings

    return get_settings()


def cmd_db(args: argparse.Namespace) -> int:
    from autooptimize.config import redact_url
    from autooptimize.storage.db import upgrade

    settings = _settings()
    upgrade(settings, args.revision)
    print(f"database {redact_url(settings.database_url)} is at revision {args.revision}")
    return 0


def cmd_track(args: argparse.Namespace) -> int:
    from autooptimize.api import track

    tuning = {
        "target_file_size": args.target_size, "tolerance": args.tolerance, "min_input_files": args.min_input_files,
        "priority_class": args.priority, "weight": args.weight, "sort_order": args.sort_order,
        "allowed_actions": args.allowed_actions, "max_bytes_per_action": args.max_bytes_per_action,
        "min_interval_seconds": args.min_interval,
    }
    result = track(args.table, settings=_settings(), **{k: v for k, v in tuning.items() if v is not None})
    _print(result, args.json)
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from autooptimize.api import optimize

    options: dict[str, str] = {}
    for item in args.option or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--option {item!r} must look like name=value")
        options[key.strip().replace("-", "_")] = value.strip()
    handle = optimize(args.table, partition=args.partition, action=args.action, priority=args.priority,
                      dry_run=args.dry_run, target_file_size=args.target_size, options=options,
                      settings=_settings())
    if args.wait or args.dry_run:
        try:
            result = handle.wait(timeout=args.timeout)
        except TimeoutError as exc:
            print(f"autooptimize: {exc}", file=sys.stderr)
            return 4
    else:
        result = handle.result
    shown = {k: result.get(k) for k in OPTIMIZE_FIELDS}
    if args.dry_run:
        shown["plan"] = result.get("plan")
    if result.get("error"):
        shown["error"] = result["error"]
    _print(shown, args.json)
    return 0 if result["state"] in ("succeeded", "skipped", "queued", "running") else 1


def cmd_status(args: argparse.Namespace) -> int:
    from autooptimize.api import status

    if args.queues:
        from autooptimize.api import queues

        backlog = queues(settings=_settings())
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

    result = status(args.table, settings=_settings())
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    if args.table:
        print(f"{result['table']}: {result['files']} files in {len(result['partitions'])} partitions "
              f"(snapshot {result['snapshot_id']})")
        print(f"{'partition':40} {'n':>6} {'small':>6} {'bytes':>12} {'rmse':>12}  last action")
        for p in result["partitions"]:
            last = p["last_action"]
            last_s = f"{last['kind']} {last['state']} {last['at']}" if last else "-"
            print(f"{p['partition'] or '(unpartitioned)':40} {p['n']:>6} {p['small_files']:>6} {p['bytes']:>12} "
                  f"{p['rmse_bytes']:>12}  {last_s}")
    else:
        for line in result:
            print(json.dumps(line, default=str) if "error" in line else
                  f"{line['table']:40} files={line['files']:<6} partitions={line['partitions']:<4} "
                  f"needs_attention={line['needs_attention']:<4} worst={line['worst_partition']}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from autooptimize.services.runtime import worker_argv
    from tasks.app import app

    app.worker_main(worker_argv(_settings(), queues=args.queues, concurrency=args.concurrency,
                                loglevel=args.loglevel, name=args.name))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from autooptimize.services.runtime import run_service

    return run_service(_settings(), workers=args.workers, flower=not args.no_flower, beat=not args.no_beat)


def cmd_explain(args: argparse.Namespace) -> int:
    from autooptimize.services.explain import explain

    result = explain(_settings(), args.table, args.partition, args.target_size)
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    print(f"{result['table']} at snapshot {result['snapshot_id']} (target {result['target_file_size']} bytes)")
    for p in result["partitions"]:
        print(f"  {p['partition'] or '(unpartitioned)':40} {p['action']:6} {p['reason']:18} "
              f"files {p['files_replaced']} → {p['files_out']}, {p['bytes_rewritten']} bytes, "
              f"rmse {int(p['mse_before'] ** 0.5)} → {int(p['mse_after'] ** 0.5)}")
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    from autooptimize.services.explain import whatif

    targets = [t.strip() for t in args.target_size.split(",") if t.strip()]
    tolerances = [t.strip() for t in args.tolerance.split(",") if t.strip()] if args.tolerance else None
    rows = whatif(_settings(), args.table, targets, tolerances)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'target':>12} {'tolerance':>12} {'files':>14} {'replaced':>9} {'bytes rewritten':>16} {'rmse after':>12}")
    for r in rows:
        print(f"{r['target_file_size']:>12} {r['tolerance']:>12} {r['files_before']:>6} → {r['files_after']:<5} "
              f"{r['files_replaced']:>9} {r['bytes_rewritten']:>16} {int(r['mse_after'] ** 0.5):>12}")
    return 0


def cmd_listener(args: argparse.Namespace) -> int:
    from autooptimize.services.decide import on_attention_handler
    from scheduler.listener import main as listener_main

    argv = ["--interval", str(args.interval), "--workers", str(args.workers)] + (["--once"] if args.once else [])
    return listener_main(argv, on_attention=on_attention_handler(_settings()))


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from scheduler.dispatcher import main as dispatcher_main

    return int(dispatcher_main(["--rebuild-only"] if args.rebuild_only else []) or 0)


def cmd_scan(args: argparse.Namespace) -> int:
    from autooptimize.iceberg.catalog import load_table
    from autooptimize.iceberg.files import key_from_values, parse_partition
    from autooptimize.services.observe.scan import scan_table
    from autooptimize.services.tracking import ensure_tracked

    settings = _settings()
    key = None
    if args.partition:
        key = key_from_values(parse_partition(load_table(settings, args.table), args.partition))
    ensure_tracked(settings, args.table)
    report = scan_table(settings, args.table, key, reason="requested")
    import dataclasses

    _print(dataclasses.asdict(report), args.json)
    return 0


def cmd_beat(args: argparse.Namespace) -> int:
    from scheduler.beat import app

    settings = _settings()
    app.start(["beat", "-s", str(settings.home_dir / "celerybeat-schedule"), "--loglevel", args.loglevel])
    return 0


def cmd_flower(args: argparse.Namespace) -> int:
    import os

    from autooptimize.services.runtime import flower_credentials
    from tasks.app import app

    settings = _settings()
    user, password, path = flower_credentials(settings)
    os.environ["FLOWER_BASIC_AUTH"] = f"{user}:{password}"  # not on the command line, never logged
    where = f"password in {path}" if path else "password from AO_FLOWER_PASSWORD"
    print(f"Flower on {settings.flower_address}:{settings.flower_port} (user {user!r}, {where})", flush=True)
    app.start(["flower", f"--address={settings.flower_address}", f"--port={settings.flower_port}"])
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from autooptimize.demo import run_demo

    result = run_demo(_settings(), files=args.files, partitions=args.partitions, target_size=args.target_size,
                      as_json=args.json)
    ok = (result["files_after"] * 4 <= result["files_before"] and result["rows_after"] == result["rows_before"]
          and result["checksum_after"] == result["checksum_before"])
    return 0 if ok else 1


def cmd_spark(args: argparse.Namespace) -> int:
    from spark_actors import server

    settings = _settings()
    if args.spark_command == "serve":
        server.serve_foreground(settings)
        return 0
    if args.spark_command == "start":
        info = server.ensure_local_server(settings)
        print(f"Spark Connect server on 127.0.0.1:{info.port} (pid {info.pid}); token in {settings.home_dir}/spark")
    elif args.spark_command == "stop":
        print("stopped" if server.stop_local_server(settings) else "no server was running")
    else:
        running = server.running_server(settings)
        print(f"running on 127.0.0.1:{running.port} (pid {running.pid})" if running else "not running")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autooptimize", description=__doc__.split(".")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="create the database if missing and apply migrations")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=cmd_db)

    tr = sub.add_parser("track", help="track a table, or change its tuning")
    tr.add_argument("table")
    tr.add_argument("--target-size", help="target file size, e.g. 128MiB")
    tr.add_argument("--tolerance", help="tolerated RMS file-size error, e.g. 32MiB")
    tr.add_argument("--min-input-files", type=int)
    tr.add_argument("--priority", help="priority class, e.g. high|normal|low")
    tr.add_argument("--weight", type=int)
    tr.add_argument("--sort-order", help="comma-separated columns")
    tr.add_argument("--allowed-actions", help="comma-separated actions, e.g. merge")
    tr.add_argument("--max-bytes-per-action")
    tr.add_argument("--min-interval", type=int, help="seconds between actions on one partition")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=cmd_track)

    op = sub.add_parser("optimize", help="submit an ad-hoc optimization")
    op.add_argument("table")
    op.add_argument("--partition", help="col=value[,col2=value2]; default: every partition")
    op.add_argument("--action", default="merge", help="merge (default) or another action kind")
    op.add_argument("--option", action="append", metavar="NAME=VALUE",
                    help="an option of the action kind (repeatable), e.g. --option min-age=3d")
    op.add_argument("--priority")
    op.add_argument("--target-size", help="override the table's target file size for this action")
    op.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
    op.add_argument("--wait", action="store_true", help="wait for the outcome")
    op.add_argument("--timeout", type=float, default=3600.0)
    op.add_argument("--json", action="store_true")
    op.set_defaults(func=cmd_optimize)

    st = sub.add_parser("status", help="partitions ranked by file-size entropy")
    st.add_argument("table", nargs="?")
    st.add_argument("--queues", action="store_true", help="the dispatch backlog per class and table")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    wk = sub.add_parser("worker", help="run a Celery worker (actors and control)")
    wk.add_argument("--queues", help="comma-separated queues; default: control and every actor queue")
    wk.add_argument("--concurrency", type=int)
    wk.add_argument("--loglevel", default="INFO")
    wk.add_argument("--name", default=None)
    wk.set_defaults(func=cmd_worker)

    upp = sub.add_parser("up", help="run the whole service on this machine until Ctrl-C or SIGTERM")
    upp.add_argument("--workers", type=int, default=1)
    upp.add_argument("--no-flower", action="store_true")
    upp.add_argument("--no-beat", action="store_true")
    upp.set_defaults(func=cmd_up)

    ex = sub.add_parser("explain", help="what optimize would do to each partition, and why; changes nothing")
    ex.add_argument("table")
    ex.add_argument("--partition")
    ex.add_argument("--target-size")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=cmd_explain)

    wi = sub.add_parser("whatif", help="simulate target sizes and tolerances on the table's current files")
    wi.add_argument("table")
    wi.add_argument("--target-size", required=True, help="comma-separated sizes, e.g. 64MiB,128MiB,256MiB")
    wi.add_argument("--tolerance", help="comma-separated tolerances (default: a quarter of each target)")
    wi.add_argument("--json", action="store_true")
    wi.set_defaults(func=cmd_whatif)

    ls = sub.add_parser("listener", help="watch tracked tables' snapshots and keep partition entropy current")
    ls.add_argument("--interval", type=float, default=1.0)
    ls.add_argument("--workers", type=int, default=4)
    ls.add_argument("--once", action="store_true")
    ls.set_defaults(func=cmd_listener)

    dp = sub.add_parser("dispatcher", help="fair dispatch from the reliable priority queue (AO_DISPATCH=rpq)")
    dp.add_argument("--rebuild-only", action="store_true", help="re-enqueue pending actions from PostgreSQL, exit")
    dp.set_defaults(func=cmd_dispatcher)

    sc = sub.add_parser("scan", help="recompute a table's (or a partition's) entropy exactly")
    sc.add_argument("table")
    sc.add_argument("--partition")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_scan)

    bt = sub.add_parser("beat", help="run the periodic scheduler (Celery beat)")
    bt.add_argument("--loglevel", default="INFO")
    bt.set_defaults(func=cmd_beat)

    fl = sub.add_parser("flower", help="run Flower with basic auth (AO_FLOWER_USER / AO_FLOWER_PASSWORD)")
    fl.set_defaults(func=cmd_flower)

    dm = sub.add_parser("demo", help="create a table of small files and watch the service merge them")
    dm.add_argument("--files", type=int, default=240)
    dm.add_argument("--partitions", type=int, default=4)
    dm.add_argument("--target-size", default="1MiB")
    dm.add_argument("--json", action="store_true")
    dm.set_defaults(func=cmd_demo)

    sp = sub.add_parser("spark", help="the local Spark Connect server (AO_SPARK_REMOTE=local)")
    sp.add_argument("spark_command", choices=["start", "stop", "status", "serve"],
                    help="serve: run a server in the foreground with AO_SPARK_TOKEN (containers)")
    sp.set_defaults(func=cmd_spark)

    from autooptimize.cli_buffer import add_commands as add_buffer_commands

    add_buffer_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (InvalidArgument, TableNotFound, ConfigError, ActionNotFound) as exc:
        print(f"autooptimize: error: {exc}", file=sys.stderr)
        return 2
    except ServiceUnavailable as exc:
        print(f"autooptimize: error: {exc}", file=sys.stderr)
        return 3
    except AutoOptimizeError as exc:
        print(f"autooptimize: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # connection failures surfacing from libraries: name the service, no traceback
        from sqlalchemy.exc import OperationalError

        if isinstance(exc, OperationalError):
            from autooptimize.config import redact_url

            url = redact_url(_settings().database_url)
            print(f"autooptimize: error: cannot reach PostgreSQL at {url}: {str(exc.orig).strip()}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    sys.exit(main())
