"""The ``autooptimize`` argument parser: every subcommand and its options."""

from __future__ import annotations

import argparse
from typing import NoReturn

from autooptimize import __version__
from autooptimize.cli import actions, buffer, console, up
from autooptimize.cli.arguments import count, kinds, log_level, node_name, option, seconds
from autooptimize.domain.priced import DEFAULT_PRICE

DESCRIPTION = "The ``autooptimize`` command line"


class Parser(argparse.ArgumentParser):
    """An argument parser that keeps why it refused the arguments (``--json`` prints it as the result)."""

    last_error: str | None = None

    def error(self, message: str) -> NoReturn:
        Parser.last_error = f"{self.prog}: {message}"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets ``func``, the command that takes the parsed arguments."""
    parser = Parser(prog="autooptimize", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"autooptimize {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="create the database if missing and apply migrations")
    upgrade.add_argument("revision", nargs="?", default="head", help="head (default) or a migration id")
    upgrade.set_defaults(func=up.cmd_db)

    tr = sub.add_parser("track", help="track a table, or change its tuning")
    tr.add_argument("table")
    tr.add_argument("--target-size", help="target file size, e.g. 128MiB")
    tr.add_argument("--tolerance", help="tolerated RMS file-size error, e.g. 32MiB")
    tr.add_argument("--min-input-files", type=count(2))
    tr.add_argument("--priority", help="priority class, e.g. high|normal|low")
    tr.add_argument("--weight", type=count(1))
    tr.add_argument("--tenant", help="tenant it is shared under in the fair dispatch (default: the first level "
                    "of its namespace; '' resets to that)")
    tr.add_argument("--sort-order", help="comma-separated columns")
    tr.add_argument("--zorder-columns", help="2 to 4 comma-separated columns that zorder clusters on")
    tr.add_argument("--allowed-actions", type=kinds, help="the allowed actions, comma-separated (replaces them)")
    tr.add_argument("--allow", type=kinds, metavar="KINDS",
                    help="also allow these actions, e.g. expire_snapshots,remove_orphans (off by default)")
    tr.add_argument("--disallow", type=kinds, metavar="KINDS", help="no longer allow these actions")
    tr.add_argument("--max-bytes-per-action")
    tr.add_argument("--min-interval", type=count(0), help="seconds between actions on one partition")
    tr.add_argument("--merge-fan-in", type=count(2, 1000),
                    help="files of a similar size merged together while a partition is written to")
    tr.add_argument("--cold-after", type=seconds, help="seconds without a write before a partition is finished")
    tr.add_argument("--cold-gap-factor", metavar="K",
                    help="a partition is finished sooner, after K times its recent gaps between writes (0: off)")
    tr.add_argument("--merge-price", metavar="K", help="above 0: while written to, a partition that fills "
                    "target files merges by the priced rule at price K (lower merges more; the service's "
                    f"default is AO_MERGE_PRICE, {DEFAULT_PRICE}); 0: the tiers")
    tr.add_argument("--leave-alone-below", metavar="SIZE", help="never merge partitions smaller than this")
    tr.add_argument("--quiet-merge", action=argparse.BooleanOptionalAction, default=None,
                    help="merge a partition's small files once it is quiet, before it goes cold")
    tr.add_argument("--cold-absorb", action=argparse.BooleanOptionalAction, default=None,
                    help="when a cold partition's finish would leave one small file, also rewrite a nearly full "
                         "file it fits beside (default: AO_COLD_ABSORB, off)")
    tr.add_argument("--auto-tune", action=argparse.BooleanOptionalAction, default=None,
                    help="let AutoAnalyze apply the tuning it suggests from the table's history")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=actions.cmd_track)

    op = sub.add_parser("optimize", help="submit an ad-hoc optimization")
    op.add_argument("table")
    op.add_argument("--partition", help="col=value[,col2=value2]; default: every partition")
    op.add_argument("--action", default="merge", help="merge (default) or another action kind")
    op.add_argument("--option", action="append", type=option, metavar="NAME=VALUE",
                    help="an option of the action kind (repeatable), e.g. --option min-age=3d")
    op.add_argument("--priority")
    op.add_argument("--target-size", help="override the table's target file size for this action")
    op.add_argument("--dry-run", action="store_true", help="plan only; change and record nothing (not even tracking)")
    op.add_argument("--wait", action="store_true", help="wait for the outcome")
    op.add_argument("--timeout", type=seconds, default=3600.0, help="seconds --wait waits (default 3600)")
    op.add_argument("--json", action="store_true")
    op.set_defaults(func=actions.cmd_optimize)

    st = sub.add_parser("status", help="partitions ranked by file-size entropy")
    st.add_argument("table", nargs="?")
    st.add_argument("--queues", action="store_true", help="the dispatch backlog per class and table")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=actions.cmd_status)

    wk = sub.add_parser("worker", help="run a Celery worker (actors and control)")
    wk.add_argument("--queues", help="comma-separated queues; default: control and every actor queue")
    wk.add_argument("--concurrency", type=count(1, 1024))
    wk.add_argument("--loglevel", type=log_level, default="INFO")
    wk.add_argument("--name", type=node_name, default=None)
    wk.set_defaults(func=up.cmd_worker)

    upp = sub.add_parser("up", help="run the whole service on this machine until Ctrl-C or SIGTERM")
    upp.add_argument("--workers", type=count(1, 256), default=1)
    upp.add_argument("--no-flower", action="store_true")
    upp.add_argument("--no-beat", action="store_true")
    upp.add_argument("--no-console", action="store_true", help="do not start the web console and /metrics")
    upp.set_defaults(func=up.cmd_up)

    ex = sub.add_parser("explain", help="what optimize would do to each partition, and why; changes nothing")
    ex.add_argument("table")
    ex.add_argument("--partition")
    ex.add_argument("--target-size")
    ex.add_argument("--no-calibrate", action="store_true",
                    help="before the table's first rewrite, plan on raw bytes instead of calibrating output "
                         "sizes from a sample written on an executor, as the action will")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=actions.cmd_explain)

    wi = sub.add_parser("whatif", help="simulate target sizes and tolerances on the table's current files, or "
                                       "(--suggest) replay its history to suggest its merge tuning")
    wi.add_argument("table")
    wi.add_argument("--target-size", help="comma-separated sizes, e.g. 64MiB,128MiB,256MiB")
    wi.add_argument("--suggest", action="store_true",
                    help="replay the table's own commits through the policy simulator over candidate tunings "
                         "and print the one with the fewest bytes rewritten that keeps the file goal")
    wi.add_argument("--apply", action="store_true", help="with --suggest: make it the table's tuning")
    wi.add_argument("--cold-after", metavar="SECONDS", help="with --suggest: the cold-after times to try, "
                                                         "comma-separated (default 30,60,120,300)")
    wi.add_argument("--tolerance", help="comma-separated tolerances (default: a quarter of each target)")
    wi.add_argument("--no-calibrate", action="store_true",
                    help="with --suggest: for a table with no fitted output model of its own and none recorded, "
                         "replay with the other tables' instead of rewriting a few groups of its files with the "
                         "merge engine (removed afterwards) to measure what merged files weigh")
    wi.add_argument("--json", action="store_true")
    wi.set_defaults(func=actions.cmd_whatif)

    ls = sub.add_parser("listener", help="watch tracked tables' snapshots and keep partition entropy current")
    ls.add_argument("--interval", type=seconds, default=None,
                    help="seconds between passes that found no change (default AO_LISTENER_INTERVAL_SECONDS)")
    ls.add_argument("--workers", type=count(1, 256), default=4)
    ls.add_argument("--once", action="store_true")
    ls.set_defaults(func=up.cmd_listener)

    dp = sub.add_parser("dispatcher", help="fair dispatch from the reliable priority queue (AO_DISPATCH=rpq)")
    dp.add_argument("--rebuild-only", action="store_true", help="re-enqueue pending actions from PostgreSQL, exit")
    dp.set_defaults(func=up.cmd_dispatcher)

    sc = sub.add_parser("scan", help="recompute a tracked table's (or a partition's) entropy exactly")
    sc.add_argument("table")
    sc.add_argument("--partition")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=actions.cmd_scan)

    nt = sub.add_parser("notify", help="a tracked table has a new snapshot: wake the listener holding it at once")
    nt.add_argument("table")
    nt.add_argument("snapshot", nargs="?", help="the new snapshot's id, when known")
    nt.add_argument("--json", action="store_true")
    nt.set_defaults(func=actions.cmd_notify)

    bt = sub.add_parser("beat", help="run the periodic scheduler (Celery beat)")
    bt.add_argument("--loglevel", type=log_level, default="INFO")
    bt.set_defaults(func=up.cmd_beat)

    fl = sub.add_parser("flower", help="run Flower with basic auth (AO_FLOWER_USER / AO_FLOWER_PASSWORD)")
    fl.set_defaults(func=up.cmd_flower)

    dm = sub.add_parser("demo", help="create a table of small files and watch the service merge them")
    dm.add_argument("--files", type=count(1, 100_000), default=240)
    dm.add_argument("--partitions", type=count(1, 1000), default=4)
    dm.add_argument("--target-size", default="1MiB")
    dm.add_argument("--json", action="store_true")
    dm.add_argument("--warehouse", help="put the demo table under this URI (e.g. s3://lake/wh; the store's "
                                        "endpoint and keys are the catalog's s3.* properties)")
    dm.set_defaults(func=actions.cmd_demo)

    sp = sub.add_parser("spark", help="the local Spark Connect server (AO_SPARK_REMOTE=local)")
    sp.add_argument("spark_command", choices=["start", "stop", "status", "serve", "master", "worker"],
                    help="serve: run a Connect server in the foreground with AO_SPARK_TOKEN, its jobs on "
                         "AO_SPARK_MASTER; master, worker: a Spark standalone master or worker in the "
                         "foreground (containers; docs/engines.md)")
    sp.set_defaults(func=up.cmd_spark)

    co = sub.add_parser("console", help="the web console and /metrics (AO_CONSOLE_ADDRESS:AO_CONSOLE_PORT, "
                                        "basic auth)")
    co.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    co.set_defaults(func=console.cmd_console)

    hi = sub.add_parser("history", help="past actions with their cost, newest first")
    hi.add_argument("table", nargs="?")
    hi.add_argument("--kind")
    hi.add_argument("--state")
    hi.add_argument("--trigger")
    hi.add_argument("--limit", type=int, default=50)
    hi.add_argument("--json", action="store_true")
    hi.add_argument("--phases", action="store_true", help="each action's seconds per phase (plan, groups, commit, …)")
    hi.set_defaults(func=console.cmd_history)

    buffer.add_commands(sub)
    return parser
