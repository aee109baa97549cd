"""What every command shares: the settings, and printing a result as JSON or as aligned lines."""

from __future__ import annotations

import json
from typing import Any

from autooptimize.config import Settings, get_settings


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
