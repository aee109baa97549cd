"""Queue and task names. One control queue for decisions, a buffer queue, and one actor queue per priority
class; one Celery task per action kind."""

from __future__ import annotations

from kombu import Queue

CONTROL_QUEUE = "ao.control"
BUFFER_QUEUE = "ao.buffer"  # consolidation of buffered writes (Spark work, apart from decisions)
TASK_PREFIX = "autooptimize."


def actor_queue(priority_class: str) -> str:
    return f"ao.actor.{priority_class}"


def task_name(kind: str) -> str:
    """The Celery task that executes actions of ``kind`` (``autooptimize.<kind>``): Flower and the event
    stream show each kind under its own name."""
    return f"{TASK_PREFIX}{kind}"


def all_queue_names(priority_classes: tuple[str, ...]) -> list[str]:
    """Every queue a worker of the service may consume: control, buffer, then the actor queues in class order."""
    return [CONTROL_QUEUE, BUFFER_QUEUE] + [actor_queue(p) for p in priority_classes]


def celery_queues(priority_classes: tuple[str, ...]) -> list[Queue]:
    # Every queue has its own routing key. Without one Celery binds each queue to the default exchange
    # with the default key (ao.control), and on Redis a message is then copied to every queue bound
    # with that key: each merge would reach every actor queue and the control queue.
    return [Queue(name, routing_key=name) for name in all_queue_names(priority_classes)]


def task_priority(priority_class: str, priority_classes: tuple[str, ...]) -> int:
    """Celery-on-Redis priority (0 is highest) for a class, spread over 0..9 by its rank."""
    rank = priority_classes.index(priority_class)
    return min(9, rank * max(1, 9 // max(1, len(priority_classes) - 1)))
