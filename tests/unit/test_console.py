"""The console's pieces that need no service: the OpenAPI file is the app's, basic auth, credentials."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from autooptimize.config import Settings, load_settings
from autooptimize.console.app import create_app
from autooptimize.console.auth import BasicAuth, console_credentials
from autooptimize.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_docs_openapi_json_is_what_the_app_serves(tmp_path):
    served = create_app(Settings(home=tmp_path), "u", "p").openapi()
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(served)), (
        "docs/openapi.json is stale: python -m autooptimize.console.server docs/openapi.json")
    assert {"/api/tables", "/api/tables/{table}", "/api/actions", "/api/actions/{action_id}",
            "/api/actions/{action_id}/audit", "/api/queues"} <= set(committed["paths"])
    assert committed["components"]["securitySchemes"]["basic"]["scheme"] == "basic"


def _header(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


@pytest.mark.parametrize(("header", "ok"), [
    (_header("admin", "s3cret"), True),
    (_header("admin", "wrong"), False),
    (_header("root", "s3cret"), False),
    (_header("admin", ""), False),
    (b"Basic !!!notbase64", False),
    (b"Bearer abc", False),
    (None, False),
])
def test_basic_auth_accepts_only_the_configured_pair(header, ok):
    assert BasicAuth(None, "admin", "s3cret").allowed(header) is ok


def test_password_is_generated_once_into_ao_home_readable_by_the_owner_only(tmp_path):
    settings = Settings(home=tmp_path)
    user, password, path = console_credentials(settings)
    assert user == "admin" and len(password) >= 20 and path == tmp_path / "console-credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert console_credentials(settings)[:2] == (user, password)  # kept, not regenerated


def test_a_configured_password_is_used_and_nothing_is_written(tmp_path):
    user, password, path = console_credentials(Settings(home=tmp_path, console_password="pw", console_user="ops"))
    assert (user, password, path) == ("ops", "pw", None)
    assert not (tmp_path / "console-credentials").exists()


@pytest.mark.parametrize(("name", "value"), [("AO_CONSOLE_PASSWORD", ""), ("AO_CONSOLE_PASSWORD", "  "),
                                             ("AO_CONSOLE_USER", ""), ("AO_CONSOLE_USER", "a:b")])
def test_an_empty_password_or_user_is_refused(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_console_defaults(monkeypatch):
    for name in ("AO_CONSOLE_ADDRESS", "AO_CONSOLE_PORT", "AO_CONSOLE_USER", "AO_CONSOLE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    s = Settings()
    assert (s.console_address, s.console_port, s.console_user, s.console_password) == ("127.0.0.1", 8765, "admin", None)
