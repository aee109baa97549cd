"""Settings of the control plane across the estate: tracking and observing tables, dispatch and fairness.

Part of :class:`autooptimize.config.Settings` (which inherits them); kept apart so that neither module
outgrows its size. Read only through ``Settings``; the same ``AO_*`` variables and validation rules.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from autooptimize.domain.fairness.tenants import TenantCaps, parse_tenant_caps, parse_tenant_weights
from autooptimize.domain.weights import parse_weights

DISPATCH_MODES = ("direct", "rpq")
BUDGET_MODES = ("enforce", "shadow")
FAIRNESS_MODES = ("dwrr", "wrr")
DEFAULT_PRIORITY_WEIGHTS = "high=6,normal=3,low=1"
# settings that take one of a few words
CHOICES = {"dispatch": DISPATCH_MODES, "budget_mode": BUDGET_MODES, "fairness": FAIRNESS_MODES}


class FleetSettings(BaseSettings):
    """Tracking, observing and dispatch settings, from ``AO_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="AO_", extra="ignore", frozen=True, allow_inf_nan=False)

    # tracking: fnmatch patterns of identifiers tracked automatically with default tuning
    auto_track: str = ""
    # how often the listener lists the catalog for new tables matching AO_AUTO_TRACK
    auto_track_seconds: float = Field(default=2.0, gt=0)
    # beat's safety sweep: a table the listener has not observed for this long gets a scan
    rescan_after_seconds: int = Field(default=86400, ge=60)

    # the listener finds changed tables by polling each tracked table, as it must for every catalog but
    # SQL, even on a SqlCatalog it could query (tests exercise the REST/Glue/Hive path this way)
    force_polling: bool = False

    # sharded listeners: tables are split into AO_LISTENER_SHARDS shards by a stable hash of their name; each
    # listener holds leases on a fair share of the shards, renewed well within AO_LISTENER_LEASE_SECONDS, and
    # a dead listener's shards are taken by the others within that time
    listener_shards: int = Field(default=16, ge=1, le=4096)
    listener_lease_seconds: float = Field(default=15.0, ge=2, le=3600)
    # the listener's pause between passes that found nothing (a pass that found a change is followed at once)
    listener_interval_seconds: float = Field(default=0.2, ge=0.05, le=60)

    # priority classes of actions, highest first
    priority_classes: Annotated[tuple[str, ...], NoDecode] = ("high", "normal", "low")

    # dispatch to the actors: "direct" sends each action to Celery at once; "rpq" keeps the backlog in the
    # reliable priority queue and a dispatcher feeds the actors only while they have free slots
    dispatch: str = "rpq"
    # leases in flight at once; unset: what the actor workers can run (AO_WORKER_CONCURRENCY per worker)
    dispatch_slots: int | None = Field(default=None, ge=1)
    dispatch_per_table: int = Field(default=2, ge=1)
    lease_seconds: int = Field(default=300, ge=10)
    priority_weights: str = DEFAULT_PRIORITY_WEIGHTS

    # the budget (services/budget.py): core-seconds automatic actions may spend per rolling hour (unset:
    # no budget); "shadow" records what it would admit or defer and holds nothing back
    budget_core_seconds_per_hour: float | None = Field(default=None, gt=0)
    budget_mode: str = "enforce"
    budget_tick_seconds: float = Field(default=30.0, gt=0)
    # the share of what the measured spend leaves that estimates in flight may hold (domain/budget.py)
    budget_pace: float = Field(default=0.5, gt=0, le=1)
    # with nothing in flight, a candidate is admitted when its estimate × (1 + margin) fits what is left
    budget_margin: float = Field(default=0.25, ge=0)
    # the cost model's prior (a table without finished actions): core-seconds per action, input file, GiB
    budget_prior_seconds_per_action: float = Field(default=1.0, ge=0)
    budget_prior_seconds_per_file: float = Field(default=0.02, ge=0)
    budget_prior_seconds_per_gib: float = Field(default=40.0, ge=0)
    # tenants and fairness (docs/tenants.md): inside a class, tenants share by weight, then their tables;
    # "dwrr" shares by cost (deficit weighted round robin), "wrr" by picks (smooth weighted round robin)
    fairness: str = "dwrr"
    # "a=1,b=2,c=5": tenants not named weigh 1 (a table's tenant: `track --tenant`, else its namespace)
    tenant_weights: str = ""
    # classes served first, fixed-priority: when a slot frees their head goes before any other class
    urgent_classes: Annotated[tuple[str, ...], NoDecode] = ()
    # leases in flight per tenant: "4" (every tenant), "a=2,b=3" or "4,a=2"; empty: no cap
    tenant_max_concurrent: str = ""
    # --- scale: the control plane across thousands of tables (issue 26) ---
    # the listener as before issue 26 (the scale benchmark's baseline): it decides and scans in its own
    # process and compares every table each pass; false: one decide task per table on the control queue
    decide_inline: bool = False
    # threads of the control-queue worker `autooptimize up` starts (decisions and scans)
    control_concurrency: int = Field(default=2, ge=1, le=64)
    # catalog calls per second the listener may make while polling a catalog without a table list
    catalog_calls_per_second: float = Field(default=20.0, gt=0, le=10000)
    # polling: a table that just committed is polled again after this long; a quiet one backs off
    # exponentially up to the maximum
    poll_min_seconds: float = Field(default=5.0, gt=0, le=86400)
    poll_max_seconds: float = Field(default=300.0, gt=0, le=86400)
    # statistics of partitions the table no longer has (or of tables gone from the catalog) are dropped
    # after this long
    retention_gone_partition_days: float = Field(default=7, gt=0)

    @field_validator("auto_track")
    @classmethod
    def _patterns(cls, value: str) -> str:
        for pattern in (p.strip() for p in value.split(",") if p.strip()):
            if not re.fullmatch(r"[A-Za-z0-9_\-*?\[\]]+(\.[A-Za-z0-9_\-*?\[\]]+)+", pattern):
                raise ValueError(f"pattern {pattern!r} is not namespace.table with * or ? wildcards, e.g. analytics.*")
        return value

    @field_validator("poll_max_seconds")
    @classmethod
    def _poll_max(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("poll_min_seconds")
        if low is not None and value < low:
            raise ValueError(f"must be ≥ AO_POLL_MIN_SECONDS ({low}), got {value}")
        return value

    @property
    def auto_track_patterns(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.auto_track.split(",") if p.strip())

    @field_validator("priority_classes", mode="before")
    @classmethod
    def _classes(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(p.strip() for p in value.split(",") if p.strip())
        names = tuple(value) if isinstance(value, list | tuple) else ()
        if not names or not all(isinstance(p, str) and re.fullmatch(r"[a-z][a-z0-9_]*", p) for p in names):
            raise ValueError("must be comma-separated lower-case names such as high,normal,low")
        repeated = sorted({p for p in names if names.count(p) > 1})
        if repeated:
            raise ValueError(f"must name each class once ({', '.join(repeated)} given more than once), "
                             "such as high,normal,low")
        return names

    @field_validator(*CHOICES)
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        choices = CHOICES[str(info.field_name)]
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    @field_validator("priority_weights")
    @classmethod
    def _weights(cls, value: str, info: ValidationInfo) -> str:
        classes = info.data.get("priority_classes", ())
        unknown = sorted(set(parse_weights(value)) - set(classes))
        # the default names high/normal/low; other classes then weigh 1 rather than fail
        if unknown and value != DEFAULT_PRIORITY_WEIGHTS:
            raise ValueError(f"names {', '.join(unknown)}, not among AO_PRIORITY_CLASSES ({', '.join(classes)})")
        return value

    @field_validator("tenant_weights")
    @classmethod
    def _tenant_weights(cls, value: str) -> str:
        parse_tenant_weights(value)
        return value

    @field_validator("urgent_classes", mode="before")
    @classmethod
    def _urgent(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            value = tuple(p.strip() for p in value.split(",") if p.strip())
        names = tuple(value) if isinstance(value, list | tuple) else None
        classes = info.data.get("priority_classes", ())
        if names is None or not all(isinstance(n, str) for n in names):
            raise ValueError("must be comma-separated priority classes, such as urgent")
        unknown = [n for n in names if n not in classes]
        if unknown:
            raise ValueError(f"names {', '.join(map(repr, unknown))}, not among AO_PRIORITY_CLASSES "
                             f"({', '.join(classes)}); add the class there first")
        return tuple(dict.fromkeys(names))

    @field_validator("tenant_max_concurrent")
    @classmethod
    def _tenant_caps(cls, value: str) -> str:
        parse_tenant_caps(value)
        return value

    @property
    def tenant_weight_map(self) -> dict[str, float]:
        """Weights of the tenants AO_TENANT_WEIGHTS names (every other tenant weighs 1)."""
        return parse_tenant_weights(self.tenant_weights)

    @property
    def tenant_caps(self) -> TenantCaps:
        """AO_TENANT_MAX_CONCURRENT: most leases in flight per tenant."""
        return parse_tenant_caps(self.tenant_max_concurrent)

    @property
    def class_weights(self) -> dict[str, float]:
        """Weight of every priority class (1 for a class AO_PRIORITY_WEIGHTS does not name)."""
        named = parse_weights(self.priority_weights)
        return {name: named.get(name, 1.0) for name in self.priority_classes}
