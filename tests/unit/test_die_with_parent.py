"""A child started by ``processes.spawn`` does not outlive its parent killed with SIGKILL (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PARENT = """
import sys, time
from pathlib import Path
from autooptimize.processes import spawn
child = spawn([sys.executable, "-c", "import time; time.sleep(120)"], Path(sys.argv[1]))
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # a zombie waiting for a reaper has exited


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_spawned_child_gets_sigterm_when_its_parent_is_killed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "child.log")], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert not _gone(child), "the child must be running while its parent is"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(child), "the child outlived its parent killed with -9"
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
