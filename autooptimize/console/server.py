"""Serving the console with uvicorn on ``AO_CONSOLE_ADDRESS:AO_CONSOLE_PORT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autooptimize.config import Settings
from autooptimize.console.app import create_app
from autooptimize.console.auth import console_credentials


def serve(settings: Settings, *, log_level: str = "info") -> None:
    """Run the console in the foreground until SIGINT or SIGTERM (uvicorn stops gracefully on both)."""
    import uvicorn

    user, password, path = console_credentials(settings)
    where = f"password in {path}" if path else "password from AO_CONSOLE_PASSWORD"
    print(f"Console: http://{settings.console_address}:{settings.console_port} (user {user!r}, {where})",
          flush=True)
    app = create_app(settings, user, password)
    uvicorn.run(app, host=settings.console_address, port=settings.console_port, log_level=log_level,
                access_log=False, server_header=False)


def write_openapi(settings: Settings, target: Path) -> None:
    """Write the API's OpenAPI document to ``target`` (docs/openapi.json is made this way)."""
    document = create_app(settings, "-", "-").openapi()
    target.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":  # python -m autooptimize.console.server docs/openapi.json
    from autooptimize.config import get_settings

    write_openapi(get_settings(), Path(sys.argv[1]))
