"""Child processes of an entry point (``autooptimize up``, the demo), and stopping them within a bound.

Every child leads its own process group, so a stop reaches everything it started (a Celery worker's pool
processes too) and a Ctrl-C at the terminal reaches only the parent, which stops the children in order.
Stopping is SIGTERM to each child (its own clean shutdown: a Celery worker finishes or hands back its
task), then, after ``grace`` seconds or at once on a second SIGTERM/Ctrl-C, SIGKILL to each child's
whole group. A group whose leader has already exited is killed too: no grandchild outlives the stop.

Standard library only; it sits beside ``config`` and ``errors`` and any package may use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

STOP_GRACE_SECONDS = 15.0  # SIGTERM → SIGKILL; with the Spark server's own stop, well inside 30 s
_KILL_WAIT_SECONDS = 3.0


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived inside :func:`stop_signals`. Like KeyboardInterrupt it is not an error (so it
    derives from BaseException): it unwinds the stack so every ``finally`` that stops something runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class StopSignals:
    """What :func:`stop_signals` received. The first signal raises :class:`Stopped` in the main thread, once;
    later ones are only counted (a second one asks to cut the grace short, see ``forced``)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._armed = True
        self._held = 0

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._armed and not self._held:
            self._armed = False
            raise Stopped(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No Stopped inside (a child being spawned is never lost between fork and bookkeeping); a signal
        that arrived meanwhile raises on leaving."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._armed and self.received:
                self._armed = False
                raise Stopped(self.received[0])

    def disarm(self) -> None:
        """From here on signals are only counted: the clean-up that follows runs to its end."""
        self._armed = False

    @property
    def requested(self) -> bool:
        return bool(self.received)

    def forced(self) -> bool:
        """A second signal came: skip what is left of the grace period."""
        return len(self.received) >= 2


@contextlib.contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """Within the block SIGTERM and SIGINT raise :class:`Stopped` (main thread only); the previous handlers
    come back on leaving."""
    watched = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.getsignal(signum) for signum in watched}
    stopper = StopSignals()
    for signum in watched:
        signal.signal(signum, stopper._handle)
    try:
        yield stopper
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent (a child between fork and exec should only call it)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl: Callable[..., int]) -> Callable[[], None]:
    def ask() -> None:  # pragma: no cover - runs in the child between fork and exec
        """SIGTERM to this process when the thread that forked it ends (its parent killed with -9
        included), so a child of ``up`` or the demo never outlives it unsupervised."""
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return ask


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session (and process group), output appended to ``log_path``.

    On Linux the child gets SIGTERM when the spawning thread ends, so call this from the thread that
    supervises the child for its whole life (the entry point's main thread)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    prctl = _prctl() if os.uname().sysname == "Linux" else None
    with open(log_path, "ab") as out:
        return subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent(prctl) if prctl else None)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (zombies included until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], grace: float = STOP_GRACE_SECONDS,
                   forced: Callable[[], bool] = lambda: False) -> list[int]:
    """Stop children started by :func:`spawn`: SIGTERM to each leader, up to ``grace`` seconds (less when
    ``forced()`` turns true) for them to exit, then SIGKILL to every child's group, and wait for the groups
    to empty. Returns the pids of the leaders that had to be killed. Bounded: grace + a few seconds."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not forced() and any(proc.poll() is None for proc in procs):
        time.sleep(0.1)
    killed = [proc.pid for proc in procs if proc.poll() is None]
    for proc in procs:
        kill_group(proc.pid)  # the leader if it is still there, and whatever it left behind in its group
    deadline = time.monotonic() + _KILL_WAIT_SECONDS
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    while time.monotonic() < deadline and any(group_alive(proc.pid) for proc in procs):
        time.sleep(0.05)
    return killed
