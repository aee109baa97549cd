"""``autooptimize console`` (the web console and /metrics) and ``autooptimize history`` (past actions
with their cost)."""

from __future__ import annotations

import argparse
import json

from autooptimize.cli.common import current_settings
from autooptimize.domain.histogram import format_bytes
from autooptimize.storage.readmodel import HistoryFilter

HISTORY_FIELDS = ("id", "table", "partition", "kind", "trigger", "state", "reason", "files_in", "files_out",
                  "bytes_in", "bytes_out", "rows_in", "rows_out", "seconds", "phases", "commit_conflicts",
                  "attempts", "snapshot_id", "created_at", "finished_at", "error")


def cmd_console(args: argparse.Namespace) -> int:
    from autooptimize.console.server import serve

    serve(current_settings(), log_level=args.log_level)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from autooptimize.services.overview import action_list

    where = HistoryFilter(table=args.table, kind=args.kind, state=args.state, trigger=args.trigger,
                          limit=args.limit)
    page = action_list(current_settings(), where)
    rows = [{k: a.get(k) for k in HISTORY_FIELDS} for a in page["actions"]]
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    if not rows:
        print("no actions yet" + (f" on {args.table}" if args.table else ""))
        return 0
    print(f"{'created':19} {'table':24} {'partition':22} {'kind':16} {'state':10} {'files':>11} "
          f"{'bytes in → out':>22} {'seconds':>8}  reason")
    for r in rows:
        files = f"{_n(r['files_in'])}→{_n(r['files_out'])}"
        moved = (f"{format_bytes(r['bytes_in'])} → {format_bytes(r['bytes_out'])}"
                 if r["bytes_in"] is not None and r["bytes_out"] is not None else "-")
        seconds = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
        print(f"{(r['created_at'] or '')[:19]:19} {r['table'] or '-':24} {r['partition'] or '(table)':22} "
              f"{r['kind']:16} {r['state']:10} {files:>11} {moved:>22} {seconds:>8}  {r['reason'] or ''}")
        if args.phases and r["phases"]:  # the action's profile (autooptimize/domain/profile.py)
            print("    phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))
    shown = len(rows)
    if page["total"] > shown:
        print(f"({shown} of {page['total']}; --limit shows more)")
    return 0


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)
