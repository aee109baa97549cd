"""A lease holder is judged dead only when that is provable: /proc that will not say (hidepid) means alive."""

from __future__ import annotations

import os
import subprocess
import sys

from autooptimize.storage import leases


def _holder_of(pid: int) -> str:
    import json

    me = json.loads(leases.holder_identity("test"))
    return json.dumps({**me, "pid": pid, "start": leases._start_time(pid)})


def test_a_running_holder_is_alive_and_a_dead_one_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        holder = _holder_of(child.pid)
        assert not leases.holder_is_gone(holder)
    finally:
        child.kill()
        child.wait()
    assert leases.holder_is_gone(holder)


def test_proc_that_refuses_to_say_counts_as_alive(monkeypatch):
    holder = _holder_of(os.getpid())

    def hidden(pid):
        raise PermissionError(13, "Permission denied", f"/proc/{pid}/stat")

    monkeypatch.setattr(leases, "_read_stat", hidden)
    assert not leases.holder_is_gone(holder)


def test_proc_that_hides_a_live_pid_counts_as_alive(monkeypatch):
    """hidepid=2: /proc/<pid> is not there for another user's process, but the pid is."""
    holder = _holder_of(os.getpid())

    def invisible(pid):
        raise FileNotFoundError(2, "No such file or directory", f"/proc/{pid}/stat")

    monkeypatch.setattr(leases, "_read_stat", invisible)
    assert not leases.holder_is_gone(holder)
