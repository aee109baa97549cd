"""Alembic environment. The URL comes from the caller (``autooptimize db upgrade``) or AO_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

import autooptimize.storage.budget_models  # noqa: F401  (registers the budget record)
import autooptimize.storage.buffer_models  # noqa: F401  (registers the buffer tables)
import autooptimize.storage.listener_models  # noqa: F401  (registers the sharded listeners' tables)
import autooptimize.storage.observe_models  # noqa: F401  (registers the observe tables)
from autooptimize.storage.models import Base

config = context.config
target_metadata = Base.metadata
VERSION_TABLE = "ao_alembic_version"


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # The catalog (pyiceberg SqlCatalog) may keep its tables in the same database: never touch them.
    if type_ == "table" and name is not None and not name.startswith("ao_"):
        return False
    return True


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from autooptimize.config import get_settings

    return get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        version_table=VERSION_TABLE,
        include_object=_include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    section = config.get_section(config.config_ini_section) or {}
    section["sqlalchemy.url"] = _url()
    connectable = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            version_table=VERSION_TABLE,
            include_object=_include_object,
        )
        with context.begin_transaction():
            # Two `db upgrade` at once (e.g. several containers starting) must not race.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(764251)")
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
