"""A local Spark Connect server from the installed pyspark, for ``AO_SPARK_REMOTE=local``.

The server binds 127.0.0.1 only and requires a token. Its port, token and pid live in
``$AO_HOME/spark/server.json`` (mode 0600) so every process of the service reuses one server.
The token travels in the environment, never on a command line, and is never logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autooptimize.config import Settings
from autooptimize.errors import ConfigError, ServiceUnavailable
from spark_actors.java import with_java

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_IDENT = "autooptimize"
READY_TIMEOUT = 180.0
DEAF_TIMEOUT = 30.0  # a recorded server alive but not listening this long is replaced


@dataclass(frozen=True)
class ServerInfo:
    port: int
    token: str
    pid: int

    @property
    def remote(self) -> str:
        # "localhost" makes the client use local channel credentials: a token without TLS on loopback.
        return f"sc://localhost:{self.port}/;token={self.token}"


def _spark_dir(settings: Settings) -> Path:
    path = settings.home_dir / "spark"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _read(settings: Settings) -> ServerInfo | None:
    try:
        data = json.loads((_spark_dir(settings) / "server.json").read_text())
        return ServerInfo(port=int(data["port"]), token=str(data["token"]), pid=int(data["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _is_our_server(settings: Settings, pid: int) -> bool:
    """Whether ``pid`` is the server this AO_HOME started (its command line names our properties file), not a
    process that took over the pid of a dead one. Where /proc is missing, being alive must do."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists() and _alive(pid)
    except OSError:
        return _alive(pid)
    props = str(_spark_dir(settings) / "server.properties").encode()
    return SERVER_CLASS.encode() in cmdline and props in cmdline


def running_server(settings: Settings) -> ServerInfo | None:
    """The recorded server if it is alive and listening."""
    info = _read(settings)
    if info and _is_our_server(settings, info.pid) and _listening(info.port):
        return info
    return None


