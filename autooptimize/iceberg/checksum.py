"""The content checksum of a table as pyiceberg reads it (independent of Spark).

The checksum is the one content digest of autooptimize/engines/digest.py, ``rows:h1:h2``: equal to
what the Spark path measures on the same rows.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.table import Table

from autooptimize.engines.digest import arrow_digest


def arrow_checksum(data: pa.Table) -> str:
    """``rows:h1:h2`` of ``data`` (order-independent; nulls and column positions count)."""
    return arrow_digest(data).checksum


def table_checksum(table: Table) -> str:
    """Checksum of the table's current snapshot, read through pyiceberg."""
    table.refresh()
    return arrow_checksum(table.scan().to_arrow())
