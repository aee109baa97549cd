"""An order-independent content checksum of a table as pyiceberg reads it (independent of Spark)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyiceberg.table import Table


def arrow_checksum(data: pa.Table) -> str:
    """``rows:hash`` where hash is the sum mod 2**64 of a 64-bit hash of every row."""
    if data.num_rows == 0:
        return "0:0"
    frame = data.to_pandas()
    hashes = pd.util.hash_pandas_object(frame, index=False)
    total = int(hashes.to_numpy().sum(dtype="uint64"))  # wraps mod 2**64: order-independent
    return f"{data.num_rows}:{total:016x}"


def table_checksum(table: Table) -> str:
    """Checksum of the table's current snapshot, read through pyiceberg."""
    table.refresh()
    return arrow_checksum(table.scan().to_arrow())