def _free_port(preferred: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            pass
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The conf that sets the Arrow memory pool of the executors' Python workers (they inherit the executor's
#: environment). pyarrow's default there, mimalloc, cost a Python worker's first rewrite about 40% more CPU
#: than its later ones, mostly in the kernel, and left the workers 25% larger; the C library's allocator
#: did neither (docs/engines.md, "The executors' memory pool").
MEMORY_POOL_CONF = "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL"
MEMORY_POOL = "system"
MEMORY_POOLS = ("system", "jemalloc", "mimalloc")  # what pyarrow's ARROW_DEFAULT_MEMORY_POOL accepts


def server_confs(settings: Settings) -> dict[str, str]:
    """Server-side settings the rewrite relies on (field ids, micros, no .crc: README "How a merge stays safe"),
    and the executors' Arrow memory pool: AO_SPARK_SERVER_CONF's, else ARROW_DEFAULT_MEMORY_POOL's, else
    :data:`MEMORY_POOL` (ConfigError for a pool pyarrow does not have: it would fall back silently)."""
    confs = {
        MEMORY_POOL_CONF: os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or MEMORY_POOL,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.sql.shuffle.partitions": str(max(2, settings.spark_cores * 2)),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.fieldId.write.enabled": "true",
        "spark.sql.parquet.fieldId.read.enabled": "true",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.file.impl.disable.cache": "true",
        "spark.ui.enabled": "false",
        "spark.sql.adaptive.enabled": "true",
    } | dict(settings.spark_server_conf)
    _check_pool(confs[MEMORY_POOL_CONF],
                MEMORY_POOL_CONF if MEMORY_POOL_CONF in settings.spark_server_conf else "ARROW_DEFAULT_MEMORY_POOL")
    return confs


def _check_pool(pool: str, where: str) -> None:
    """ConfigError naming ``where`` and the valid pools unless pyarrow has ``pool``."""
    if pool not in MEMORY_POOLS:
        raise ConfigError(f"{where}={pool!r} is not an Arrow memory pool; valid: {', '.join(MEMORY_POOLS)}")


def master(settings: Settings) -> str:
    """The master the server runs its jobs on (AO_SPARK_MASTER, else local mode on AO_SPARK_CORES cores)."""
    return settings.spark_master or f"local[{settings.spark_cores}]"


def ensure_local_server(settings: Settings) -> ServerInfo:
    """Reuse the recorded local server or start one; safe to call from many processes at once."""
    if settings.spark_remote != "local":
        raise ConfigError("AO_SPARK_REMOTE is not 'local'; no local server is managed")
    spark_dir = _spark_dir(settings)
    with open(spark_dir / "server.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        info = _read(settings)
        if info is not None and _is_our_server(settings, info.pid):
            # alive but not answering (a busy machine, a long GC): wait for it rather than start a second
            # server beside it, which would leave this one running unrecorded; replace it if it stays deaf
            deadline = time.monotonic() + DEAF_TIMEOUT
            while time.monotonic() < deadline and _is_our_server(settings, info.pid):
                if _listening(info.port):
                    return info
                time.sleep(0.5)
            stop_local_server(settings, timeout=10.0)
        return _start(settings, spark_dir)


def _start(settings: Settings, spark_dir: Path) -> ServerInfo:
    from pyspark.find_spark_home import _find_spark_home

    spark_home = os.environ.get("SPARK_HOME") or _find_spark_home()
    script = Path(spark_home) / "sbin" / "start-connect-server.sh"
    if not script.is_file():
        raise ServiceUnavailable(f"cannot start Spark Connect: {script} is missing from the pyspark install")
    token = secrets.token_urlsafe(32)
    port = _free_port(settings.spark_port)
    log_dir = spark_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    pid_file = spark_dir / f"spark-{_IDENT}-{SERVER_CLASS}-1.pid"
    with contextlib.suppress(OSError):
        pid_file.unlink()
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    # the Python workers run this interpreter: it has pyiceberg and pyarrow (our code comes as an artifact)
    # (or the interpreter AO_SPARK_SERVER_CONF names: what the executors of a cluster run)
    if settings.spark_server_conf.get("spark.pyspark.python"):
        env["PYSPARK_PYTHON"] = settings.spark_server_conf["spark.pyspark.python"]
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    props = spark_dir / "server.properties"
    confs = server_confs(settings) | {"spark.connect.grpc.binding.port": str(port)}
    env.update(
        ARROW_DEFAULT_MEMORY_POOL=confs[MEMORY_POOL_CONF],  # local mode: the executor is this JVM
        SPARK_CONNECT_AUTHENTICATE_TOKEN=token,
        SPARK_PID_DIR=str(spark_dir),
        SPARK_LOG_DIR=str(log_dir),
        SPARK_IDENT_STRING=_IDENT,
        SPARK_HOME=str(spark_home),
    )
    props.write_text("".join(f"{k}={v}\n" for k, v in confs.items()))
    cmd = [str(script), "--master", master(settings), "--properties-file", str(props)]
    # Its own session: the JVM (nohup'd by spark-daemon.sh) stays in the script's process group, apart from
    # whoever started it, so killing a worker's group never takes the shared server with it, and a start
    # cut short (a signal, a timeout) kills exactly that group.
    script_proc = subprocess.Popen(cmd, env=with_java(env, spark_dir / "java"), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
    group = script_proc.pid
    try:
        try:
            stdout, stderr = script_proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise ServiceUnavailable("start-connect-server.sh did not finish within 120 s") from None
        if script_proc.returncode != 0:
            raise ServiceUnavailable(
                f"start-connect-server.sh failed ({script_proc.returncode}): {(stderr or stdout).strip()[-500:]}"
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            pid = _pid_from(pid_file)
            if pid is not None and _listening(port):
                info = ServerInfo(port=port, token=token, pid=pid)
                fd = os.open(spark_dir / "server.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump({"port": port, "token": token, "pid": pid, "group": group}, f)
                return info
            if pid is not None and not _alive(pid):
                break
            time.sleep(0.25)
        raise ServiceUnavailable(f"the Spark Connect server did not start; see logs under {log_dir}")
    except BaseException:
        # not recorded, so nobody else could ever stop it: a half-started server goes with the failure
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            script_proc.wait(timeout=5)
        raise


def _pid_from(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_local_server(settings: Settings, timeout: float = 30.0) -> bool:
    """Stop the recorded local server (SIGTERM, then SIGKILL of its process group after ``timeout``); True
    when one was running. A record whose pid now belongs to another process is only removed."""
    info = _read(settings)
    if info is None or not _is_our_server(settings, info.pid):
        with contextlib.suppress(OSError):
            (_spark_dir(settings) / "server.json").unlink()
        return False
    group = _own_group(settings, info.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_our_server(settings, info.pid) and time.monotonic() < deadline:  # a zombie has no command line
        time.sleep(0.1)
    if _is_our_server(settings, info.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGKILL)
    if group is not None:  # whatever the JVM left in its group (e.g. Python UDF workers)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(OSError):
        (_spark_dir(settings) / "server.json").unlink()
    return True


def _own_group(settings: Settings, pid: int) -> int | None:
    """The process group ``_start`` made for the server (recorded beside its pid), if ``pid`` is still in it."""
    try:
        group = int(json.loads((_spark_dir(settings) / "server.json").read_text())["group"])
        return group if os.getpgid(pid) == group != os.getpgrp() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def local_server_while(settings: Settings, stop_timeout: float = 8.0) -> Iterator[ServerInfo | None]:
    """The local Spark Connect server for the duration of the block: reused when one is running, else started.

    On leaving (however: an error, a signal), the recorded server is stopped unless it is the very process
    that was running on entering, so ``up`` and the demo stop what they (or their children, after a crash
    of the server) started, and leave alone a server that was there before them. Yields None when
    AO_SPARK_REMOTE is not ``local``.
    """
    if settings.spark_remote != "local":
        yield None
        return
    before = running_server(settings)
    try:
        yield before or ensure_local_server(settings)
    finally:
        if started_since(settings, before):
            stop_local_server(settings, timeout=stop_timeout)


def started_since(settings: Settings, before: ServerInfo | None) -> bool:
    """A local server is recorded now that is not ``before`` (the one running when a block began, or None)."""
    now = _read(settings)
    return now is not None and (before is None or now.pid != before.pid)


def resolve_remote(settings: Settings) -> str:
    """The ``sc://`` URL clients connect to (it holds the token: never log it)."""
    if settings.spark_remote == "local":
        return ensure_local_server(settings).remote
    remote = settings.spark_remote
    if settings.spark_token is not None and "token=" not in remote:
        # parameters follow the first "/;" and are separated by ";": sc://host:443/;use_ssl=true;token=…
        token = "token=" + settings.spark_token.get_secret_value()
        remote = f"{remote.rstrip(';')};{token}" if "/;" in remote else f"{remote.rstrip('/')}/;{token}"
    return remote


def serve_foreground(settings: Settings) -> None:
    """Replace this process with a Spark Connect server on 127.0.0.1 (``autooptimize spark serve``).

    For containers: clients share its network namespace and connect to ``sc://localhost:PORT``, so the
    token travels over loopback only. The token comes from AO_SPARK_TOKEN and is required.
    """
    from pyspark.find_spark_home import _find_spark_home

    if settings.spark_token is None:
        raise ConfigError("AO_SPARK_TOKEN must be set: the Spark Connect server never runs without a token")
    spark_home = os.environ.get("SPARK_HOME") or _find_spark_home()
    spark_dir = _spark_dir(settings)
    props = spark_dir / "serve.properties"
    confs = server_confs(settings) | {"spark.connect.grpc.binding.port": str(settings.spark_port)}
    props.write_text("".join(f"{k}={v}\n" for k, v in confs.items()))
    env = dict(os.environ, SPARK_CONNECT_AUTHENTICATE_TOKEN=settings.spark_token.get_secret_value(),
               ARROW_DEFAULT_MEMORY_POOL=confs[MEMORY_POOL_CONF], SPARK_HOME=str(spark_home),
               SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(spark_dir / "logs"), SPARK_PID_DIR=str(spark_dir))
    script = str(Path(spark_home) / "sbin" / "start-connect-server.sh")
    os.execve(script, [script, "--master", master(settings), "--properties-file", str(props)],
              with_java(env, spark_dir / "java"))


STANDALONE = {"master": "org.apache.spark.deploy.master.Master", "worker": "org.apache.spark.deploy.worker.Worker"}


def serve_standalone(settings: Settings, role: str) -> None:
    """Replace this process with a Spark standalone master or worker in the foreground (``autooptimize
    spark master|worker``, containers). Spark's own variables configure them (SPARK_MASTER_HOST,
    SPARK_MASTER_PORT, SPARK_WORKER_CORES, SPARK_WORKER_MEMORY, ...); a worker registers with
    AO_SPARK_MASTER (``spark://host:7077``). The pyspark wheel has ``bin/spark-class`` but not
    ``sbin/start-master.sh``/``start-worker.sh``, which run the same classes as daemons."""
    from pyspark.find_spark_home import _find_spark_home

    if role not in STANDALONE:
        raise ConfigError(f"unknown standalone role {role!r}; valid: {', '.join(STANDALONE)}")
    args: list[str] = []
    if role == "worker":
        if not settings.spark_master.startswith("spark://"):
            raise ConfigError("a Spark worker needs AO_SPARK_MASTER=spark://host:port of its master")
        args = [settings.spark_master]
    spark_home = os.environ.get("SPARK_HOME") or _find_spark_home()
    spark_dir = _spark_dir(settings)
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOG_DIR=str(spark_dir / "logs"))
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python: pyarrow, pyiceberg, numba (docs/engines.md)
    env.setdefault("ARROW_DEFAULT_MEMORY_POOL", MEMORY_POOL)  # its executors' Python workers inherit it
    _check_pool(env["ARROW_DEFAULT_MEMORY_POOL"], "ARROW_DEFAULT_MEMORY_POOL")
    script = str(Path(spark_home) / "bin" / "spark-class")
    os.execve(script, [script, STANDALONE[role], *args], with_java(env, spark_dir / "java"))
