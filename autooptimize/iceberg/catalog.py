"""Catalog access. A catalog is configured the pyiceberg way: an entry under ``catalog:`` in
``.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__…`` variables, for any type pyiceberg knows (REST,
Glue, Hive, SQL, …). Only the built-in name, ``autooptimize`` (AO_CATALOG's default), may go without
one: it is then pyiceberg's SqlCatalog on ``AO_DATABASE_URL`` with a file:// warehouse under
``AO_HOME``. Any other name without a configuration raises :class:`ConfigError` saying what to set.

Messages name a catalog by its type and URI, with the URI's password, query and fragment dropped and
the values of secret properties masked; never by the service's own database URL."""

from __future__ import annotations

import os
import re
import threading
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.catalog import Catalog, infer_catalog_type, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, NotInstalledError
from pyiceberg.exceptions import ValidationError as PyIcebergValidationError
from pyiceberg.table import Table
from pyiceberg.utils.config import Config

from autooptimize.config import Settings
from autooptimize.errors import ConfigError, InvalidArgument, ServiceUnavailable, TableNotFound, TableRefused
from autooptimize.failures import is_transient
from autooptimize.redact import redact

BUILTIN_CATALOG = "autooptimize"  # AO_CATALOG's default: the one name that needs no configuration
_IDENT_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")  # whole part (fullmatch: no trailing newline)
# properties whose values must never be shown (pyiceberg's credential, token, s3.secret-access-key, …)
_SECRET_PROPERTY = re.compile(r"secret|password|token|credential|session", re.IGNORECASE)
# the extra of ours that installs each catalog type's client
_EXTRA = {"rest": "rest", "glue": "glue", "hive": "hive", "sql": "sql"}
_catalogs: dict[tuple[int, str, str, str], Catalog] = {}
_descriptions: dict[tuple[int, str, str, str], str] = {}
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
    """The built-in catalog's properties: pyiceberg's SqlCatalog in AO_DATABASE_URL, warehouse in AO_HOME."""
    return {
        "type": "sql",
        "uri": settings.database_url,
        "warehouse": settings.warehouse_dir.as_uri(),
    }


def catalog_properties(settings: Settings) -> dict[str, Any]:
    """The properties AO_CATALOG is opened with: its pyiceberg configuration, read now; for the built-in
    name, :func:`default_catalog_properties` with whatever is configured for it on top (FileIO
    properties such as ``s3.endpoint`` for tables placed on a store, ``demo --warehouse``). Raises
    ConfigError for any other name without a configuration, or when pyiceberg's configuration cannot be
    read."""
    try:
        config = Config()
        configured = config.get_catalog_config(settings.catalog)
        known = config.get_known_catalogs()
    except Exception as exc:  # strictyaml's and pyiceberg's own complaints about the file
        raise ConfigError(f"cannot read pyiceberg's configuration (.pyiceberg.yaml or PYICEBERG_* variables): "
                          f"{type(exc).__name__}: {redact(str(exc)).splitlines()[0] if str(exc) else ''}") from None
    if settings.catalog == BUILTIN_CATALOG:  # what is configured for it (say, s3.endpoint) adds to the defaults
        return {**default_catalog_properties(settings), **dict(configured or {})}
    if configured:
        return dict(configured)
    raise ConfigError(_unconfigured(settings.catalog, known))


def _unconfigured(name: str, known: list[str]) -> str:
    entry = name.lower()
    variable = f"PYICEBERG_CATALOG__{name.upper().replace('-', '_')}__"
    where = (f"no {variable}* variable is set. Configure it in either place, e.g. {variable}URI=http://rest:8181 "
             f"and {variable}WAREHOUSE=s3://warehouse/ for a REST catalog")
    if "_" in name:  # pyiceberg reads '_' in a variable's name as '-': only the file can name this catalog
        where = (f"no variable can name it (pyiceberg reads '_' in PYICEBERG_* names as '-'). Configure it in "
                 f"the file, e.g. 'catalog: {{{entry}: {{uri: http://rest:8181, warehouse: s3://warehouse/}}}}' "
                 "for a REST catalog")
    message = (f"AO_CATALOG={name!r} names a catalog with no configuration: .pyiceberg.yaml (looked for in "
               f"$PYICEBERG_HOME, the home directory and the working directory) has no {entry!r} under 'catalog:', "
               f"and {where} (docs/catalogs.md shows REST, Glue, Hive and SQL), or unset AO_CATALOG to use "
               f"the built-in SQL catalog {BUILTIN_CATALOG!r} in AO_DATABASE_URL.")
    return message + (f" Configured catalogs: {', '.join(sorted(known))}." if known else "")


def safe_uri(uri: str) -> str:
    """``uri`` fit to show: each comma-separated URI (Hive takes several) without its password, query
    and fragment, any of which may carry a credential."""
    shown = []
    for one in uri.split(","):
        one = re.split(r"[?#]", one.strip(), maxsplit=1)[0]
        scheme, sep, rest = one.partition("://")
        userinfo, at, host = rest.rpartition("@")
        if sep and at:
            user = userinfo.split(":", 1)[0]
            one = f"{scheme}://{user}@{host}" if user and "/" not in user else f"{scheme}://{host}"
        shown.append(one)
    return ",".join(shown)


