"""The end of a benchmark's throw-away PostgreSQL database: every pooled connection of this process closed
(ours and the SQL catalogs'), then the database dropped, even while a killed service still holds one."""

from __future__ import annotations

from sqlalchemy import create_engine

from autooptimize.iceberg.catalog import _catalogs
from autooptimize.storage.db import _engines

ADMIN_URL = "postgresql+psycopg2://postgres@localhost:5432/postgres"


def drop_scratch_database(db_name: str) -> None:
    for engine in _engines.values():
        engine.dispose()
    for catalog in _catalogs.values():
        catalog_engine = getattr(catalog, "engine", None)
        if catalog_engine is not None:
            catalog_engine.dispose()
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
    admin.dispose()
