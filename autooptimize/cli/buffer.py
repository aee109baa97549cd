"""``autooptimize land`` and ``autooptimize buffer status|flush|rules|watch``: the buffered-writes commands.

Exit codes as the main CLI: 0 done, 1 the consolidation did not succeed, 2 bad input (including any
rejected file), 3 a service is unreachable, 4 timed out waiting."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from autooptimize.cli.arguments import seconds
from autooptimize.cli.common import current_settings
from autooptimize.errors import InvalidArgument
from tasks.send import CeleryDispatch

# The services are imported inside each command: parsing the command line stays quick.


def cmd_land(args: argparse.Namespace) -> int:
    from autooptimize.services.buffer.landing import land

    settings = current_settings()
    result = land(settings, args.table, list(args.files), move=args.move, dispatch=CeleryDispatch(settings))
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(f"{args.table}: landed {len(result['landed'])} file(s), rejected {len(result['rejected'])}"
              + (f"; rule {result['fires']} fires, consolidation queued" if result["fires"] else ""))
    for item in result["rejected"]:
        print(f"autooptimize: rejected {item['file']}: {item['reason']}", file=sys.stderr)
    return 2 if result["rejected"] else 0


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def cmd_buffer_status(args: argparse.Namespace) -> int:
    from autooptimize.services.buffer.rules import buffer_status

    rows = buffer_status(current_settings(), args.table)
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    if not rows:
        print("no table has buffered writes")
        return 0
    print(f"{'table':36} {'files':>7} {'bytes':>12} {'oldest':>8} {'batches':>7} {'quarant.':>8}  next rule")
    for r in rows:
        nxt = f"{r['fires_now']} (fires now)" if r["fires_now"] else (
            f"{r['next_rule']} (max age in {_age(r['seconds_to_max_age'])})" if r["next_rule"] else "-")
        print(f"{r['table']:36} {r['buffered_files']:>7} {r['buffered_bytes']:>12} {_age(r['oldest_age_seconds']):>8} "
              f"{r['batches_in_flight']:>7} {r['quarantined']:>8}  {nxt}")
    return 0


def cmd_flush(args: argparse.Namespace) -> int:
    from autooptimize.iceberg.catalog import load_table, parse_identifier
    from autooptimize.services.buffer.consolidate import consolidate_table

    settings = current_settings()
    parse_identifier(args.table)
    load_table(settings, args.table)
    dispatch = CeleryDispatch(settings)
    if not args.wait:
        sent = dispatch.consolidation(args.table, flush=True)
        print(f"{args.table}: flush {'queued' if sent else 'not queued'}")
        return 0
    started = time.monotonic()
    result = consolidate_table(settings, args.table, flush=True, wait=args.timeout, dispatch=dispatch)
    if result["busy"]:
        print(f"autooptimize: {args.table} is still being consolidated by another worker after {args.timeout:.0f}s",
              file=sys.stderr)
        return 4
    summary: dict[str, Any] = {
        "table": args.table, "batches": len(result["batches"]),
        "files": sum(b["files"] for b in result["batches"]),
        "rows": sum(b["rows_out"] or 0 for b in result["batches"]),
        "snapshots": [b["snapshot_id"] for b in result["batches"] if b["snapshot_id"]],
        "seconds": round(time.monotonic() - started, 2),
    }
    print(json.dumps(summary) if args.json else
          f"{args.table}: {summary['batches']} batch(es), {summary['files']} file(s), {summary['rows']} rows "
          f"committed in {summary['seconds']}s")
    return 0 if all(b["state"] in ("done", "committed", "empty") for b in result["batches"]) else 1


def cmd_rules(args: argparse.Namespace) -> int:
    from autooptimize.services.buffer.rules import set_rules

    result = set_rules(current_settings(), args.table, max_age=args.max_age, min_bytes=args.min_bytes,
                       max_bytes=args.max_bytes, max_files=args.max_files, combinable=args.combinable,
                       callback_url=args.callback, reset=args.reset)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from autooptimize.services.buffer.watch import poll_watch

    settings = current_settings()
    root = Path(args.root) if args.root else settings.buffer_watch_root
    if root is None or not root.is_dir():
        raise InvalidArgument(f"watch root {root} is not a directory; pass --root DIR or set AO_BUFFER_WATCH_ROOT")
    while True:
        result = poll_watch(settings, root, dispatch=CeleryDispatch(settings))
        if result["landed"] or result["rejected"] or result["errors"] or args.once:
            print(json.dumps(result), flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


def add_commands(sub: Any) -> None:
    """Register ``land`` and ``buffer`` on the main parser's subcommands."""
    ld = sub.add_parser("land", help="land small Parquet files in a table's buffer zone")
    ld.add_argument("table")
    ld.add_argument("files", nargs="+", metavar="FILE")
    ld.add_argument("--move", action="store_true", help="move the files instead of copying them")
    ld.add_argument("--json", action="store_true")
    ld.set_defaults(func=cmd_land)

    bf = sub.add_parser("buffer", help="buffered writes: status, flush, rules, watched folder")
    bsub = bf.add_subparsers(dest="buffer_command", required=True)
    st = bsub.add_parser("status", help="per table: buffered files, bytes, oldest age, which rule fires next")
    st.add_argument("table", nargs="?")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_buffer_status)

    fl = bsub.add_parser("flush", help="consolidate what is buffered now, whatever the rules say")
    fl.add_argument("table")
    fl.add_argument("--wait", action="store_true",
                    help="consolidate in this process and wait for the commit (needs Spark Connect)")
    fl.add_argument("--timeout", type=seconds, default=600.0, help="seconds to wait for a running consolidation")
    fl.add_argument("--json", action="store_true")
    fl.set_defaults(func=cmd_flush)

    ru = bsub.add_parser("rules", help="show or set a table's consolidation rules")
    ru.add_argument("table")
    ru.add_argument("--max-age", help="e.g. 900, 15m, 2h (default AO_BUFFER_MAX_AGE_SECONDS)")
    ru.add_argument("--min-bytes", help="the file-count rule waits for this much data, e.g. 8MiB")
    ru.add_argument("--max-bytes", help="consolidate at this much data; also a batch's most, e.g. 1GiB")
    ru.add_argument("--max-files", help="consolidate at this many files; also a batch's most")
    ru.add_argument("--combinable", dest="combinable", action="store_true", default=None,
                    help="one batch may span partitions (default)")
    ru.add_argument("--not-combinable", dest="combinable", action="store_false",
                    help="one batch per partition")
    ru.add_argument("--callback", help="http(s) URL to POST each committed batch to ('' removes it)")
    ru.add_argument("--reset", action="store_true", help="back to the defaults before applying the options")
    ru.add_argument("--json", action="store_true")
    ru.set_defaults(func=cmd_rules)

    wa = bsub.add_parser("watch", help="land settled files dropped in <root>/<namespace.table>/")
    wa.add_argument("--root", help="default AO_BUFFER_WATCH_ROOT")
    wa.add_argument("--interval", type=seconds, default=2.0)
    wa.add_argument("--once", action="store_true")
    wa.set_defaults(func=cmd_watch)
