"""pyiceberg adapter: catalog access, live files per partition, footers to DataFiles, the rewrite commit.

pyiceberg reads its configuration file when its catalog module is imported; it is checked here first, so
that a malformed file is a ConfigError naming it (and quoting none of its lines) rather than a traceback."""

from autooptimize.iceberg.pyiceberg_config import check_pyiceberg_config

check_pyiceberg_config()
