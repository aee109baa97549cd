"""What consolidation of buffered files returns on either path (the Spark job, spark_actors/consolidate.py,
and the pyarrow path, arrow/consolidate.py): the files written per partition and the input's digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autooptimize.engines.digest import ContentDigest


@dataclass(frozen=True)
class PartitionOutput:
    values: tuple[Any, ...]  # the partition record's values (Iceberg's internal representation)
    paths: tuple[str, ...]


@dataclass(frozen=True)
class ConsolidateOutput:
    partitions: tuple[PartitionOutput, ...]
    digest_in: ContentDigest  # of the cast input, observed while writing (the caller reads the outputs back)
    required_nulls: int  # rows with a null in a required column (must be 0 to commit)
