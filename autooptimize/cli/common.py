"""What every command shares: the settings, printing a result as JSON or as aligned lines, and the
redaction of everything a command prints."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from autooptimize.config import Settings, get_settings
from autooptimize.redact import redact


def print_result(obj: Any, as_json: bool) -> None:
    """Print ``obj`` as one JSON line, or a dict as ``key: value`` lines."""
    if as_json:
        print(json.dumps(obj, default=str))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            print(f"{key:>18}: {value}")
    else:
        print(obj)


def current_settings() -> Settings:
    """The settings of this invocation (environment and AO_HOME)."""
    return get_settings()


class _Redacting:
    """A text stream that masks secrets in whatever is written to it (``print`` writes whole strings)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """Redact what is printed to stdout and stderr until the block ends (then the streams are restored)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(out), _Redacting(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
