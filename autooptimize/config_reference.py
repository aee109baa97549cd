"""The configuration reference, docs/configuration.md, generated from :class:`~autooptimize.config.Settings`.

Name, type and default come from the model; the description of each setting from :data:`DESCRIPTIONS`.
``tests/unit/test_config_reference.py`` fails when a setting has no description, a description names no
setting, or the document differs from what this module generates:

    python -m autooptimize.config_reference > docs/configuration.md
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import SecretStr

from autooptimize.config import Settings

HEADER = """# Configuration

Every setting is an environment variable `AO_<NAME>`, read and validated when a process starts: a bad
value stops it with exit code 2 and a message naming the variable and what would be valid. Sizes take
units (`64MiB`, `1.5GiB`); durations are seconds unless the name says days; secrets are never shown.
Catalogs are configured the pyiceberg way (`.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__…`), not here.

Generated from `autooptimize/config.py` by `python -m autooptimize.config_reference > docs/configuration.md`;
a test fails when this page and the code differ.

| variable | type | default | what it does |
|---|---|---|---|
"""

DESCRIPTIONS: dict[str, str] = {
    "database_url": "PostgreSQL holding the service's state (tracked tables, statistics, actions, audit log); "
                    "created if missing. Also the built-in catalog's database",
    "redis_url": "Redis: the Celery broker and the reliable priority queue",
    "spark_remote": "`local` starts (or reuses) a Spark Connect server from the installed pyspark on 127.0.0.1 "
                    "with a random token; otherwise an `sc://host:port/;token=…` URL of a server elsewhere",
    "catalog": "the pyiceberg catalog to optimize; `autooptimize` is the built-in SQL catalog on "
               "AO_DATABASE_URL with its warehouse under AO_HOME, any other name must be configured for pyiceberg",
    "home": "warehouse of the built-in catalog, logs, pid files, generated credentials, the local Spark server's state",
    "spark_driver_memory": "memory of the local Spark Connect server's driver",
    "spark_cores": "cores of the local Spark Connect server (`local[N]`)",
    "spark_port": "port of the local Spark Connect server (a free one is taken when it is busy)",
    "spark_master": "the master the service's own Connect server runs its jobs on: empty for `local[N]` in the "
                    "server's JVM, or a cluster (`spark://host:7077`, `yarn`, `k8s://…`); see docs/engines.md",
    "spark_server_conf": "extra Spark confs of that server, a JSON object (e.g. `{\"spark.executor.memory\": \"4g\"}`); "
                         "they override its own, such as `spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL` (`system`)",
    "spark_token": "token of a Spark Connect server this service does not start; never empty",
    "auto_track": "comma-separated fnmatch patterns of tables tracked automatically with default tuning "
                  "(e.g. `analytics.*`)",
    "auto_track_seconds": "how often the listener lists the catalog for new tables matching AO_AUTO_TRACK",
    "rescan_after_seconds": "beat's safety sweep: a table the listener has not observed for this long gets a scan",
    "worker_concurrency": "processes per worker; each has its own Spark Connect session",
    "priority_classes": "priority classes, highest first; one actor queue each",
    "default_target_file_size": "target file size of newly tracked tables",
    "default_tolerance": "tolerated RMS file-size error of newly tracked tables; unset: a quarter of the target",
    "flower_user": "Flower's basic-auth user",
    "flower_password": "Flower's password; unset: generated once into AO_HOME (mode 0600)",
    "flower_port": "Flower's port",
    "flower_address": "the address Flower listens on",
    "action_timeout_seconds": "an attempt running longer is stopped, cleaned up and retried",
    "action_lease_seconds": "term of an attempt's lease in PostgreSQL, renewed every quarter of it; a holder "
                            "that stops renewing is taken over once it runs out",
    "max_attempts": "attempts of one action before it fails with its last error",
    "sweep_after_seconds": "an action queued or running with no live lease and no progress for this long is "
                           "re-queued (or failed past AO_MAX_ATTEMPTS)",
    "max_group_bytes": "most input bytes one rewrite group reads; larger planned groups are cut",
    "rewrite_concurrency": "group jobs an action keeps in flight",
    "rewrite_engine": "where rewrites run: `spark` (one Spark job per action, the work on the executors), "
                      "`spark_sql` (Spark's own Parquet IO, file:// only) or `local` (pyarrow in the worker process, "
                      "a single machine); see docs/engines.md",
    "actor_warm_up": "an actor worker process opens its Spark session, ships the code and runs one small job on "
                     "the executors as it starts, so its first action does not pay for them (off: the first "
                     "action does); not with the `local` engine",
    "merge_policy": "how automatic merges choose files: `tiered` (live partitions bounded without rewriting "
                    "merged bytes again) or `binpack` (every file that needs it, each time)",
    "settle_seconds": "a partition with no write for this long is quiet: the policy judges it again then (with "
                      "AO_QUIET_MERGE its small files merge), before it goes cold",
    "merge_fan_in": "files of a similar size the tiered policy merges together in a live partition",
    "cold_after_seconds": "a partition with no writes for this long is cold: finished to its best layout once",
    "cold_gap_factor": "a partition goes cold sooner, once no write came for this many times the longest of its "
                       "last 3 gaps between writes (at least 5 s, at most AO_COLD_AFTER_SECONDS; 0: off): an "
                       "hour only late data reaches is finished soon after its late writes stop",
    "merge_price": "above 0, a partition that fills target files merges by the priced rule while written to: "
                   "a merge only where the files it saves are worth the bytes it reads, at this price (lower "
                   "merges more); 0: the tiers (below the target's bytes a partition always follows the tiers). "
                   "A per-table knob (`track --merge-price`) that AutoAnalyze searches",
    "late_horizon_finish": "finish a time partition (hour, day, month, year) at once when a newer one starts, "
                           "once it is further behind the newest than any write has reached back (the "
                           "table's late horizon), instead of after its cold-after time",
    "quiet_merge": "merge a partition's small files once it is quiet (no write for AO_SETTLE_SECONDS), before "
                   "it goes cold; off by default (a per-table knob, `track --quiet-merge`)",
    "cold_absorb": "when a cold partition's finish would leave one file under ¾ of the target, it also "
                   "rewrites the smallest nearly full file the remainder fits beside (within 5/4 of a target): "
                   "the end layout of Iceberg's bin-pack or better, at that file's bytes each time the "
                   "partition goes cold with a remainder; off by default (a per-table knob, `track "
                   "--cold-absorb`, that AutoAnalyze tries where a table's history ends short of the bin-pack's "
                   "end layout)",
    "autotune_seconds": "how often beat re-evaluates each table's suggested tuning (AutoAnalyze)",
    "autotune_pass_seconds": "how long one AutoAnalyze pass may start new suggestions (each replays the "
                             "table's history about 200 times); the tables left go first in the next pass",
    "autotune_min_new_commits": "writer commits since its last suggestion before a table is re-evaluated",
    "dispatch": "`rpq`: actions wait in the reliable priority queue and the dispatcher feeds the actors only "
                "while they have free slots; `direct`: straight to Celery",
    "dispatch_slots": "actions in flight at once under `rpq`; unset: the workers' concurrency",
    "dispatch_per_table": "actions of one table in flight at once (never two on one partition, whatever their kinds; "
                          "2 lets a merge of the hour being written run beside a late hour's)",
    "lease_seconds": "visibility lease of a dispatched item in the priority queue",
    "priority_weights": "weights of the priority classes in the fair dispatch",
    "budget_core_seconds_per_hour": "core-seconds automatic actions may spend per rolling hour; candidates go "
                                    "in order of value per estimated core-second and the rest wait (ad-hoc "
                                    "actions are never held back, and count). Unset: no budget",
    "budget_mode": "`enforce` holds back what the budget defers; `shadow` records the same verdicts and holds "
                   "nothing back",
    "budget_pace": "the share (0–1] of what the hour's measured spend leaves that admitted actions still "
                   "running may hold at their estimates; the rest is admitted at later ticks, once measured "
                   "(1: admit all that fits at once, on estimates)",
    "budget_margin": "with no admitted action in flight, the next candidate is admitted when its estimate "
                     "times (1 + margin) fits what is left of the hour: room for the estimate to be low",
    "budget_tick_seconds": "how often beat ranks the candidates waiting for the budget (the admission window)",
    "budget_prior_seconds_per_action": "cost model prior, core-seconds per action (until a table has history)",
    "budget_prior_seconds_per_file": "cost model prior, core-seconds per input file",
    "budget_prior_seconds_per_gib": "cost model prior, core-seconds per GiB read",
    "fairness": "how classes, tenants and tables share the dispatch: `dwrr` (deficit weighted round robin, by "
                "cost) or `wrr` (smooth weighted round robin, by picks)",
    "tenant_weights": "weights of tenants inside a class, e.g. `a=1,b=2,c=5`; tenants not named weigh 1 (a "
                      "table's tenant: `track --tenant`, else the first level of its namespace)",
    "urgent_classes": "priority classes served fixed-priority before all others when a slot frees, e.g. "
                      "`urgent` (must be among AO_PRIORITY_CLASSES); running actions are never stopped",
    "tenant_max_concurrent": "actions in flight per tenant: `4` (every tenant), `a=2,b=3` (those tenants) or "
                             "`4,a=2`; empty: no cap",
    "hygiene_sweep_seconds": "how often beat decides table hygiene per table",
    "manifest_threshold": "rewrite manifests when a snapshot has more data manifests than this",
    "snapshot_max_age_seconds": "expire snapshots older than this (a table's `history.expire.*` wins)",
    "snapshot_retain_last": "snapshots of each branch always kept",
    "orphan_min_age_seconds": "orphan removal never deletes a younger file (at least an hour)",
    "orphan_sweep_interval_seconds": "how often beat runs orphan removal per table; 0: only when asked",
    "retention_audit_days": "audit records kept this long",
    "retention_action_days": "finished actions (and their leases) kept this long",
    "retention_buffer_days": "finished buffer batches and their file rows kept this long",
    "retention_history_full_days": "entropy history kept at full resolution this long, then thinned to one "
                                   "row per partition and hour",
    "retention_history_days": "entropy history kept this long",
    "retention_sweep_seconds": "how often beat applies the retention settings",
    "buffer_root": "where landed files wait for consolidation; unset: `$AO_HOME/buffer`",
    "buffer_watch_root": "a watched folder `<root>/<namespace.table>/*.parquet` whose settled files are landed; "
                         "unset: off",
    "buffer_max_age_seconds": "default rule: consolidate files that waited this long",
    "buffer_min_bytes": "default rule: consolidate no fewer bytes than this (unless too old)",
    "buffer_max_bytes": "default rule: consolidate once this many bytes wait",
    "buffer_max_files": "default rule: consolidate once this many files wait",
    "buffer_tick_seconds": "how often beat evaluates the buffer rules and the watched folder",
    "buffer_settle_seconds": "a watched file unmodified for this long is landed",
    "force_polling": "the listener polls every table, even on a SQL catalog it could query",
    "listener_shards": "tables are split into this many shards (a stable hash of the table's name); each listener "
                       "observes the tables of the shards it holds leases on, a fair share of them",
    "listener_lease_seconds": "a listener that dies has its shards taken by the others within this time (its "
                              "leases are renewed every tenth of it, at most every second)",
    "listener_interval_seconds": "the listener's pause between passes that found no change (a pass that found one "
                                 "is followed at once); `autooptimize listener --interval` overrides it",
    "decide_inline": "the listener as before issue 26 (the scale benchmark's baseline): it decides and scans in "
                     "its own process and compares every table on every pass; off, decisions and whole scans are "
                     "control-queue tasks and every table is compared every 10 s, in between only those written",
    "control_concurrency": "threads of the control-queue worker that `autooptimize up` starts: the listener's "
                           "decide and scan tasks and beat's periodic decisions",
    "catalog_calls_per_second": "at most this many table loads per second when the listener polls a catalog "
                                "without a table list (REST, Glue, Hive, AO_FORCE_POLLING)",
    "poll_min_seconds": "polling: a table that just changed is polled again after this long",
    "poll_max_seconds": "polling: a table without changes backs off, doubling its interval up to this long",
    "retention_gone_partition_days": "statistics of emptied partitions, and of tables gone from the catalog, "
                                     "kept this long",
    "console_user": "the console's basic-auth user",
    "console_password": "the console's password; unset: generated once into AO_HOME (mode 0600)",
    "console_address": "the address the console and /metrics listen on",
    "console_port": "the console's port",
}

_SIZES = ("default_target_file_size", "default_tolerance", "max_group_bytes",
          "buffer_min_bytes", "buffer_max_bytes")


def _type(name: str, annotation: Any) -> str:
    if name in _SIZES:
        return "size"
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in typing.get_args(annotation))
    if annotation is SecretStr or SecretStr in args:
        return "secret"
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    base = args[0] if union and args else annotation
    if typing.get_origin(base) is tuple or name == "priority_classes":
        return "comma-separated names"
    if typing.get_origin(base) is dict:
        return "JSON object"
    return {str: "text", int: "integer", float: "number", bool: "boolean"}.get(base, "path")


def _default(name: str, value: Any) -> str:
    if value is None:
        return "–"
    if name in _SIZES and isinstance(value, int) and value and value % 1024**2 == 0:
        return f"`{value // 1024**3}GiB`" if value % 1024**3 == 0 else f"`{value // 1024**2}MiB`"
    if isinstance(value, tuple):
        return "`" + ",".join(value) + "`" if value else "–"
    if value == {}:
        return "`{}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if str(value) != "" else "–"


def reference() -> str:
    """The whole document."""
    rows = []
    for name, info in Settings.model_fields.items():
        described = re.sub(r"\s+", " ", DESCRIPTIONS.get(name, "")).replace("|", "\\|")
        default = info.get_default(call_default_factory=True)
        rows.append(f"| `AO_{name.upper()}` | {_type(name, info.annotation)} | {_default(name, default)} "
                    f"| {described} |")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
