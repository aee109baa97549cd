"""``benchmarks.streaming.stops_with_us``: the service a benchmark starts is stopped when the benchmark is
killed outright (the kernel's OOM killer), not left running with its Spark Connect server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks.streaming import stops_with_us

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is not installed")
def test_a_child_started_this_way_gets_sigterm_when_its_parent_is_killed(tmp_path):
    marker = tmp_path / "terminated"
    child = textwrap.dedent(f"""
        import signal, sys, time
        def stop(*_):
            open({str(marker)!r}, "w").write("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open({str(tmp_path / "ready")!r}, "w").write("ready")
        time.sleep(60)
    """)
    parent = textwrap.dedent(f"""
        import subprocess, sys, time
        from benchmarks.streaming import stops_with_us
        proc = subprocess.Popen(stops_with_us([sys.executable, "-c", {child!r}]), start_new_session=True)
        print(proc.pid, flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout is not None
    pid = int(p.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)  # as the OOM killer: nothing of the parent runs after it
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not marker.exists():
            assert time.monotonic() < deadline, "the child outlived its killed parent without a SIGTERM"
            time.sleep(0.05)
        assert marker.read_text() == "SIGTERM"
    finally:
        p.kill()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_without_setpriv_the_command_runs_as_it_is(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert stops_with_us(["python", "-m", "x"]) == ["python", "-m", "x"]
