"""One Settings object. No other module reads ``os.environ`` for our settings.

Every field is read from an ``AO_*`` environment variable (``AO_DATABASE_URL`` …). Secrets are
``SecretStr`` so they never print in logs or reprs.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from autooptimize.errors import ConfigError

MiB = 1024 * 1024
DISPATCH_MODES = ("direct", "rpq")
DEFAULT_PRIORITY_WEIGHTS = "high=6,normal=3,low=1"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": MiB, "MB": MiB, "MIB": MiB,
          "G": 1024 * MiB, "GB": 1024 * MiB, "GIB": 1024 * MiB, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}


def parse_size(value: str | int, name: str = "size") -> int:
    """Parse ``134217728``, ``128MiB``, ``64MB`` or ``1.5GiB`` into bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE_RE.match(str(value))
    if not match or match.group(2) is not None and match.group(2).upper() not in _UNITS:
        raise ConfigError(f"{name}={value!r} is not a size; use bytes or a unit like 64MiB, 512KiB, 1GiB")
    number, unit = match.group(1), (match.group(2) or "").upper()
    return int(float(number) * _UNITS[unit])


class Settings(BaseSettings):
    """Service configuration, from ``AO_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="AO_", extra="ignore", frozen=True)

    database_url: str = "postgresql+psycopg2://postgres@localhost:5432/autooptimize"
    redis_url: str = "redis://localhost:6379/0"
    spark_remote: str = "local"
    catalog: str = "autooptimize"
    home: Path = Path("./.autooptimize")

    # local Spark Connect server, when spark_remote == "local"
    spark_driver_memory: str = "2g"
    spark_cores: int = Field(default=2, ge=1)
    spark_port: int = Field(default=15002, ge=0, le=65535)
    # token of a Spark Connect server this service does not start (e.g. `autooptimize spark serve`)
    spark_token: SecretStr | None = None

    # tracking: fnmatch patterns of identifiers tracked automatically with default tuning
    auto_track: str = ""
    # how often the listener lists the catalog for new tables matching AO_AUTO_TRACK
    auto_track_seconds: float = Field(default=2.0, gt=0)
    # beat's safety sweep: a table the listener has not observed for this long gets a scan
    rescan_after_seconds: int = Field(default=86400, ge=60)

    # Celery worker: actions of independent partitions run side by side (each process has its own Spark
    # Connect session on the shared server)
    worker_concurrency: int = Field(default=2, ge=1)
    priority_classes: Annotated[tuple[str, ...], NoDecode] = ("high", "normal", "low")

    # defaults for newly tracked tables
    default_target_file_size: int = Field(default=128 * MiB, gt=0)
    default_tolerance: int | None = None  # None: a quarter of the target size

    # Flower basic auth; generated into AO_HOME when unset
    flower_user: str = "admin"
    flower_password: SecretStr | None = None
    flower_port: int = Field(default=5555, ge=1, le=65535)
    flower_address: str = "127.0.0.1"

    # action execution
    commit_retries: int = Field(default=4, ge=0)
    action_timeout_seconds: int = Field(default=3600, gt=0)
    # every attempt holds a lease in PostgreSQL, renewed every quarter of this term while it works; a
    # holder that stops renewing (crashed, partitioned) is taken over once the term has run out
    action_lease_seconds: int = Field(default=60, ge=5, le=3600)
    # deliveries of one action that may run before it is failed with its last error (crash loops end)
    max_attempts: int = Field(default=5, ge=1, le=100)
    # the sweeper re-queues (or fails, past AO_MAX_ATTEMPTS) an action queued or running with no live
    # lease and nothing done to it for this long (a lost message, a dead worker)
    sweep_after_seconds: int = Field(default=900, ge=0)
    # large partitions: no rewrite group reads more than this (one Spark job each), and an action keeps at
    # most this many group jobs in flight on its Spark Connect session
    max_group_bytes: int = Field(default=8 * 1024 * MiB, gt=0)
    rewrite_concurrency: int = Field(default=2, ge=1)

    # how automatic merges choose files: "tiered" keeps live partitions bounded without rewriting merged
    # bytes again (autooptimize.domain.policy); "binpack" merges every file that needs it each time
    merge_policy: str = "tiered"
    settle_seconds: float = Field(default=3.0, ge=0)
    merge_fan_in: int = Field(default=8, ge=2, le=1000)

    # dispatch to the actors: "direct" sends each action to Celery at once; "rpq" keeps the backlog in the
    # reliable priority queue and a dispatcher feeds the actors only while they have free slots
    dispatch: str = "rpq"
    # leases in flight at once; unset: what the actor workers can run (AO_WORKER_CONCURRENCY per worker)
    dispatch_slots: int | None = Field(default=None, ge=1)
    dispatch_per_table: int = Field(default=1, ge=1)
    lease_seconds: int = Field(default=300, ge=10)
    priority_weights: str = DEFAULT_PRIORITY_WEIGHTS

    # table hygiene (rewrite_manifests, expire_snapshots, remove_orphans); an action's options override
    hygiene_sweep_seconds: int = Field(default=3600, ge=60)  # how often beat decides hygiene per table
    manifest_threshold: int = Field(default=100, ge=1)  # rewrite when a snapshot has more data manifests
    snapshot_max_age_seconds: int = Field(default=5 * 86400, ge=3600)  # expire older snapshots ...
    snapshot_retain_last: int = Field(default=1, ge=1)  # ... but keep this many of each branch
    orphan_min_age_seconds: int = Field(default=3 * 86400, ge=3600)  # never remove a younger file
    orphan_sweep_interval_seconds: int = Field(default=7 * 86400, ge=0)  # 0: only when asked

    # buffered writes: where landed files wait (default $AO_HOME/buffer), the watched folder (off when
    # unset), the default rules of a table, how often beat evaluates them, and how long a dropped file must
    # stay unmodified before the watcher lands it
    buffer_root: Path | None = None
    buffer_watch_root: Path | None = None
    buffer_max_age_seconds: int = Field(default=900, gt=0)
    buffer_min_bytes: int = Field(default=0, ge=0)
    buffer_max_bytes: int = Field(default=1024 * MiB, gt=0)
    buffer_max_files: int = Field(default=5000, gt=0)
    buffer_tick_seconds: float = Field(default=30.0, gt=0)
    buffer_settle_seconds: float = Field(default=5.0, ge=0)

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgresql+psycopg2://", "postgres://")):
            raise ValueError(
                "must be a PostgreSQL URL such as postgresql+psycopg2://user@host:5432/autooptimize"
            )
        if value.startswith("postgres://"):
            value = "postgresql+psycopg2://" + value[len("postgres://"):]
        elif value.startswith("postgresql://"):
            value = "postgresql+psycopg2://" + value[len("postgresql://"):]
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_only(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("redis", "rediss"):
            raise ValueError("must be a Redis URL such as redis://localhost:6379/0")
        return value

    @field_validator("spark_remote")
    @classmethod
    def _spark_remote(cls, value: str) -> str:
        if value != "local" and not value.startswith("sc://"):
            raise ValueError("must be 'local' or a Spark Connect URL such as sc://host:15002/;token=...")
        return value

    @field_validator("catalog")
    @classmethod
    def _catalog_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", value):
            raise ValueError("must be a catalog name of letters, digits, '_' or '-'")
        return value

    @field_validator("merge_policy")
    @classmethod
    def _merge_policy(cls, value: str) -> str:
        if value not in ("tiered", "binpack"):
            raise ValueError("must be 'tiered' or 'binpack'")
        return value

    @field_validator("auto_track")
    @classmethod
    def _patterns(cls, value: str) -> str:
        for pattern in (p.strip() for p in value.split(",") if p.strip()):
            if not re.fullmatch(r"[A-Za-z0-9_\-*?\[\]]+(\.[A-Za-z0-9_\-*?\[\]]+)+", pattern):
                raise ValueError(f"pattern {pattern!r} is not namespace.table with * or ? wildcards, e.g. analytics.*")
        return value

    @property
    def auto_track_patterns(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.auto_track.split(",") if p.strip())

    @field_validator("default_target_file_size", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value, "AO_DEFAULT_TARGET_FILE_SIZE") if isinstance(value, str) else value

    @field_validator("buffer_min_bytes", "buffer_max_bytes", "max_group_bytes", mode="before")
    @classmethod
    def _buffer_size(cls, value: object, info: ValidationInfo) -> object:
        return parse_size(value, f"AO_{str(info.field_name).upper()}") if isinstance(value, str) else value

    @field_validator("priority_classes", mode="before")
    @classmethod
    def _classes(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(p.strip() for p in value.split(",") if p.strip())
        names = tuple(value) if isinstance(value, list | tuple) else ()
        if not names or not all(isinstance(p, str) and re.fullmatch(r"[a-z][a-z0-9_]*", p) for p in names):
            raise ValueError("must be comma-separated lower-case names such as high,normal,low")
        return names

    @field_validator("dispatch")
    @classmethod
    def _dispatch(cls, value: str) -> str:
        if value not in DISPATCH_MODES:
            raise ValueError(f"must be one of {', '.join(DISPATCH_MODES)} (got {value!r})")
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

    @property
    def class_weights(self) -> dict[str, float]:
        """Weight of every priority class (1 for a class AO_PRIORITY_WEIGHTS does not name)."""
        named = parse_weights(self.priority_weights)
        return {name: named.get(name, 1.0) for name in self.priority_classes}

    @property
    def slots(self) -> int:
        """Actions the dispatcher keeps in flight: AO_DISPATCH_SLOTS, else the workers' concurrency."""
        return self.dispatch_slots if self.dispatch_slots is not None else self.worker_concurrency

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def warehouse_dir(self) -> Path:
        return self.home_dir / "warehouse"

    @property
    def buffer_dir(self) -> Path:
        return (self.buffer_root or self.home / "buffer").expanduser().resolve()

    @property
    def tolerance_default(self) -> int:
        return self.default_tolerance or self.default_target_file_size // 4

    def redacted_database_url(self) -> str:
        """The database URL with any password masked, for messages and logs."""
        return redact_url(self.database_url)


def parse_weights(value: str) -> dict[str, float]:
    """Parse ``high=6,normal=3,low=1`` into class weights; ValueError says what is wrong and what is valid."""
    weights: dict[str, float] = {}
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        raise ValueError("must name at least one class weight, like high=6,normal=3,low=1")
    for part in parts:
        name, sep, number = (x.strip() for x in part.partition("="))
        try:
            weight = float(number) if sep else math.nan
        except ValueError:
            weight = math.nan
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{part!r} is not class=weight; use comma-separated entries like high=6,normal=3,low=1 "
                             "with positive weights")
        if name in weights:
            raise ValueError(f"class {name!r} is given twice")
        weights[name] = weight
    return weights


def redact_url(url: str) -> str:
    """Mask the password of a URL and any ``token=`` parameter."""
    url = re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)
    return re.sub(r"(token=)[^;&]*", r"\1***", url)


def load_settings() -> Settings:
    """Build Settings from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "?"
            problems.append(f"AO_{field.upper()}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
