"""Catalog access. The catalog is configured the pyiceberg way (``.pyiceberg.yaml`` or
``PYICEBERG_CATALOG__<NAME>__…``); when ``AO_CATALOG`` names no configuration, the default is
pyiceberg's SqlCatalog on ``AO_DATABASE_URL`` with a file:// warehouse under ``AO_HOME``."""

from __future__ import annotations

import os
import re
import threading

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.utils.config import Config

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument, ServiceUnavailable, TableNotFound
from autooptimize.redact import redact

_IDENT_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")  # whole part (fullmatch: no trailing newline)
_catalogs: dict[tuple[int, str, str, str], Catalog] = {}
_lock = threading.Lock()


def parse_identifier(identifier: str) -> tuple[str, ...]:
    """Validate ``namespace.table`` (namespaces may nest: ``a.b.table``) and split it."""
    parts = tuple(identifier.split(".")) if isinstance(identifier, str) else ()
    if len(parts) < 2 or not all(_IDENT_PART.fullmatch(p) for p in parts):
        raise InvalidArgument(
            f"table {identifier!r} is not a valid identifier; use namespace.table with letters, "
            "digits, '_' or '-' in each part (e.g. analytics.events)"
        )
    return parts


def default_catalog_properties(settings: Settings) -> dict[str, str]:
    """The SqlCatalog properties used when AO_CATALOG has no pyiceberg configuration."""
    return {
        "type": "sql",
        "uri": settings.database_url,
        "warehouse": settings.warehouse_dir.as_uri(),
    }


def get_catalog(settings: Settings) -> Catalog:
    """The process's catalog (re-made after fork); raises ServiceUnavailable when unreachable."""
    key = (os.getpid(), settings.catalog, settings.database_url, str(settings.home_dir))
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is not None:
            return catalog
        try:
            configured = Config().get_catalog_config(settings.catalog)  # read now, not at pyiceberg's import
            if configured:
                catalog = load_catalog(settings.catalog, **configured)
            else:
                settings.warehouse_dir.mkdir(parents=True, exist_ok=True)
                catalog = load_catalog(settings.catalog, **default_catalog_properties(settings))
        except Exception as exc:  # pyiceberg raises many unrelated types for "cannot connect"
            raise ServiceUnavailable(
                f"cannot open catalog {settings.catalog!r} "
                f"(database {redact(settings.database_url)}): {type(exc).__name__}: "
                f"{redact(str(exc)).splitlines()[0] if str(exc) else ''}"
            ) from None
        _catalogs[key] = catalog
        return catalog


def load_table(settings: Settings, identifier: str) -> Table:
    """Load a table by ``namespace.table``; a missing one raises TableNotFound naming it."""
    parts = parse_identifier(identifier)
    catalog = get_catalog(settings)
    try:
        return catalog.load_table(parts)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise TableNotFound(
            f"table {identifier!r} does not exist in catalog {settings.catalog!r}; "
            "list tables with pyiceberg or check AO_CATALOG"
        ) from None
