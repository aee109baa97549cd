"""Progress while ``optimize --wait`` waits: the action's phase, groups done and bytes, on stderr with
rich when stderr is a terminal, nothing otherwise (stdout stays for the result)."""

from __future__ import annotations

import sys
import time
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.histogram import format_bytes
from autooptimize.errors import WaitTimeout
from autooptimize.storage.models import ActionState

POLL_SECONDS = 0.5


def describe(progress: dict[str, Any]) -> str:
    """One line: ``rewriting · attempt 1 · 3 groups, 12.0 MiB checkpointed``."""
    parts = [progress["phase"]]
    if progress["attempt"] > 1:
        parts.append(f"attempt {progress['attempt']}")
    if progress["partitions"]:
        parts.append(f"{progress['partitions']} partition(s)")
    if progress["groups_done"]:
        parts.append(f"{progress['groups_done']} group(s), {format_bytes(progress['bytes_done'])} written")
    return " · ".join(parts)


def wait_with_progress(settings: Settings, action_id: str, timeout: float | None,
                       show: bool | None = None) -> dict[str, Any]:
    """Wait until the action is final and return its outcome (as ``services.actions.wait``); WaitTimeout
    after ``timeout`` seconds. ``show`` defaults to whether stderr is a terminal."""
    from autooptimize.services.actions import get_outcome, wait
    from autooptimize.services.overview import action_progress

    if not (sys.stderr.isatty() if show is None else show):
        return wait(settings, action_id, timeout)
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    deadline = None if timeout is None else time.monotonic() + timeout
    columns = (SpinnerColumn(), TextColumn(f"action {action_id[:8]}"), TextColumn("{task.description}"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("queued", total=None)
        while True:
            progress = action_progress(settings, action_id)
            bar.update(task, description=describe(progress))
            if ActionState(progress["state"]).terminal:
                return get_outcome(settings, action_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"action {action_id} is still {progress['state']} ({progress['phase']}) "
                                  f"after {timeout} s")
            time.sleep(POLL_SECONDS)
