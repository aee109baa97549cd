"""Helpers that several test modules share: a free port, the CLI in a child process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m autooptimize.cli *args`` in a child process running this checkout's code, with this
    environment (plus ``env``)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "autooptimize.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=timeout)
