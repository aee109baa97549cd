"""deploy/redis.sh, the Redis entrypoint of docker-compose.yml, run against a real redis-server on
loopback: the password protects the server and appears on no command line."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "redis.sh"
PASSWORD = "s3cret-redis-pass-1234"

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")



def _redis_cli(port: int, *args: str, auth: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
    if auth:
        env["REDISCLI_AUTH"] = PASSWORD
    done = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], env=env, capture_output=True,
                          text=True, timeout=10)
    return done.stdout + done.stderr


def test_the_redis_password_protects_the_server_and_is_on_no_command_line(tmp_path):
    port = free_port()
    env = {**os.environ, "REDISCLI_AUTH": PASSWORD, "TMPDIR": str(tmp_path)}
    server = subprocess.Popen(["sh", str(SCRIPT), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                               "--save", ""], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "PONG" not in _redis_cli(port, "ping"):
            assert server.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        assert "NOAUTH" in _redis_cli(port, "ping", auth=False)
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
        assert cmdline[0].startswith("redis-server") and PASSWORD not in " ".join(cmdline)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert PASSWORD not in ps
        (conf,) = tmp_path.glob("tmp.*")  # mktemp's file in TMPDIR
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600 and f"requirepass {PASSWORD}" in conf.read_text()
    finally:
        server.terminate()
        server.wait(10)


def test_a_password_that_does_not_fit_a_url_is_refused():
    env = {**os.environ, "REDISCLI_AUTH": "pass@word"}
    done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 2 and "letters, digits" in done.stderr and "pass@word" not in done.stderr
