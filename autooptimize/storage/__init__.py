"""PostgreSQL state: SQLAlchemy models, engine helpers and repositories (which never commit)."""
