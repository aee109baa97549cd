"""Sorting a group on the pyarrow path: the rows in sort order, cut into files of disjoint ranges.

The same contract as the Spark sort (spark_actors/rewrite.py ``sort=``): every output is sorted on
all sort columns, and the outputs hold disjoint ranges of the first one (equal values never straddle
two files), so file statistics prune. The group is held in memory, which is why the engine choice
(services/rewrite/engine.py) sends only groups of a bounded size here. pyarrow has one null placement
per key from pyarrow 25 on; before that one for all keys, and a sort order that mixes NULLS FIRST and
NULLS LAST stays on Spark (:func:`sortable`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SortKey = tuple[str, bool, bool]  # (column, descending, nulls first), as the Spark rewrite takes them
PER_KEY_NULLS = int(pa.__version__.split(".")[0]) >= 25  # (name, order, null placement) sort keys


def sortable(schema: pa.Schema | Sequence[str], keys: Sequence[SortKey] | None) -> bool:
    """Whether the pyarrow path can sort by ``keys``: top-level columns (one null placement for all
    before pyarrow 25)."""
    if not keys:
        return False
    names = set(schema.names if isinstance(schema, pa.Schema) else schema)
    return all(k[0] in names for k in keys) and (PER_KEY_NULLS or len({k[2] for k in keys}) == 1)


def sorted_slices(data: pa.Table, keys: Sequence[SortKey], files_out: int) -> list[pa.Table]:
    """``data`` sorted by ``keys`` and cut into about ``files_out`` slices, each cut moved forward to
    where the first key's value changes."""
    def direction(descending: bool) -> str:
        return "descending" if descending else "ascending"

    if not data.num_rows:
        ordered = data
    elif PER_KEY_NULLS:
        ordered = data.sort_by([(name, direction(desc), "at_start" if first else "at_end")
                                for name, desc, first in keys])
    else:
        ordered = data.sort_by([(name, direction(desc)) for name, desc, _ in keys],
                               null_placement="at_start" if keys[0][2] else "at_end")
    rows = ordered.num_rows
    if files_out <= 1 or rows <= 1:
        return [ordered]
    first = ordered.column(keys[0][0]).combine_chunks()
    valid = first.is_valid().to_numpy(zero_copy_only=False)
    differs = pc.fill_null(pc.not_equal(first[1:], first[:-1]), False).to_numpy(zero_copy_only=False)
    # row i (≥ 1) starts a new value: the value differs, or exactly one of the two rows is null
    starts = np.flatnonzero(differs | (valid[1:] != valid[:-1])) + 1
    cuts: list[int] = []
    for k in range(1, files_out):
        wanted = (rows * k) // files_out
        at = np.searchsorted(starts, max(wanted, cuts[-1] + 1 if cuts else 1))
        if at < len(starts):
            cuts.append(int(starts[at]))
    bounds = [0, *sorted(set(cuts)), rows]
    return [ordered.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
