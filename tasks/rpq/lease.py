"""Leases: a dequeued item held by one consumer, the ticket an actor gets with it, and the keeper that
extends it while the work runs."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from autooptimize.errors import InvalidArgument, ServiceUnavailable
from tasks.rpq.item import QueueItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """A dequeued item held by one consumer until ``expires_at`` (seconds, Redis clock).

    ``deliveries`` counts how many times the item has been leased, 1 on its first delivery.
    """

    item: QueueItem
    token: str
    expires_at: float
    deliveries: int

    def to_json(self) -> str:
        """A form to hand to the actor (e.g. as a Celery task argument) so that it can ack, nack or extend."""
        return json.dumps(
            {"item": json.loads(self.item.to_json()), "token": self.token,
             "expires_at": self.expires_at, "deliveries": self.deliveries},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, payload: str | bytes) -> Lease:
        data = json.loads(payload)
        return cls(QueueItem(**data["item"]), data["token"], float(data["expires_at"]), int(data["deliveries"]))


@dataclass(frozen=True)
class LeaseTicket:
    """What an actor needs to keep, ack or nack its lease: the lease, its queue's namespace and term."""

    lease: Lease
    namespace: str
    lease_seconds: float

    def to_json(self) -> str:
        data = json.loads(self.lease.to_json())
        data.update(namespace=self.namespace, lease_seconds=self.lease_seconds)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, payload: str | bytes) -> LeaseTicket:
        try:
            data = json.loads(payload)
            ticket = cls(Lease.from_json(payload), str(data["namespace"]), float(data["lease_seconds"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"lease must be the JSON of a LeaseTicket, got {payload!r:.200} ({exc})") from None
        if not ticket.namespace or not ticket.lease_seconds > 0:
            raise InvalidArgument(f"lease needs a namespace and a positive lease_seconds, got {payload!r:.200}")
        return ticket


class Renews(Protocol):
    """What the keeper needs of a queue (the ReliablePriorityQueue)."""

    def extend(self, lease: Lease, seconds: float | None = None) -> Lease | None: ...


class LeaseKeeper:
    """Extends a lease every ``interval`` seconds on a thread while the work runs (a context manager).

    ``lost`` becomes True when the queue no longer knows the lease (it expired and was reclaimed, or Redis
    lost it): the item may then run elsewhere, which the action id makes harmless.
    """

    def __init__(self, queue: Renews, lease: Lease, *, seconds: float, interval: float) -> None:
        if not (interval > 0 and seconds > interval):
            raise InvalidArgument(f"need 0 < interval < seconds, got interval={interval}, seconds={seconds}")
        self._queue, self._lease, self._seconds, self._interval = queue, lease, seconds, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.item.action_id}", daemon=True)
        self.lost = False

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                renewed = self._queue.extend(self._lease, self._seconds)
            except ServiceUnavailable as exc:
                log.warning("could not extend the lease of %s: %s", self._lease.item.action_id, exc)
                continue
            if renewed is None:
                self.lost = True
                log.warning("lease of %s was lost; the dispatcher may send it again", self._lease.item.action_id)
                return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
