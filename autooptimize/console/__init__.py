"""The web console and ``/metrics``: an entry point beside the CLI (``autooptimize console``; ``autooptimize
up`` starts it). Pages and a JSON API under ``/api/`` over the service's read model, Prometheus metrics
read from PostgreSQL and Redis at scrape time, all behind basic auth."""
