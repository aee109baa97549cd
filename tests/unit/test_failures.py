"""The one table of failure kinds (autooptimize/failures.py): by type, through subclasses and causes."""

from __future__ import annotations

import pytest
import requests
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ServiceUnavailableError,
)
from sqlalchemy.exc import OperationalError
from thrift.transport.TTransport import TTransportException

from autooptimize.errors import VerificationFailed
from autooptimize.failures import FailureKind, classify, is_transient


@pytest.mark.parametrize(("error", "kind"), [
    (CommitStateUnknownException("504"), FailureKind.UNKNOWN),
    (requests.exceptions.ReadTimeout("read timed out"), FailureKind.UNKNOWN),
    (ServiceUnavailableError("503"), FailureKind.TRANSIENT),
    (TTransportException(message="Could not connect"), FailureKind.TRANSIENT),
    (requests.exceptions.ConnectionError("refused"), FailureKind.TRANSIENT),
    (requests.exceptions.ConnectTimeout("connect timed out"), FailureKind.TRANSIENT),
    (OperationalError("SELECT 1", {}, Exception("server closed the connection")), FailureKind.TRANSIENT),
    (ConnectionResetError("reset"), FailureKind.TRANSIENT),
    (CommitFailedException("conflict"), FailureKind.PERMANENT),  # the commit loop retries it itself
    (NoSuchTableError("gone"), FailureKind.PERMANENT),
    (ValueError("bad"), FailureKind.PERMANENT),
    (VerificationFailed("rows differ"), FailureKind.PERMANENT),
])
def test_each_kind_by_type(error, kind):
    assert classify(error) == kind
    assert is_transient(error) == (kind != FailureKind.PERMANENT)


def test_a_wrapper_counts_as_what_it_wraps_and_unknown_wins():
    try:
        try:
            raise requests.exceptions.ReadTimeout("read timed out")
        except requests.exceptions.ReadTimeout as inner:
            raise RuntimeError("commit failed") from inner
    except RuntimeError as outer:
        assert classify(outer) == FailureKind.UNKNOWN
    try:
        try:
            raise TTransportException(message="gone")
        except TTransportException:
            raise KeyError("while handling it")  # noqa: B904 - the implicit context is the point
    except KeyError as outer:
        assert classify(outer) == FailureKind.TRANSIENT


def test_our_own_errors_do_not_inherit_their_context():
    try:
        try:
            raise ConnectionError("lost")
        except ConnectionError:
            raise VerificationFailed("rows differ")  # noqa: B904
    except VerificationFailed as exc:
        assert classify(exc) == FailureKind.PERMANENT
