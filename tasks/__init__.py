"""How work reaches the actors: the Celery app and its tasks, routing, the one sending module, the
reliable priority queue, and retry backoff. Never imports ``scheduler`` (which sits above it)."""
