"""autooptimize/processes.py on real processes: the bounded stop reaches a whole process group, and a signal
unwinds into clean-up once."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from autooptimize.processes import Stopped, spawn, stop_processes, stop_signals
from tests.integration.processes import TreeWatch, kill_leftovers, wait_until

STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a child that does not stop when asked
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # and one of its own, in its group
print("ready", flush=True)
time.sleep(600)
"""

POLITE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""


def _start(tmp_path, name: str, code: str):  # type: ignore[no-untyped-def]
    log = tmp_path / f"{name}.log"
    proc = spawn([sys.executable, "-c", code], log)
    assert wait_until(lambda: "ready" in log.read_text(), 30)
    return proc, TreeWatch(proc.pid)


def test_a_child_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(tmp_path):
    proc, watch = _start(tmp_path, "stubborn", STUBBORN)
    try:
        started = time.monotonic()
        killed = stop_processes([proc], grace=1.0)
        took = time.monotonic() - started
        watch.stop()
        assert killed == [proc.pid]
        assert took < 1.0 + 4.0
        assert len(watch.seen) == 1 and watch.living() == []  # the grandchild was seen, and is gone
        assert proc.poll() is not None
    finally:
        watch.stop()
        kill_leftovers(watch)


def test_a_grandchild_left_behind_by_a_child_that_stopped_is_killed_too(tmp_path):
    proc, watch = _start(tmp_path, "polite", POLITE)
    try:
        assert stop_processes([proc], grace=5.0) == []  # the child itself stopped on SIGTERM
        watch.stop()
        assert len(watch.seen) == 1 and watch.living() == []
    finally:
        watch.stop()
        kill_leftovers(watch)


def test_the_first_signal_raises_stopped_once_and_the_handlers_come_back():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped) as raised, stop_signals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted
    assert raised.value.signum == signal.SIGTERM
    assert stop.received == [signal.SIGTERM] and not stop.forced()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_signal_while_held_is_raised_on_leaving_and_a_second_one_only_counts():
    with stop_signals() as stop:
        with pytest.raises(Stopped):
            with stop.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # not interrupted while held
                assert stop.requested
        os.kill(os.getpid(), signal.SIGTERM)  # clean-up is running: counted, asks to cut the grace short
        time.sleep(0.2)
        assert stop.forced()
