"""Chaos soak: continuous small-file ingest with the whole service running, under a schedule of faults.

    python -m benchmarks.soak [--minutes 20] [--faults all|local|KIND,...] [--fault-every 35] [--seed 7]
                              [--redis-url redis://localhost:6379/12] [--keep] [--json]

What runs. A PostgreSQL database and an AO_HOME (warehouse, buffer zone, logs, Spark server) of the soak's
own, a Redis db of its own (``--redis-url``, flushed before and after), and ``autooptimize up --no-flower
--no-console`` beside the writers, as benchmarks/streaming.py does: workers, listener, dispatcher, beat
(hygiene sweep every minute, buffer tick every 5 s) and the local Spark Connect server. Three tracked tables
(see benchmarks/soak_ingest.py) take small files for ``--minutes``: two through pyiceberg appends, one
through buffered landing (``land()``, consolidated by the service); merges, consolidations, manifest
rewrites, snapshot expiry and orphan removal (both allowed on these tables) run the whole time. Short
settings keep the run meaningful: target file size 1 MiB, 20 manifests, snapshots kept 2 minutes (table
properties), orphan sweep every 2 minutes, AO_LEASE_SECONDS=60, AO_SWEEP_AFTER_SECONDS=120.

Faults (benchmarks/soak_faults.py), every ``--fault-every`` seconds (±30%), each selected kind in turn:
kill -9 of workers and of the listener, kill -9 and restart of the Spark server, FLUSHDB of the soak's Redis
db, termination of every connection to its database, and real restarts of Redis and PostgreSQL. ``local``
selects the first five, which touch nothing outside the soak; ``all`` (the default) adds the two restarts,
which disturb everyone else on those servers. 20 minutes at the default pace inject about 34 faults.

At the end the writers and faults stop, the service drains (nothing queued or running, buffer empty;
``--drain-timeout``), and the checks run (benchmarks/soak_checks.py): content equal to everything ingested
per table (rows and the one digest), every file referenced by a snapshot present, sentinel files beside
the warehouse untouched and nothing written outside the tables, no action queued or running without
progress for ``--quiet-seconds``, the buffer drained, the service running throughout and stopping within
30 s of SIGTERM with nothing left behind. It prints the faults (time, kind, what), the actions by kind and
state, and each check; the exit code is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from benchmarks.soak_checks import (
    Check,
    Sentinels,
    action_summary,
    active_actions,
    buffer_open,
    check_buffer,
    check_content,
    check_referenced_files,
    check_stuck,
    failure_reasons,
    finished_count,
)
from benchmarks.soak_faults import (
    DEFAULT_POSTGRES_RESTART,
    DEFAULT_REDIS_RESTART,
    FAULT_KINDS,
    LOCAL_KINDS,
    FaultInjector,
)
from benchmarks.soak_ingest import SCHEMA, TABLE_PROPERTIES, TABLES, Ids, Writer
from benchmarks.soak_service import REPO, STOP_BOUND_SECONDS, Service

ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
CATALOG = "autooptimize"  # the built-in SQL catalog (needs no configuration), in the soak's own database
#: the destructive hygiene is opt-in per table; the soak wants all of it running under the faults
ALLOWED = ["merge", "rewrite_manifests", "expire_snapshots", "remove_orphans"]
#: AO_RETENTION_*_DAYS of the soak's service, in minutes
RETENTION_MINUTES = {"AUDIT": 6, "ACTION": 6, "BUFFER": 6, "HISTORY_FULL": 2, "HISTORY": 6}
#: A floor of ingested batches per table and minute of ingest: a soak that ingested less did not test much
MIN_BATCHES_PER_MINUTE = 25
#: Documented bound on the database's growth per 1,000 commits once retention runs (docs/reliability.md)
MAX_GROWTH_MB_PER_1000_COMMITS = 8.0


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(home: Path, database_url: str, redis_url: str, spark_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AO_", "PYICEBERG_", "SPARK_REMOTE"))}
    env.update({
        "AO_HOME": str(home), "AO_DATABASE_URL": database_url, "AO_REDIS_URL": redis_url, "AO_CATALOG": CATALOG,
        "AO_SPARK_REMOTE": "local", "AO_SPARK_PORT": str(spark_port), "AO_SPARK_DRIVER_MEMORY": "1g",
        "AO_DEFAULT_TARGET_FILE_SIZE": "1MiB", "AO_HYGIENE_SWEEP_SECONDS": "60", "AO_MANIFEST_THRESHOLD": "20",
        "AO_ORPHAN_SWEEP_INTERVAL_SECONDS": "120", "AO_ORPHAN_MIN_AGE_SECONDS": "3600",
        "AO_BUFFER_TICK_SECONDS": "5", "AO_LEASE_SECONDS": "60", "AO_SWEEP_AFTER_SECONDS": "120",
        # retention in minutes rather than days, so that it runs (every minute) within the soak
        **{f"AO_RETENTION_{k}_DAYS": str(round(v / 1440, 6)) for k, v in RETENTION_MINUTES.items()},
        "AO_RETENTION_SWEEP_SECONDS": "60",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def parse_faults(value: str) -> list[str]:
    if value in ("all", "local"):
        return list(FAULT_KINDS if value == "all" else LOCAL_KINDS)
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    bad = [k for k in kinds if k not in FAULT_KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {bad or value!r}; valid: all, local, "
                                         f"or a comma-separated list of {', '.join(FAULT_KINDS)}")
    return kinds


def drain(engine: Any, service: Service, quiet: float, timeout: float) -> tuple[bool, float, dict[str, Any]]:
    """Wait until nothing is queued or running and the buffer is empty (twice, 2 s apart); give up after
    ``timeout``, or once nothing at all progressed (no action finished, started or changed) for ``quiet``
    seconds. Returns (drained, seconds, the active actions as they were ``quiet`` seconds before the end)."""
    started = last_progress = last_said = time.monotonic()
    history: list[tuple[float, dict[str, Any]]] = []
    calm, progress_mark = 0, None
    while True:
        now = time.monotonic()
        with contextlib.suppress(Exception):  # PostgreSQL may be coming back from the last fault
            active = active_actions(engine)
            files, batches = buffer_open(engine)
            mark = (finished_count(engine), files, batches,
                    sorted((a, r[2], r[3], r[9]) for a, r in active.items() if not history or a in history[-1][1]))
            if mark != progress_mark:
                progress_mark, last_progress = mark, now
            history.append((now, active))
            calm = calm + 1 if not active and not files and not batches else 0
            if now - last_said >= 30:
                say(f"drain: {len(active)} action(s) queued or running, {files} file(s) buffered, "
                    f"{batches} batch(es) open")
                last_said = now
        if calm >= 2 or now - started >= timeout or now - last_progress >= quiet or not service.running():
            break
        time.sleep(2.0)
    end = time.monotonic()
    earlier = next((a for t, a in reversed(history) if end - t >= quiet), history[0][1] if history else {})
    return calm >= 2, end - started, earlier


def soak(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="ao-soak-"))
    db_name = f"ao_soak_{uuid.uuid4().hex[:8]}"
    database_url = args.postgres_url.rsplit("/", 1)[0] + f"/{db_name}"
    env = service_env(home, database_url, args.redis_url, args.spark_port or _free_port())
    # this process lands files and asks for consolidations through the same settings as the service
    os.environ.update({k: v for k, v in env.items() if k.startswith("AO_")})
    from autooptimize import api
    from autooptimize.config import get_settings
    from autooptimize.iceberg.catalog import get_catalog
    from autooptimize.services.retention import apply_retention
    from autooptimize.storage.db import upgrade
    from spark_actors.server import ensure_local_server

    admin = create_engine(args.postgres_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db_name}"')
    engine = create_engine(database_url, pool_pre_ping=True)
    service: Service | None = None
    result: dict[str, Any] = {"minutes": args.minutes, "faults_selected": args.faults, "home": str(home),
                              "database": db_name, "redis": args.redis_url}
    say(f"database {db_name}, AO_HOME {home}, Redis {args.redis_url}, faults {','.join(args.faults)}")
    try:
        _flush_redis(args.redis_url)
        settings = get_settings()
        upgrade(settings)
        catalog = get_catalog(settings)
        catalog.create_namespace("soak")
        locations = {}
        for t in TABLES:
            table = catalog.create_table(t.identifier, schema=SCHEMA, partition_spec=t.spec, properties=TABLE_PROPERTIES)
            locations[t.identifier] = Path(table.location().removeprefix("file://"))
            api.track(t.identifier, settings=settings, target_file_size="1MiB", allowed_actions=ALLOWED)
            if t.buffered:
                api.buffer_rules(t.identifier, settings=settings, max_age="20s", max_files=500)
                (settings.buffer_dir / t.identifier).mkdir(parents=True, exist_ok=True)
        result["database_bytes_start"] = _database_bytes(admin, db_name)
        say(f"database size at start: {result['database_bytes_start'] / 1e6:.1f} MB")
        sentinels = Sentinels(home, settings.warehouse_dir, settings.buffer_dir, locations)
        service = Service(env, home)
        service.start()
        say("service: `autooptimize up --no-flower --no-console` starting")
        deadline = time.monotonic() + 600
        while not service.up() and service.running() and time.monotonic() < deadline:
            time.sleep(1.0)
        if not service.up():
            raise RuntimeError(f"the service did not come up: {service.log_path.read_text()[-2000:]}")
        say(f"service up: {service.roles()}; ingest for {args.minutes:g} min")
        result.update(_run_chaos(args, settings, engine, admin, db_name, service, api, ensure_local_server, catalog))
        say("ingest and faults stopped; draining")
        drained, seconds, earlier = drain(engine, service, args.quiet_seconds, args.drain_timeout)
        result["drain"] = {"drained": drained, "seconds": round(seconds, 1)}
        checks: list[Check] = [
            Check("drained", drained, f"nothing queued or running and the buffer empty {seconds:.0f} s after the "
                  f"ingest stopped" if drained else f"not drained within {seconds:.0f} s"),
            check_stuck(engine, earlier, args.quiet_seconds), check_buffer(engine)]
        result["actions"] = {k: dict(v) for k, v in action_summary(engine).items()}
        result["failures"] = failure_reasons(engine)
        ran = result.pop("_service_ran")
        checks.append(Check("service ran throughout", ran is None, ran or "`up` was running at every check"))
        took, left = service.stop()  # before reading the tables: no expiry deletes files under the checks
        service = None
        stopped = f"stopped in {took:.1f} s" if took is not None else "did not stop within 60 s of SIGTERM"
        checks.append(Check("service stops within 30 s, nothing left",
                            took is not None and took <= STOP_BOUND_SECONDS and not left,
                            stopped + (f"; still running afterwards: {left[:4]}" if left else "; nothing left")))
        writers = result.pop("_writers")
        for w in writers:
            checks.append(reconnecting(lambda w=w: check_content(catalog.load_table(w.stats.table), w.stats), catalog))
            checks.append(reconnecting(lambda w=w: check_referenced_files(catalog.load_table(w.stats.table),
                                                                          w.stats.table), catalog))
        floor = int(MIN_BATCHES_PER_MINUTE * args.minutes) if args.min_batches is None else args.min_batches
        thin = [f"{w.stats.table}: {w.stats.batches}" for w in writers if w.stats.batches < floor]
        checks.append(Check("every table ingested", not thin, f"fewer than {floor} batches: {', '.join(thin)}" if thin
                            else f"every table took at least {floor} batches "
                                 f"({', '.join(str(w.stats.batches) for w in writers)})"))
        injected = [f for f in result["faults"] if f.injected]
        missing = [k for k in args.faults if not any(f.kind == k for f in injected)]
        checks.append(Check("faults injected", len(injected) >= args.min_faults and not missing,
                            f"{len(injected)} injected (at least {args.min_faults} wanted)"
                            + (f"; never injected: {', '.join(missing)}" if missing else "; every selected kind")))
        reconnecting(lambda: apply_retention(settings), catalog)  # what beat runs every minute, once more
        result["database_bytes_end"] = reconnecting(lambda: _database_bytes(admin, db_name), catalog)
        result["rows_end"] = reconnecting(lambda: _row_counts(engine), catalog)
        commits = sum(w.stats.batches for w in writers) + sum(
            n for kind, states in result["actions"].items() for state, n in states.items() if state == "succeeded")
        growth = (result["database_bytes_end"] - result["database_bytes_start"]) / 1e6 / max(commits, 1) * 1000
        result["commits"], result["growth_mb_per_1000_commits"] = commits, round(growth, 2)
        checks.append(Check("database growth bounded", growth <= MAX_GROWTH_MB_PER_1000_COMMITS,
                            f"{result['database_bytes_start'] / 1e6:.1f} MB at start, "
                            f"{result['database_bytes_end'] / 1e6:.1f} MB at end over {commits} commits: "
                            f"{growth:.2f} MB per 1,000 commits (bound {MAX_GROWTH_MB_PER_1000_COMMITS})"))
        bad_ingest = [f"{w.stats.table}: {w.stats.unresolved} unresolved, {len(w.stats.rejected)} rejected "
                      f"{w.stats.rejected[:2]}" for w in writers if w.stats.unresolved or w.stats.rejected]
        checks.append(Check("every batch accounted for", not bad_ingest, "; ".join(bad_ingest) or
                            "every batch the writers made is known to be in (or was never counted)"))
        checks += sentinels.check()
        result["checks"] = checks
        result["log_findings"] = Service(env, home).log_findings()
        return result
    finally:
        if service is not None:
            service.stop()
        engine.dispose()
        with contextlib.suppress(Exception):
            get_catalog(get_settings()).engine.dispose()  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            _flush_redis(args.redis_url)
        if args.keep:
            say(f"kept AO_HOME {home} and database {db_name}")
        else:
            with contextlib.suppress(Exception), admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
            shutil.rmtree(home, ignore_errors=True)
        admin.dispose()


def _run_chaos(args: argparse.Namespace, settings: Any, engine: Any, admin: Any, db_name: str, service: Service,
               api: Any, ensure_local_server: Any, catalog: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    stop = threading.Event()
    ids = Ids()
    staging = settings.home_dir / "staging"
    staging.mkdir()
    # one catalog, made before any writer starts (each making its own raced to create the catalog's tables)
    writers = [Writer(t, lambda: catalog, lambda ident, files: api.land(ident, files, settings=settings), staging, ids,
                      args.seed + i, 0.5 if t.buffered else 1.2, (20, 120) if t.buffered else (50, 400), t0, stop)
               for i, t in enumerate(TABLES)]

    def restart_spark() -> int | None:
        with contextlib.suppress(Exception):
            return ensure_local_server(settings).pid
        return None

    commands = {"redis-restart": args.redis_restart_cmd, "postgres": args.postgres_restart_cmd}
    injector = FaultInjector(args.faults, args.fault_every, args.seed, t0, service, engine, admin, db_name,
                             args.redis_url, restart_spark, commands, stop)
    for w in writers:
        w.start()
    injector.start()
    ran: str | None = None
    end = t0 + args.minutes * 60
    next_say = t0 + 30
    while time.monotonic() < end:
        time.sleep(1.0)
        if not service.running() and ran is None:
            ran = f"`up` exited after {time.monotonic() - t0:.0f} s: {service.log_path.read_text()[-600:]}"
            say(ran)
        if time.monotonic() >= next_say:
            next_say += 30
            with contextlib.suppress(Exception):
                states = action_summary(engine)
                say(f"+{time.monotonic() - t0:.0f} s: batches {[w.stats.batches for w in writers]}, "
                    f"faults {len(injector.faults)}, actions {_compact(states)}")
    stop.set()
    for w in writers:
        w.join(timeout=180)
    injector.join(timeout=180)
    return {"faults": injector.faults, "fault_notes": injector.notes, "_writers": writers, "_service_ran": ran,
            "ingest": {w.stats.table: {"batches": w.stats.batches, "rows": w.stats.rows,
                                       "files_landed": w.stats.files_landed, "retried": dict(w.stats.retried),
                                       "error_samples": w.stats.samples,
                                       "ambiguous_resolved": w.stats.ambiguous_resolved}
                       for w in writers},
            "ingest_seconds": round(time.monotonic() - t0, 1)}


def reconnecting(check: Any, catalog: Any, tries: int = 6) -> Any:
    """``check()``, tried again after a lost connection (the last fault may have restarted PostgreSQL):
    the catalog's pooled connections are dropped and the call repeated a few seconds later."""
    from autooptimize.failures import is_transient

    for attempt in range(1, tries + 1):
        try:
            return check()
        except Exception as exc:
            if attempt == tries or not is_transient(exc):
                raise
            say(f"check: {type(exc).__name__}; reconnecting (attempt {attempt})")
            with contextlib.suppress(Exception):
                catalog.engine.dispose()
            time.sleep(5.0)
    return None