def catalog_type(name: str, properties: dict[str, Any]) -> str:
    """The catalog's type as pyiceberg decides it (``type``, else from the URI: http → rest, thrift → hive,
    postgresql/sqlite → sql); ``py-catalog-impl`` or ``""`` when it cannot tell."""
    kind = str(properties.get("type") or properties.get("py-catalog-impl") or "").lower()
    if not kind and properties.get("uri"):
        try:
            inferred = infer_catalog_type(name, properties)
        except ValueError:
            inferred = None
        kind = inferred.value if inferred is not None else ""
    return kind


def describe_catalog(name: str, properties: dict[str, Any]) -> str:
    """``'lake' (rest catalog at http://rest:8181)``: how messages name a catalog."""
    uri = str(properties.get("uri") or "")
    where = f" at {safe_uri(uri)}" if uri else ""
    return f"{name!r} ({catalog_type(name, properties) or 'unknown type'} catalog{where})"


def _scrub(text: str, properties: dict[str, Any]) -> str:
    """``text`` (a library's message) with the catalog's secrets masked: secret properties' values, the
    URI's password, and any URL's password."""
    secrets = [str(v) for k, v in properties.items() if _SECRET_PROPERTY.search(str(k)) and v]
    uri = str(properties.get("uri") or "")
    for one in uri.split(","):
        userinfo, at, _ = one.partition("://")[2].rpartition("@")
        if at and ":" in userinfo:
            secrets.append(userinfo.split(":", 1)[1])
    if uri:
        text = text.replace(uri, safe_uri(uri))
    for secret in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, "***")
    return redact(text)


def _first_line(exc: BaseException, properties: dict[str, Any]) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {_scrub(text.splitlines()[0], properties)}" if text else type(exc).__name__


def _open(settings: Settings, properties: dict[str, Any]) -> Catalog:
    described = describe_catalog(settings.catalog, properties)
    if settings.catalog == BUILTIN_CATALOG and properties.get("warehouse") == settings.warehouse_dir.as_uri():
        settings.warehouse_dir.mkdir(parents=True, exist_ok=True)
    try:
        # every property passed explicitly: load_catalog alone would read the configuration pyiceberg
        # cached at import, not the one read above
        return load_catalog(settings.catalog, **properties)
    except (NotInstalledError, ImportError) as exc:
        extra = _EXTRA.get(catalog_type(settings.catalog, properties))
        hint = (f"install autooptimize's {extra!r} extra (pip install 'autooptimize[{extra}]', or "
                f"pip install -e '.[{extra}]' in a checkout)") if extra else str(exc)
        raise ConfigError(f"catalog {described} needs a client that is not installed: {hint}") from None
    except ValueError as exc:  # pyiceberg's word for a configuration it cannot use (no URI, unknown type, …)
        raise ConfigError(f"catalog {described} is not configured correctly: {_first_line(exc, properties)}") from None
    except Exception as exc:  # pyiceberg raises many unrelated types: "cannot connect" is a retry, the rest bad input
        if is_transient(exc):
            raise ServiceUnavailable(f"cannot open catalog {described}: {_first_line(exc, properties)}") from None
        raise ConfigError(f"catalog {described} cannot be opened as configured: {_first_line(exc, properties)}") from None


def _key(settings: Settings) -> tuple[int, str, str, str]:
    return os.getpid(), settings.catalog, settings.database_url, str(settings.home_dir)


def get_catalog(settings: Settings) -> Catalog:
    """The process's catalog, opened once per process (re-made after fork) from the configuration read
    then. Raises ConfigError when AO_CATALOG is not configured (or needs a client that is not
    installed) and ServiceUnavailable when the catalog is unreachable."""
    key = _key(settings)
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is not None:
            return catalog
        properties = catalog_properties(settings)
        catalog = _open(settings, properties)
        _catalogs[key] = catalog
        _descriptions[key] = describe_catalog(settings.catalog, properties)
        return catalog


def _described(settings: Settings) -> str:
    return _descriptions.get(_key(settings), repr(settings.catalog))


def load_table(settings: Settings, identifier: str) -> Table:
    """Load a table by ``namespace.table``; a missing one raises TableNotFound naming it, a catalog that
    stopped answering ServiceUnavailable naming the catalog."""
    parts = parse_identifier(identifier)
    catalog = get_catalog(settings)
    try:
        return catalog.load_table(parts)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise TableNotFound(
            f"table {identifier!r} does not exist in catalog {_described(settings)}; "
            "list tables with pyiceberg or check AO_CATALOG"
        ) from None
    except (PyIcebergValidationError, PydanticValidationError) as exc:
        raise unreadable_metadata(identifier, exc) from None
    except Exception as exc:
        if not is_transient(exc):
            raise
        raise ServiceUnavailable(f"catalog {_described(settings)} did not answer loading {identifier!r}: "
                                 f"{type(exc).__name__}") from None


_FORMAT_TAG = re.compile(r"Input tag '([^']*)' found using 'format_version'")


def unreadable_metadata(identifier: str, exc: BaseException) -> TableRefused:
    """Why the table's metadata cannot be read: a format version this version does not know (pyiceberg
    0.12 reads 1 to 3), or the validation error's first line."""
    text = str(exc)
    version = _FORMAT_TAG.search(text)
    if version:
        return TableRefused("unsupported_format_version",
                            f"table {identifier!r} is format version {version.group(1)}; autooptimize reads "
                            "format versions 1 to 3 and leaves this table untouched")
    first = next((line.strip() for line in text.splitlines()[1:] if line.strip()), text.strip())
    return TableRefused("unreadable_metadata", f"the metadata of table {identifier!r} cannot be read: {first[:300]}")
