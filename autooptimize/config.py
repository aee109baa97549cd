"""One Settings object. No other module reads ``os.environ`` for our settings.

Every field is read from an ``AO_*`` environment variable (``AO_DATABASE_URL`` …) and validated when
the settings are loaded: a bad value raises ConfigError naming the variable and what would be valid.
Secrets are ``SecretStr`` so they never print in reprs, may not be empty, and are remembered by
:mod:`autooptimize.redact` so that no message or log shows them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from autooptimize.config_fleet import FleetSettings
from autooptimize.domain.policy import DEFAULT_FAN_IN
from autooptimize.domain.priced import DEFAULT_PRICE
from autooptimize.domain.remainder import DEFAULT_COLD_ABSORB
from autooptimize.domain.sizes import MAX_BYTES, MiB, parse_size
from autooptimize.domain.urls import CONTROL_CHARACTERS, HOST, check_url
from autooptimize.errors import ConfigError, InvalidArgument
from autooptimize.redact import redact, remember_secrets

#: The largest value of an integer setting that is not a size (PostgreSQL integer, seconds, counts).
MAX_INT = 2**31 - 1
_SECRET_FIELDS = ("spark_token", "flower_password")
_SIZE_FIELDS = ("default_target_file_size", "default_tolerance", "max_group_bytes", "buffer_min_bytes",
                "buffer_max_bytes")


class Settings(FleetSettings):
    """Service configuration, from ``AO_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="AO_", extra="ignore", frozen=True, allow_inf_nan=False)

    database_url: str = "postgresql+psycopg2://postgres@localhost:5432/autooptimize"
    redis_url: str = "redis://localhost:6379/0"
    spark_remote: str = "local"
    catalog: str = "autooptimize"
    home: Path = Path("./.autooptimize")

    # local Spark Connect server, when spark_remote == "local"
    spark_driver_memory: str = "2g"
    spark_cores: int = Field(default=2, ge=1)
    spark_port: int = Field(default=15002, ge=0, le=65535)
    # the master the service's own Connect server (local, or ``autooptimize spark serve``) runs its jobs on:
    # empty for local[spark_cores] in the server's JVM, or a cluster (spark://host:7077, yarn, k8s://...)
    spark_master: str = ""
    # extra Spark confs of that server (JSON object), e.g. {"spark.executor.memory": "4g"}
    spark_server_conf: dict[str, str] = Field(default_factory=dict)
    # token of a Spark Connect server this service does not start (e.g. `autooptimize spark serve`); not empty
    spark_token: SecretStr | None = None

    # tracking: fnmatch patterns of identifiers tracked automatically with default tuning

    # Celery worker: actions of independent partitions run side by side (each process has its own Spark
    # Connect session on the shared server)
    worker_concurrency: int = Field(default=2, ge=1)

    # defaults for newly tracked tables
    default_target_file_size: int = Field(default=128 * MiB, gt=0)
    default_tolerance: int | None = Field(default=None, gt=0)  # None: a quarter of the target size

    # Flower basic auth; the password is generated into AO_HOME when unset, and may not be empty
    flower_user: str = "admin"
    flower_password: SecretStr | None = None
    flower_port: int = Field(default=5555, ge=1, le=65535)
    flower_address: str = "127.0.0.1"

    # action execution
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
    # which path rewrites the groups (services/rewrite/engine.py, docs/engines.md): spark (one Spark job per
    # action, the work on the executors), spark_sql (Spark's own Parquet IO, file:// only) or local (pyarrow
    # in the worker process: a single machine without a cluster)
    rewrite_engine: Literal["spark", "spark_sql", "local"] = "spark"
    # an actor worker process opens its Spark session, ships our code and runs one small job on the executors
    # as it starts (spark_actors/warmup.py), so that its first action does not pay for them
    actor_warm_up: bool = True

    # how automatic merges choose files: "tiered" keeps live partitions bounded without rewriting merged
    # bytes again (autooptimize.domain.policy); "binpack" merges every file that needs it each time
    merge_policy: str = "tiered"
    settle_seconds: float = Field(default=3.0, ge=0)
    merge_fan_in: int = Field(default=DEFAULT_FAN_IN, ge=2, le=1000)
    # a partition with no new file for this long is finished to its best layout once (the policy's cold rule)
    cold_after_seconds: float = Field(default=60.0, ge=0, le=86400)
    # a partition goes cold sooner: after this many times the longest of its last 3 gaps between writes
    # (at least 5 s, at most the cold-after time; 0: off), autooptimize.domain.policy.partition_cold_after
    cold_gap_factor: float = Field(default=4.0, ge=0, le=1000)
    # > 0 (the default, priced.DEFAULT_PRICE: 23): while written to, a partition that fills target files
    # merges by the priced rule at this price (autooptimize.domain.priced) instead of the tiers; 0: the tiers
    merge_price: int = Field(default=DEFAULT_PRICE, ge=0, le=1_000_000)
    # a time partition further behind the newest than any write has reached back is finished at once
    # (autooptimize.domain.policy.past_late_horizon), not after its cold-after time
    late_horizon_finish: bool = True
    # merge a partition's small files once it is quiet (no write for AO_SETTLE_SECONDS) before it goes cold
    quiet_merge: bool = False
    # the cold finish gives a remainder under 3/4 of the target a nearly full file to join
    # (autooptimize.domain.remainder); off by default, a per-table knob AutoAnalyze tries
    cold_absorb: bool = DEFAULT_COLD_ABSORB
    # how often beat re-evaluates every tracked table's suggested tuning (AutoAnalyze, services/autotune.py)
    autotune_seconds: int = Field(default=3600, ge=60)
    # a pass starts no new table's suggestion after this long; the tables left go first in the next pass
    autotune_pass_seconds: int = Field(default=300, ge=1, le=86400)
    # a table suggested before is re-evaluated once at least this many writer commits landed since
    autotune_min_new_commits: int = Field(default=20, ge=1, le=1_000_000)


    # table hygiene (rewrite_manifests, expire_snapshots, remove_orphans); an action's options override
    hygiene_sweep_seconds: int = Field(default=3600, ge=60)  # how often beat decides hygiene per table
    manifest_threshold: int = Field(default=100, ge=1)  # rewrite when a snapshot has more data manifests
    snapshot_max_age_seconds: int = Field(default=5 * 86400, ge=3600)  # expire older snapshots ...
    snapshot_retain_last: int = Field(default=1, ge=1)  # ... but keep this many of each branch
    orphan_min_age_seconds: int = Field(default=3 * 86400, ge=3600)  # never remove a younger file
    orphan_sweep_interval_seconds: int = Field(default=7 * 86400, ge=0)  # 0: only when asked

    # bounded state: days kept of each kind of record, applied by beat (services/retention.py)
    retention_audit_days: float = Field(default=90, gt=0)
    retention_action_days: float = Field(default=30, gt=0)
    retention_buffer_days: float = Field(default=7, gt=0)
    retention_history_full_days: float = Field(default=2, gt=0)
    retention_history_days: float = Field(default=30, gt=0)
    retention_sweep_seconds: int = Field(default=3600, ge=60)

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

    # web console and /metrics (autooptimize console, started by autooptimize up); basic auth always on,
    # the password generated into AO_HOME when unset
    console_user: str = "admin"
    console_password: SecretStr | None = None
    console_address: str = "127.0.0.1"
    console_port: int = Field(default=8765, ge=1, le=65535)

    @field_validator("console_user", "console_password")
    @classmethod
    def _console_credentials(cls, value: str | SecretStr | None) -> str | SecretStr | None:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is not None and not text.strip():
            raise ValueError("must not be empty (unset AO_CONSOLE_PASSWORD to have one generated into AO_HOME)")
        if text is not None and ":" in text and isinstance(value, str):
            raise ValueError("must not contain ':' (basic auth separates user and password with it)")
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str) -> str:
        example = "postgresql+psycopg2://user@host:5432/autooptimize"
        parts = check_url(value, "PostgreSQL", example, ("postgresql", "postgresql+psycopg2", "postgres"))
        database = unquote(parts.path.lstrip("/"))
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]{0,62}", database):
            raise ValueError(f"names database {database!r}; use letters, digits, '_' or '-' (at most 63), as in "
                             f"{example}")
        if value.startswith("postgres://"):
            value = "postgresql+psycopg2://" + value[len("postgres://"):]
        elif value.startswith("postgresql://"):
            value = "postgresql+psycopg2://" + value[len("postgresql://"):]
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_only(cls, value: str) -> str:
        example = "redis://localhost:6379/0 or redis://:<password>@host:6379/0"
        parts = check_url(value, "Redis", example, ("redis", "rediss"))
        db = parts.path.lstrip("/") or parse_qs(parts.query).get("db", ["0"])[0]
        if not re.fullmatch(r"\d{1,5}", db):
            raise ValueError(f"names database {db!r}; a Redis database is a number such as 0, as in {example}")
        return value

    @field_validator("spark_remote")
    @classmethod
    def _spark_remote(cls, value: str) -> str:
        if value == "local":
            return value
        example = "'local' or a Spark Connect URL such as sc://host:15002"
        if not value.startswith("sc://"):
            raise ValueError(f"must be {example}")
        if not urlsplit(value).hostname:
            raise ValueError(f"names no host; use {example}")
        check_url(value, "Spark Connect", "sc://host:15002", ("sc",))
        if re.search(r";token=(;|$)", value):
            raise ValueError("has an empty token; give the server's token, or leave it out and set AO_SPARK_TOKEN")
        return value

    @field_validator("spark_token", "flower_password")
    @classmethod
    def _secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None:
            return value
        secret = value.get_secret_value()
        name = f"AO_{str(info.field_name).upper()}"
        if not secret.strip():
            raise ValueError(f"is empty; set it to a long random value (e.g. the output of "
                             f"`python -c 'import secrets; print(secrets.token_urlsafe(24))'`) or unset {name}")
        if CONTROL_CHARACTERS.search(secret) or secret != secret.strip() or ";" in secret:
            raise ValueError("holds whitespace, ';' or control characters; use letters, digits and punctuation")
        return value

    @field_validator("flower_user")
    @classmethod
    def _flower_user(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.@\-]{1,64}", value):
            raise ValueError("must be a user name of 1 to 64 letters, digits, '_', '.', '@' or '-' (no ':')")
        return value

    @field_validator("flower_address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not HOST.match(value if ":" not in value else f"[{value}]"):
            raise ValueError("must be a host name or IP address to listen on, such as 127.0.0.1 or 0.0.0.0")
        return value

    @field_validator("autotune_pass_seconds")
    @classmethod
    def _pass_within_interval(cls, value: int, info: ValidationInfo) -> int:
        interval = info.data.get("autotune_seconds")
        if interval is not None and value > interval:
            raise ValueError(f"must be at most AO_AUTOTUNE_SECONDS ({interval}): a pass must end before the next starts")
        return value

    @field_validator("spark_driver_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not re.fullmatch(r"[1-9]\d{0,6}[kmgt]", value, re.IGNORECASE):
            raise ValueError("must be a JVM memory size such as 512m, 2g or 8g")
        return value

    @field_validator("home", "buffer_root", "buffer_watch_root", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        # Path("") is the working directory: an empty value must not silently mean "here"
        if isinstance(value, str) and not value.strip():
            raise ValueError("must be a directory path, not empty (unset the variable for the default)")
        return value

    @field_validator("home", "buffer_root", "buffer_watch_root")
    @classmethod
    def _path(cls, value: Path | None) -> Path | None:
        if value is not None and (not str(value).strip() or CONTROL_CHARACTERS.search(str(value))):
            raise ValueError("must be a directory path without control characters, such as ~/.autooptimize")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value: Any, info: ValidationInfo) -> Any:
        # an integer stored in PostgreSQL or handed to sleep() or Redis must fit there
        if isinstance(value, int) and not isinstance(value, bool):
            limit = MAX_BYTES if info.field_name in _SIZE_FIELDS else MAX_INT
            if value > limit:
                raise ValueError(f"must be at most {limit}")
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


    @field_validator(*_SIZE_FIELDS, mode="before")
    @classmethod
    def _size(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        name = f"AO_{str(info.field_name).upper()}"
        try:
            return parse_size(value, name)
        except InvalidArgument as exc:  # load_settings names the variable
            raise ValueError(str(exc).removeprefix(f"{name}=")) from None

    def model_post_init(self, context: Any, /) -> None:
        remember_secrets(self.secret_values())

    def secret_values(self) -> list[str]:
        """Every secret these settings hold: the URLs' passwords, the Spark token, the Flower password."""
        found = [urlsplit(url).password for url in (self.database_url, self.redis_url)]
        found += [s.get_secret_value() for s in (self.spark_token, self.flower_password) if s is not None]
        found += re.findall(r"token=([^;&]+)", self.spark_remote)
        return [s for s in found if s]


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
        return redact(self.database_url)


def load_settings() -> Settings:
    """Build Settings from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "?"
            message = err["msg"].removeprefix("Value error, ")
            given = err.get("input")
            shown = "" if field in _SECRET_FIELDS or not isinstance(given, str) or repr(given) in message else (
                f" (got {given!r})")
            problems.append(f"AO_{field.upper()}: {message}{shown}")
        raise ConfigError(redact("invalid configuration: " + "; ".join(problems))) from None
    except SettingsError as exc:
        raise ConfigError(redact(f"invalid configuration: {exc}")) from None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
