"""One error tree: every error autooptimize raises derives from :class:`AutoOptimizeError`.

An error raised in a task of an action's Spark job travels back to the worker pickled
(spark_actors/action_job.py). Pickle rebuilds an exception by calling its class with ``args`` (the
message only), which fails for an error whose ``__init__`` takes more; every error here is rebuilt
without ``__init__`` instead, from its ``args`` and its fields.
"""

from __future__ import annotations


def _rebuilt(cls: type[BaseException], args: tuple[object, ...]) -> BaseException:
    """An error of ``cls`` with ``args``, its ``__init__`` not called (pickle then restores its fields)."""
    return cls.__new__(cls, *args)


class AutoOptimizeError(Exception):
    """Root of every error raised by autooptimize."""

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (type(self), self.args), self.__dict__


class ConfigError(AutoOptimizeError):
    """A setting is missing or invalid; the message names the setting and what would be valid."""


class InvalidArgument(AutoOptimizeError, ValueError):
    """A caller passed a value that is not valid; the message names it and what would be valid."""


class TableNotFound(AutoOptimizeError):
    """The named table does not exist in the configured catalog."""


class ServiceUnavailable(AutoOptimizeError):
    """PostgreSQL, Redis, the catalog or the Spark Connect server cannot be reached."""


class ActionNotFound(AutoOptimizeError):
    """No action has the given id."""


class ActionRefused(AutoOptimizeError):
    """The action cannot run on this partition as it is now (the message says why); nothing was changed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TableRefused(ActionRefused):
    """The table as a whole is something this version cannot rewrite faithfully (an unknown format version,
    delete file kind or type): it is left untouched, and the reason names what was found."""


class ConflictAbort(AutoOptimizeError):
    """A concurrent change made the action's output invalid (e.g. an input file was deleted)."""


class VerificationFailed(AutoOptimizeError):
    """The rewritten files do not hold exactly the rows of the inputs; nothing was committed."""


class Retry(AutoOptimizeError):
    """Control flow: the action should be tried again later (a transient failure); not a failure."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class ActionBusy(Retry):
    """Another attempt holds the action's lease and is alive; this delivery must not touch its work."""

    def __init__(self, message: str, delay: float, holder: str) -> None:
        super().__init__(message, delay=delay)
        self.holder = holder


class LeaseLost(Retry):
    """This process no longer holds the lease (or lock) it worked under: it stopped before committing,
    cleaning up or recording anything more; whoever holds it now decides."""


class AttemptTimedOut(Retry):
    """An attempt ran past AO_ACTION_TIMEOUT_SECONDS: it stops, removes its uncommitted output and is
    tried again (or failed, past AO_MAX_ATTEMPTS)."""


class FileRejected(AutoOptimizeError):
    """A file offered to a table's buffer does not fit it (the message says why); nothing was landed."""


class WaitTimeout(AutoOptimizeError, TimeoutError):
    """An action was not finished when the caller's wait ran out; it may still finish later."""


class CommitOutcomeUnknown(AutoOptimizeError):
    """A commit was sent and its answer lost (the catalog said CommitStateUnknown, or the connection
    dropped mid-request): the snapshot may still land, even later. Nothing written for it may be removed
    until the table's history settles the outcome; the action is tried again and settles it there.

    ``snapshot_id`` is the snapshot that was sent, ``parent_id`` the head it was sent on top of: once the
    branch has moved past ``parent_id`` without it, it can never land (the catalog swaps only on that
    parent)."""

    def __init__(self, message: str, snapshot_id: int, parent_id: int | None) -> None:
        super().__init__(message)
        self.snapshot_id, self.parent_id = snapshot_id, parent_id
