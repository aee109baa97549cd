"""Celery app, routing, and thin tasks: ids in, call a service, map errors to retries."""
