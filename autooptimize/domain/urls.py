"""Checking a URL that names a service (PostgreSQL, Redis, Spark Connect): scheme, host and port."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

__all__ = ["CONTROL_CHARACTERS", "HOST", "check_url"]

CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
HOST = re.compile(r"\A(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}"
                   r"[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])\Z")


def check_url(value: str, name: str, example: str, schemes: tuple[str, ...]) -> SplitResult:
    """``value`` split as a URL of one of ``schemes`` with a well-formed host and port; ValueError otherwise."""
    if CONTROL_CHARACTERS.search(value) or any(c.isspace() for c in value):
        raise ValueError(f"must be a {name} URL such as {example}, without spaces or control characters")
    parts = urlsplit(value)
    if parts.scheme not in schemes:
        raise ValueError(f"must be a {name} URL such as {example}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"has a port that is not a number from 1 to 65535; use a URL such as {example}") from None
    host = parts.hostname or ""
    if host and not HOST.match(host if ":" not in host else f"[{host}]"):
        raise ValueError(f"has host {host!r}, which is not a host name or address; use a URL such as {example}")
    if port == 0:
        raise ValueError(f"has port 0; use a port from 1 to 65535, as in {example}")
    return parts
