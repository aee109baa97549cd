"""A partition's identity inside the service: its spec id and its values in Iceberg's representation.

Iceberg keeps a partition as a tuple of transform results: ints for year/month/day/hour/bucket (years,
months, days or hours since 1970), the source's value for identity and truncate, null for void. The
service carries exactly that, as JSON scalars, and never round-trips through human text: the human
form (``ts_hour=2024-06-01-12``) is made and parsed only at the edges (CLI, API, status, explain).

``PartitionRef.key`` is the canonical JSON text of the values: what PostgreSQL stores and what every
map inside the service is keyed by. The unpartitioned "partition" has the key ``""``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from autooptimize.errors import InvalidArgument

#: What a value may be once encoded: decimals, uuids and binary travel as tagged strings (see below).
JsonScalar = None | bool | int | float | str


@dataclass(frozen=True)
class PartitionRef:
    """One partition of one spec: ``values`` are JSON scalars in the spec's field order."""

    spec_id: int
    values: tuple[JsonScalar, ...]

    @property
    def key(self) -> str:
        return encode_key(self.values)

    @classmethod
    def of_key(cls, spec_id: int, key: str) -> PartitionRef:
        return cls(spec_id, decode_key(key))


def encode_key(values: tuple[JsonScalar, ...] | list[JsonScalar]) -> str:
    """Canonical JSON text of partition values ("" when there are none)."""
    if not values:
        return ""
    for value in values:
        if value is not None and not isinstance(value, bool | int | float | str):
            raise InvalidArgument(f"partition value {value!r} is not a JSON scalar")
    return json.dumps(list(values), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def decode_key(key: str) -> tuple[JsonScalar, ...]:
    """The values of a key made by :func:`encode_key`; InvalidArgument naming the key otherwise."""
    if key == "":
        return ()
    try:
        values = json.loads(key)
    except (TypeError, ValueError):
        raise InvalidArgument(f"partition key {key!r} is not a JSON list of values") from None
    if not isinstance(values, list) or not all(v is None or isinstance(v, bool | int | float | str) for v in values):
        raise InvalidArgument(f"partition key {key!r} is not a JSON list of scalar values")
    return tuple(values)


# --- the human form ---------------------------------------------------------------------------------

_NULL = "null"
# Characters that would split the expression or the path, and control characters, escaped as %XX.
_SEPARATORS = frozenset("%,/=")


def _escape_char(c: str) -> str:
    return f"%{ord(c):02X}" if c in _SEPARATORS or ord(c) < 32 or ord(c) == 127 else c


def escape_human(text: str) -> str:
    """A human value as it appears in ``field=value``: separators escaped, the word null kept for null."""
    escaped = "".join(_escape_char(c) for c in text)
    return "%6Eull" if escaped == _NULL else escaped  # the string "null" is not the null value


def unescape_human(text: str) -> str | None:
    """Inverse of :func:`escape_human`: None for the bare word null."""
    if text == _NULL:
        return None
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "%":
            code = text[i + 1:i + 3]
            try:
                out.append(chr(int(code, 16)))
            except ValueError:
                raise InvalidArgument(f"partition value {text!r} has a bad escape %{code}; "
                                      "escape ',', '/', '=' and '%' as %2C, %2F, %3D and %25") from None
            i += 3
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def format_human(pairs: list[tuple[str, str | None]]) -> str:
    """``name=value/name2=value2`` from field names and human values (None for null)."""
    return "/".join(f"{name}={_NULL if value is None else escape_human(value)}" for name, value in pairs)


def split_human(expression: Any, names: list[str]) -> dict[str, str | None]:
    """Split ``name=value`` pairs (separated by ``/`` or ``,``) into unescaped human values per field.

    Raises InvalidArgument naming the expression and the valid fields unless it names every field of
    ``names`` exactly once.
    """
    form = ",".join(f"{n}=value" for n in names)
    if not isinstance(expression, str) or not expression.strip() or any(c in expression for c in "\n\r\x00"):
        raise InvalidArgument(f"partition expression {expression!r} is empty or not one line; use {form}")
    pairs: dict[str, str | None] = {}
    for item in expression.replace("/", ",").split(","):
        if "=" not in item:
            raise InvalidArgument(f"partition expression {expression!r} is malformed at {item!r}; use {form}")
        name, raw = item.split("=", 1)
        name = name.strip()
        if name not in names:
            raise InvalidArgument(f"partition field {name!r} is not in the partition spec; valid fields: "
                                  f"{', '.join(names)}")
        if name in pairs:
            raise InvalidArgument(f"partition field {name!r} is given twice in {expression!r}")
        pairs[name] = unescape_human(raw)
    missing = [n for n in names if n not in pairs]
    if missing:
        raise InvalidArgument(f"partition expression {expression!r} misses field(s) {', '.join(missing)}; "
                              f"a partition is {form}")
    return {n: pairs[n] for n in names}
