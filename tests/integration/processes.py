"""Watching a process tree from the outside (/proc), for the tests that nothing outlives its parent."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path


def _stat(pid: int) -> tuple[int, int, int, str, str] | None:
    """(ppid, pgid, sid, state, start time) of ``pid``, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[2]), int(fields[3]), fields[0], fields[19]


def alive(pid: int, started: str | None = None) -> bool:
    """Running (not a zombie), and the same process when its start time is given (pids are reused)."""
    stat = _stat(pid)
    return stat is not None and stat[3] != "Z" and (started is None or stat[4] == started)


class TreeWatch:
    """Every process that was ever a descendant of ``root``, or in a session or process group one of them led
    (a daemon that left its parent, like the Spark JVM), sampled every 0.1 s until ``stop``."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, str] = {}
        self.commands: dict[int, str] = {}  # pid → command line when last sampled
        self._stop = threading.Event()
        self._sample()  # before returning: a tree that is gone before the thread's first turn was still seen
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        table = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := _stat(int(entry))) is not None:
                table[int(entry)] = stat
        members = {self.root} | set(self.seen)
        changed = True
        while changed:
            changed = False
            for pid, (ppid, pgid, sid, state, started) in table.items():
                if pid in members or state == "Z":
                    continue
                if ppid in members or pgid in members or sid in members:
                    members.add(pid)
                    self.seen.setdefault(pid, started)
                    changed = True
        for pid in members & set(self.seen):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmd and table.get(pid, (0, 0, 0, "", ""))[4] == self.seen[pid]:
                self.commands[pid] = cmd

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.1)

    def stop(self) -> None:
        self._sample()
        self._stop.set()
        self._thread.join()

    def living(self) -> list[str]:
        """The watched processes still running, as ``pid command``."""
        out = []
        for pid, started in sorted(self.seen.items()):
            if alive(pid, started):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
                except OSError:
                    cmd = "?"
                out.append(f"{pid} {cmd}")
        return out


def children_of(pid: int) -> dict[int, str]:
    """Direct children of ``pid``: pid → command line."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] == pid and stat[3] != "Z":
            try:
                out[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return out


def tree_of(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children_of(p))
    return out


def kill_leftovers(watch: TreeWatch) -> None:
    """SIGKILL whatever the watch saw that still runs (same start time only): a failed test leaks nothing."""
    for pid, started in watch.seen.items():
        if alive(pid, started):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
