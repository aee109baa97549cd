"""Basic auth in front of every route of the console (pages, JSON API, assets and /metrics).

The credentials are ``AO_CONSOLE_USER`` and ``AO_CONSOLE_PASSWORD``; without a password one is
generated once into ``$AO_HOME/console-credentials`` (mode 0600), as Flower's is. An empty password is
refused by the settings.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path
from typing import Any

from autooptimize.config import Settings

REALM = "autooptimize"
CREDENTIALS_FILE = "console-credentials"


def generated_credentials(path: Path, user: str) -> tuple[str, str]:
    """``user:password`` kept in ``path`` (0600), generated on first use; the file's user wins later."""
    if path.exists():
        stored_user, _, password = path.read_text().strip().partition(":")
        if stored_user and password:
            return stored_user, password
    password = secrets.token_urlsafe(18)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{user}:{password}\n")
    return user, password


def console_credentials(settings: Settings) -> tuple[str, str, Path | None]:
    """User, password, and the file the password was generated into (None when it came from the settings)."""
    if settings.console_password is not None:
        return settings.console_user, settings.console_password.get_secret_value(), None
    path = settings.home_dir / CREDENTIALS_FILE
    user, password = generated_credentials(path, settings.console_user)
    return user, password, path


class BasicAuth:
    """ASGI middleware: a request without the right ``Authorization: Basic`` header gets 401 and a
    ``WWW-Authenticate`` challenge, before any route (or static file) sees it."""

    def __init__(self, app: Any, user: str, password: str) -> None:
        self.app = app
        self._user = user.encode()
        self._password = password.encode()

    def allowed(self, header: bytes | None) -> bool:
        if not header or not header[:6].lower() == b"basic ":
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        # both compared in constant time, whatever the first comparison said
        same_user = secrets.compare_digest(user, self._user)
        same_password = secrets.compare_digest(password, self._password)
        return bool(sep) and same_user and same_password

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan events carry no request
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers") or () if k == b"authorization"), None)
        if self.allowed(header):
            await self.app(scope, receive, send)
            return
        body = b'{"detail":"authentication required"}'
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
