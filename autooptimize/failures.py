"""What a failure means for the action that met it: the one table of error kinds.

* ``TRANSIENT``: a service (PostgreSQL, Redis, the catalog, the object store, Spark Connect) could not be
  reached or asked us to come back later; nothing was decided, so the work is tried again later and the
  command line exits 3.
* ``UNKNOWN``: a request that may change a table was sent and its answer was lost (a catalog's
  ``CommitStateUnknownException``, a read timeout, a connection dropped mid-request). The change may
  still land, even after the error was raised: nothing written for it is removed until the table's
  history settles the outcome (autooptimize.iceberg.commits, services/execution.py).
* ``PERMANENT``: everything else; the action fails with its error.

Errors are matched by type, through each class's module and name along its method resolution order, so
that an optional client (Hive's thrift, AWS's botocore) need not be installed for its errors to be
known, and a subclass is classified as its parent is.
"""

from __future__ import annotations

from enum import Enum


class FailureKind(str, Enum):
    TRANSIENT = "transient"
    UNKNOWN = "unknown"
    PERMANENT = "permanent"


#: ``module.QualifiedName`` of an error type → what it means; subclasses inherit the entry.
KINDS: dict[str, FailureKind] = {
    # the catalog said it may or may not have applied a commit
    "pyiceberg.exceptions.CommitStateUnknownException": FailureKind.UNKNOWN,
    "requests.exceptions.ReadTimeout": FailureKind.UNKNOWN,
    "urllib3.exceptions.ReadTimeoutError": FailureKind.UNKNOWN,
    "botocore.exceptions.ReadTimeoutError": FailureKind.UNKNOWN,
    "botocore.exceptions.ConnectionClosedError": FailureKind.UNKNOWN,
    # REST catalogs: try later
    "pyiceberg.exceptions.ServiceUnavailableError": FailureKind.TRANSIENT,
    "pyiceberg.exceptions.ServerError": FailureKind.TRANSIENT,
    "pyiceberg.exceptions.TooManyRequestsError": FailureKind.TRANSIENT,
    "pyiceberg.exceptions.AuthorizationExpiredError": FailureKind.TRANSIENT,
    "pyiceberg.exceptions.WaitingForLockException": FailureKind.TRANSIENT,  # Hive's table lock
    "requests.exceptions.ConnectionError": FailureKind.TRANSIENT,
    "requests.exceptions.Timeout": FailureKind.TRANSIENT,  # a connect timeout: nothing was sent
    "urllib3.exceptions.NewConnectionError": FailureKind.TRANSIENT,
    # Hive metastore (thrift)
    "thrift.transport.TTransport.TTransportException": FailureKind.TRANSIENT,
    # Glue and S3 (botocore)
    "botocore.exceptions.EndpointConnectionError": FailureKind.TRANSIENT,
    "botocore.exceptions.ConnectTimeoutError": FailureKind.TRANSIENT,
    # PostgreSQL (the service's own state, and SQL catalogs)
    "sqlalchemy.exc.OperationalError": FailureKind.TRANSIENT,
    "sqlalchemy.exc.InterfaceError": FailureKind.TRANSIENT,
    "sqlalchemy.exc.DisconnectionError": FailureKind.TRANSIENT,
    "sqlalchemy.exc.TimeoutError": FailureKind.TRANSIENT,  # the connection pool ran dry
    "psycopg2.OperationalError": FailureKind.TRANSIENT,
    "psycopg2.InterfaceError": FailureKind.TRANSIENT,
    # Redis and the Celery broker
    "redis.exceptions.ConnectionError": FailureKind.TRANSIENT,
    "redis.exceptions.TimeoutError": FailureKind.TRANSIENT,
    "kombu.exceptions.OperationalError": FailureKind.TRANSIENT,
    # Spark Connect: its gRPC channel, its client's retries
    "pyspark.errors.exceptions.connect.SparkConnectGrpcException": FailureKind.TRANSIENT,
    "pyspark.errors.exceptions.base.RetriesExceeded": FailureKind.TRANSIENT,
    "pyspark.errors.RetriesExceeded": FailureKind.TRANSIENT,
    "grpc.RpcError": FailureKind.TRANSIENT,
    # sockets
    "builtins.ConnectionError": FailureKind.TRANSIENT,
    "builtins.TimeoutError": FailureKind.TRANSIENT,
    "socket.timeout": FailureKind.TRANSIENT,
    "socket.gaierror": FailureKind.TRANSIENT,
}

#: Text of a Spark error that means its server went away (its class alone does not tell).
_SPARK_GONE = ("UNAVAILABLE", "Connection refused")


def _names(kind: type) -> list[str]:
    return [f"{k.__module__}.{k.__qualname__}" for k in kind.__mro__]


def classify(exc: BaseException) -> FailureKind:
    """What ``exc`` means (see the module docstring). Its ``__cause__`` chain is followed (and the context of
    a library's error), so a library's wrapper around a lost connection counts as the lost connection;
    an unknown outcome anywhere in the chain makes the whole unknown."""
    seen: set[int] = set()
    current: BaseException | None = exc
    found = FailureKind.PERMANENT
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = next((KINDS[n] for n in _names(type(current)) if n in KINDS), None)
        if kind is None and type(current).__module__.startswith("pyspark") and any(
                text in str(current) for text in _SPARK_GONE):
            kind = FailureKind.TRANSIENT
        if kind == FailureKind.UNKNOWN:
            return kind
        if kind == FailureKind.TRANSIENT:
            found = kind
        ours = type(current).__module__.startswith("autooptimize")
        current = current.__cause__ or (None if ours or current.__suppress_context__ else current.__context__)
    return found


def is_transient(exc: BaseException) -> bool:
    """Whether trying again later may succeed (transient, or an outcome that the retry settles)."""
    return classify(exc) != FailureKind.PERMANENT


def failure_text(exc: BaseException) -> str:
    """``Type: first line`` of an error, for messages (callers redact it)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
