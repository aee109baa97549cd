"""The worker's and Flower's arguments (``autooptimize up`` runs them as child processes: cli/up.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from autooptimize.config import Settings
from autooptimize.errors import ConfigError, InvalidArgument
from tasks.routing import all_queue_names


def worker_argv(settings: Settings, *, queues: str | None = None, concurrency: int | None = None,
                loglevel: str = "INFO", name: str | None = None, pool: str | None = None) -> list[str]:
    """Celery worker arguments for ``queues`` (comma-separated; default every queue); InvalidArgument
    names an unknown queue and the valid ones."""
    valid = all_queue_names(settings.priority_classes)
    chosen = [q.strip() for q in queues.split(",")] if queues else valid
    bad = [q for q in chosen if q not in valid]
    if bad:
        raise InvalidArgument(f"unknown queue(s) {', '.join(bad)}; valid: {', '.join(valid)}")
    argv = ["worker", "-Q", ",".join(chosen), "-c", str(concurrency or settings.worker_concurrency),
            "--loglevel", loglevel, "-E"]
    if name:
        argv += ["-n", name]
    if pool:
        argv += ["-P", pool]
    return argv


def flower_credentials(settings: Settings) -> tuple[str, str, Path | None]:
    """User and password for Flower's basic auth: from AO_FLOWER_* or generated once into AO_HOME.
    Never an empty user or password (AO_FLOWER_PASSWORD is refused empty when the settings load)."""
    if settings.flower_password is not None:
        return settings.flower_user, settings.flower_password.get_secret_value(), None
    path = settings.home_dir / "flower-credentials"
    if path.exists():
        user, _, password = path.read_text().strip().partition(":")
        if not user or not password.strip():
            raise ConfigError(f"{path} holds no user:password for Flower; delete it to have one generated, "
                              "or set AO_FLOWER_PASSWORD")
        return user, password, path
    password = secrets.token_urlsafe(18)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{settings.flower_user}:{password}\n")
    return settings.flower_user, password, path
