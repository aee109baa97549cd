"""Buffered writes: landing small Parquet files (landing), the per-table rules and status (rules), the
watched folder (watch), and their consolidation into append snapshots (consolidate, batch_write,
batch_commit). The pure rule evaluation lives in autooptimize.domain.buffer_rules."""
