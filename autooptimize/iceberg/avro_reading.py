"""Avro metadata files (manifests, manifest lists) read with their reader trees built once per schema.

pyiceberg's ``AvroFile`` parses each file's schema from its header and resolves a reader tree for it on
every file it opens. The manifests of one table share a handful of schemas (one per partition spec and
content), yet each of them paid that again: on a table of 125 manifests it was three quarters of
reading them (``python -m benchmarks.merge``, planning). :class:`CachedAvroFile` is ``AvroFile`` with the
header's reader, each distinct schema and its reader tree kept per process; the blocks are read by
``AvroFile`` itself. pyiceberg's readers hold no state between records (each record is a new struct),
so one tree serves every file of its schema, on any thread.
"""

from __future__ import annotations

import threading
from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import META_SCHEMA, AvroFile, AvroFileHeader
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader, resolve_reader
from pyiceberg.schema import Schema

#: What pyiceberg's ``AvroFile`` reads a file's header with (the same for every Avro file).
_HEADER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})
#: (header schema text, read schema, read types, read enums) → (file schema, reader tree); the read schema is
#: held in the value so that its id is never reused while its entry lives
_trees: dict[tuple[Any, ...], tuple[Schema, Reader, Any]] = {}
_lock = threading.Lock()
MAX_TREES = 256


class CachedAvroFile(AvroFile[Any]):
    """``AvroFile`` whose header reader and schema-resolved reader tree are built once per schema."""

    def __enter__(self) -> CachedAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = _HEADER.read(self.decoder)
        text = self.header.meta.get("avro.schema")
        key = (text, id(self.read_schema), tuple(self.read_types.items()), tuple(self.read_enums.items()))
        with _lock:
            found = _trees.get(key) if text is not None else None
        if found is None:
            schema = self.header.get_schema()  # raises for a file without a schema, as AvroFile does
            reader = resolve_reader(schema, self.read_schema or schema, self.read_types, self.read_enums)
            found = (schema, reader, self.read_schema)
            with _lock:
                if len(_trees) >= MAX_TREES:
                    _trees.clear()
                _trees[key] = found
        self.schema, self.reader = found[0], found[1]
        if not self.read_schema:
            self.read_schema = self.schema
        return self
