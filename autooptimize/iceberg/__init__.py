"""pyiceberg adapter: catalog access, live files per partition, footers to DataFiles, the rewrite commit."""
