"""Tenants: who a table belongs to for fair sharing, their weights and their caps on concurrent actions.

A tenant sits between the priority class and the table: inside a class, tenants share by weight and a
tenant's tables share its turn. A table's tenant is its tuning's ``tenant`` or, when unset, the first
level of its namespace (``sales.eu.orders`` -> ``sales``). Pure values and parsers, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from autooptimize.errors import InvalidArgument

__all__ = ["TENANT_RULE", "TenantCaps", "check_tenant", "default_tenant", "parse_tenant_caps",
           "parse_tenant_weights", "tenant_of_table"]

#: What a tenant name may be: letters, digits, ``_`` and ``-``, 1 to 63 characters, not starting with ``-``.
TENANT_RULE = r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,62}"
_TENANT = re.compile(TENANT_RULE)


def check_tenant(name: str, value: object) -> str:
    """``value`` when it is a valid tenant name; InvalidArgument naming ``name`` and the rule otherwise."""
    if not isinstance(value, str) or not _TENANT.fullmatch(value):
        raise InvalidArgument(f"{name} must be 1-63 letters, digits, '_' or '-' (not starting with '-'), "
                              f"such as sales or team_a; got {value!r}")
    return value


def default_tenant(identifier: str) -> str:
    """The tenant of a table whose tuning names none: the first level of its namespace."""
    return identifier.split(".", 1)[0]


def tenant_of_table(identifier: str, tenant: str | None) -> str:
    """The tenant a table is shared under: its tuning's ``tenant``, else :func:`default_tenant`."""
    return tenant if tenant else default_tenant(identifier)


def _entries(value: str, example: str) -> list[tuple[str | None, str]]:
    """``a=1,b=2`` (and bare values) as (name or None, text) pairs, names checked and given once."""
    out: list[tuple[str | None, str]] = []
    seen: set[str | None] = set()
    for part in (p.strip() for p in value.split(",") if p.strip()):
        name, sep, number = (x.strip() for x in part.partition("="))
        key = name if sep else None
        if sep and not _TENANT.fullmatch(name):
            raise InvalidArgument(f"{name!r} is not a tenant name (letters, digits, '_' or '-'); "
                                  f"use entries like {example}")
        if key in seen:
            raise InvalidArgument(f"{'tenant ' + repr(key) if key else 'the default'} is given twice; "
                                  f"use entries like {example}")
        seen.add(key)
        out.append((key, number if sep else name))
    return out


def parse_tenant_weights(value: str) -> dict[str, float]:
    """``a=1,b=2,c=5`` as tenant weights (positive numbers); tenants not named weigh 1. Empty: none named."""
    weights: dict[str, float] = {}
    for name, text in _entries(value, "a=1,b=2,c=5"):
        try:
            weight = float(text)
        except ValueError:
            weight = math.nan
        if name is None or not (math.isfinite(weight) and weight > 0):
            raise InvalidArgument(f"{(name + '=' + text) if name else text!r} is not "
                                  "tenant=weight with a positive weight; use entries like a=1,b=2,c=5")
        weights[name] = weight
    return weights


@dataclass(frozen=True)
class TenantCaps:
    """Most leases in flight per tenant: ``named`` per tenant, ``default`` for the others (None: no cap)."""

    default: int | None = None
    named: Mapping[str, int] = field(default_factory=dict)

    def cap(self, tenant: str) -> int | None:
        return self.named.get(tenant, self.default)

    @property
    def unlimited(self) -> bool:
        return self.default is None and not self.named


def parse_tenant_caps(value: str) -> TenantCaps:
    """``4`` (every tenant), ``a=2,b=3`` (those tenants) or ``4,a=2`` (a: 2, every other: 4); empty: no cap."""
    default: int | None = None
    named: dict[str, int] = {}
    for name, text in _entries(value, "4 or a=2,b=3 or 4,a=2"):
        if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            shown = f"{name}={text}" if name else text
            raise InvalidArgument(f"{shown!r} is not a positive whole number of "
                                  "actions; use 4 (every tenant), a=2,b=3 (those tenants) or 4,a=2")
        if name is None:
            default = int(text)
        else:
            named[name] = int(text)
    return TenantCaps(default, named)
