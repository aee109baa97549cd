"""The soak's service: ``autooptimize up`` as a child process, found again through /proc, stopped and checked.

Like benchmarks/streaming.py the service gets an environment of its own (database, Redis db, AO_HOME,
Spark port); the soak process uses the same AO_* values, so its own ``land()`` and consolidation requests
go to the same broker.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from autooptimize.processes import spawn, stop_processes

REPO = Path(__file__).resolve().parents[1]
STOP_BOUND_SECONDS = 30.0


def _stat(pid: int) -> tuple[int, int, int, str, str] | None:
    """(ppid, pgid, sid, state, start time) of ``pid``; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[2]), int(fields[3]), fields[0], fields[19]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def children_of(pid: int) -> dict[int, str]:
    """Running direct children of ``pid``: pid → command line."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] == pid and stat[3] != "Z":
            out[int(entry)] = cmdline(int(entry))
    return out


def process_tree(root: int, extra: set[int] = frozenset()) -> dict[int, str]:  # type: ignore[assignment]
    """``root``, its descendants, and every process in a session or group one of them (or ``extra``) leads:
    pid → start time."""
    table = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _stat(int(e))) is not None}
    members = {root} | set(extra)
    changed = True
    while changed:
        changed = False
        for pid, (ppid, pgid, sid, state, _) in table.items():
            if pid not in members and state != "Z" and (ppid in members or pgid in members or sid in members):
                members.add(pid)
                changed = True
    return {pid: table[pid][4] for pid in members if pid in table and table[pid][3] != "Z"}


def still_running(tree: dict[int, str]) -> list[str]:
    out = []
    for pid, started in tree.items():
        stat = _stat(pid)
        if stat is not None and stat[3] != "Z" and stat[4] == started:
            out.append(f"{pid} {cmdline(pid)[:120]}")
    return out


class Service:
    """``autooptimize up --no-flower --no-console`` with ``env``; ``stop`` reports how it stopped."""

    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.env, self.home = env, home
        self.log_path = home / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = spawn([sys.executable, "-m", "autooptimize.cli", "up", "--no-flower", "--no-console"], self.log_path,
                          self.env)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def up(self) -> bool:
        return self.running() and "is up" in self.log_path.read_text(errors="replace")

    def roles(self) -> dict[str, list[int]]:
        """Children of ``up`` by role: worker, listener, dispatcher, beat."""
        out: dict[str, list[int]] = {}
        for pid, cmd in children_of(self.pid).items():
            role = ("worker" if " worker " in cmd else "listener" if "cli listener" in cmd else
                    "dispatcher" if "cli dispatcher" in cmd else "beat" if "cli beat" in cmd else "other")
            out.setdefault(role, []).append(pid)
        return out

    def spark_pid(self) -> int | None:
        import json

        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads((self.home / "spark" / "server.json").read_text())["pid"])
            return pid if "SparkConnectServer" in cmdline(pid) else None
        return None

    def stop(self) -> tuple[float | None, list[str]]:
        """SIGTERM to ``up``; (seconds it took to exit, processes of the service still running afterwards:
        its children, their groups and sessions, the Spark server). Kills leftovers after noting them."""
        if self.proc is None:
            return None, []
        spark = self.spark_pid()
        tree = process_tree(self.pid, {spark} if spark else set())
        started = time.monotonic()
        killed = stop_processes([self.proc], grace=STOP_BOUND_SECONDS + 30)
        took = None if killed else time.monotonic() - started
        time.sleep(0.5)
        left = still_running({p: s for p, s in tree.items() if p != self.pid})
        for line in left:  # a leftover is a finding; it must not outlive the soak
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line.split()[0]), 9)
        return took, left

    def log_findings(self) -> list[str]:
        """Per log: error lines and tracebacks, the commonest first lines."""
        found = []
        for path in [self.log_path, *sorted((self.home / "logs").glob("*.log"))]:
            with contextlib.suppress(OSError):
                lines = path.read_text(errors="replace").splitlines()
                errors = [ln for ln in lines if re.search(r"\b(ERROR|CRITICAL)\b|Traceback", ln)]
                if errors:
                    common = Counter(re.sub(r"[0-9a-f]{8,}|\d+", "…", ln.split(": ", 2)[-1])[:160] for ln in errors)
                    top = "; ".join(f"{n}× {what}" for what, n in common.most_common(3))
                    found.append(f"{path.name}: {len(errors)} error line(s): {top}")
        return found
