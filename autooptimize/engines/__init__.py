"""Engine-side building blocks shared by the Spark and pyarrow paths (no services, no entry points)."""
