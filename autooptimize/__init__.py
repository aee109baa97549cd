"""autooptimize: keeps Apache Iceberg tables fast and cheap by fixing their file layout as data lands."""

__version__ = "0.1.0"
