"""The service's decision side: snapshot listener, fair dispatcher, beat schedule and orient (on top of ``tasks``)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from autooptimize.config import get_settings
from autooptimize.errors import AutoOptimizeError
from autooptimize.redact import install_log_redaction
from autooptimize.storage.db import check_schema

if TYPE_CHECKING:
    from autooptimize.config import Settings


def service_settings(prog: str, verbose: bool) -> Settings | None:
    """Set up logging, load the settings and check the schema; None, after saying why on stderr, if not."""
    install_log_redaction()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = get_settings()
        check_schema(settings)
    except AutoOptimizeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    return settings


def stop_on_signals(log: logging.Logger) -> threading.Event:
    """An event set by SIGTERM or SIGINT, for a service loop to stop cleanly."""
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stop
