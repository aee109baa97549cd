"""Helpers for tests that talk to the console over HTTP: a free port, a GET with basic auth, the console
run as its own process, and a Prometheus scrape parsed into samples."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]



def get(url: str, auth: tuple[str, str] | None = None, timeout: float = 60) -> tuple[int, bytes]:
    """Status and body of a GET (0 when nothing answers)."""
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def wait_until_answering(url: str, proc: subprocess.Popen | None = None, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get(url, timeout=5)[0] in (200, 401):
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process serving {url} exited with {proc.returncode}")
        time.sleep(0.5)
    raise AssertionError(f"nothing answered at {url} within {timeout} s")


@contextmanager
def console_process(password: str = "console-test-pw", user: str = "ops") -> Iterator[tuple[str, tuple[str, str]]]:
    """``autooptimize console`` on a free port; yields its base URL and credentials, stops it after."""
    port = free_port()
    env = {**os.environ, "AO_CONSOLE_PORT": str(port), "AO_CONSOLE_USER": user, "AO_CONSOLE_PASSWORD": password}
    proc = subprocess.Popen([sys.executable, "-m", "autooptimize.cli", "console", "--log-level", "warning"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(f"{base}/api/tables", proc)
        yield base, (user, password)
    finally:
        proc.terminate()
        try:
            output = proc.communicate(timeout=30)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        assert password not in output, "the console must not print its password"


def scrape(base: str, auth: tuple[str, str]) -> str:
    """One ``/metrics`` scrape, as text."""
    status, body = get(f"{base}/metrics", auth)
    assert status == 200, body
    return body.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape as {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def families(text: str) -> set[str]:
    """The metric families a scrape declares (counters without their ``_total``), samples or not."""
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name for family in text_string_to_metric_families(text)}