def _database_bytes(admin: Any, db_name: str) -> int:
    with admin.connect() as conn:
        return int(conn.exec_driver_sql("SELECT pg_database_size(%s)", (db_name,)).scalar_one())


def _row_counts(engine: Any) -> dict[str, int]:
    with engine.connect() as conn:
        names = [r[0] for r in conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND starts_with(tablename, 'ao_') ORDER BY 1"))]
        return {n: int(conn.execute(text(f'SELECT count(*) FROM "{n}"')).scalar_one()) for n in names}


def _compact(summary: dict[str, Any]) -> str:
    return ", ".join(f"{kind} " + "/".join(f"{s}:{n}" for s, n in sorted(states.items()))
                     for kind, states in sorted(summary.items()))


def _flush_redis(url: str) -> None:
    import redis

    with redis.Redis.from_url(url) as client:
        client.flushdb()


def report(result: dict[str, Any]) -> str:
    lines = [f"soak: {result['ingest_seconds'] / 60:.1f} min of ingest with faults "
             f"{','.join(result['faults_selected'])}; drain {result['drain']['seconds']} s "
             f"({'drained' if result['drain']['drained'] else 'NOT drained'})", "",
             f"faults injected ({sum(f.injected for f in result['faults'])} of {len(result['faults'])} attempted):"]
    for f in result["faults"]:
        lines.append(f"  +{int(f.at // 60)}:{int(f.at % 60):02d}  {f.kind:<21}{'' if f.injected else '(missed) '}{f.detail}")
    lines += [f"  {note}" for note in result["fault_notes"]]
    lines += ["", "ingest:"]
    for table, s in result["ingest"].items():
        retried = ", ".join(f"{k} {n}" for k, n in s["retried"].items()) or "none"
        landed = f", {s['files_landed']} files landed" if s["files_landed"] else ""
        lines.append(f"  {table:<14} {s['batches']} batches, {s['rows']} rows{landed}; retried: {retried}; "
                     f"ambiguous commits resolved: {s['ambiguous_resolved']}")
        lines += [f"                 first {name} {where}" for name, where in s["error_samples"].items()]
    lines += ["", "actions (kind: state count):"]
    for kind, states in sorted(result["actions"].items()):
        lines.append(f"  {kind:<22} " + ", ".join(f"{s} {n}" for s, n in sorted(states.items())))
    if result["failures"]:
        lines += ["", "failed, aborted or refused actions:"] + [f"  {f}" for f in result["failures"]]
    if result["log_findings"]:
        lines += ["", "service logs:"] + [f"  {f}" for f in result["log_findings"]]
    lines += ["", f"database: {result['database_bytes_start'] / 1e6:.1f} MB at start, "
                  f"{result['database_bytes_end'] / 1e6:.1f} MB at end; {result['commits']} commits, "
                  f"{result['growth_mb_per_1000_commits']} MB per 1,000 commits after retention",
              "rows at end: " + ", ".join(f"{t} {n}" for t, n in result["rows_end"].items())]
    lines += ["", "checks:"]
    for c in result["checks"]:
        lines.append(f"  {'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
    ok = all(c.ok for c in result["checks"])
    lines += ["", f"result: {'PASS' if ok else 'FAIL'} ({sum(not c.ok for c in result['checks'])} check(s) failed)"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes of ingest under faults (default 20)")
    parser.add_argument("--faults", type=parse_faults, default=list(FAULT_KINDS),
                        help=f"all (default), local (nothing outside the soak), or a list of {', '.join(FAULT_KINDS)}")
    parser.add_argument("--fault-every", type=float, default=35.0, help="seconds between faults, ±30%% (default 35)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--redis-url", default="redis://localhost:6379/12", help="a Redis db of the soak's own")
    parser.add_argument("--postgres-url", default=ADMIN_URL,
                        help="the PostgreSQL server's admin database; the soak creates its own database there "
                             "(give a server of the soak's own to restart it without disturbing anyone)")
    parser.add_argument("--spark-port", type=int, default=0, help="the local Spark server's port (default: a free one)")
    parser.add_argument("--quiet-seconds", type=float, default=180.0,
                        help="an action queued or running without progress this long at the end, while its table "
                             "did nothing else, is stuck; the drain also ends after this long without any progress")
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="most seconds to wait for the drain")
    parser.add_argument("--redis-restart-cmd", default=DEFAULT_REDIS_RESTART, help="shell command of redis-restart")
    parser.add_argument("--postgres-restart-cmd", default=DEFAULT_POSTGRES_RESTART, help="shell command of postgres")
    parser.add_argument("--min-batches", type=int, default=None,
                        help=f"fail when a table ingested fewer batches (default {MIN_BATCHES_PER_MINUTE} per minute)")
    parser.add_argument("--min-faults", type=int, default=30,
                        help="fail when fewer faults were injected, or any selected kind never was (default 30)")
    parser.add_argument("--keep", action="store_true",
                        help="keep AO_HOME (logs, warehouse) and the database afterwards, for a post-mortem")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of the figures")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.fault_every <= 0:
        parser.error("--minutes and --fault-every must be > 0")

    def terminated(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the clean-up: the service stops, the database goes

    signal.signal(signal.SIGTERM, terminated)
    if args.minutes * 60 / args.fault_every < max(args.min_faults, len(args.faults)):
        parser.error(f"{args.minutes:g} min at one fault every {args.fault_every:g} s cannot inject "
                     f"{args.min_faults} faults; shorten --fault-every or lower --min-faults")
    result = soak(args)
    print(report(result))
    if args.json:
        print(json.dumps(result, default=lambda o: o.__dict__ if hasattr(o, "__dict__") else str(o), sort_keys=True))
    return 0 if all(c.ok for c in result["checks"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
