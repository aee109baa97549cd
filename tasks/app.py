"""The Celery app: Redis broker, late acks, prefetch 1, reject on worker lost, priority queues.

Beat runs the same app with its schedule added: ``celery -A scheduler.beat beat`` (see :mod:`scheduler.beat`).

The visibility timeout follows from the action timeout. An attempt stops itself at
AO_ACTION_TIMEOUT_SECONDS and takes at most STOP_GRACE_SECONDS more to clean up
(:func:`autooptimize.services.attempt.attempt_limit_seconds`); an action task that somehow runs past that
is killed by Celery (its hard ``time_limit``). With late acks and prefetch 1 a delivered message stays
unacked while it waits for a free worker process (at most one attempt of the task before it) and then
while it runs (at most one attempt). Redis redelivers an unacked message only after the visibility
timeout, :func:`visibility_timeout`, twice the attempt limit: a healthy attempt is never redelivered.
If a duplicate comes anyway (a worker host paused for hours), it finds the lease held and leaves it alone.
"""

from __future__ import annotations

from celery import Celery
from celery.signals import celeryd_after_setup, worker_process_init, worker_process_shutdown

from autooptimize.config import Settings, get_settings
from autooptimize.redact import install_log_redaction
from autooptimize.services.attempt import attempt_limit_seconds
from autooptimize.storage.db import reset_engines_after_fork
from spark_actors.session import close_session, reset_after_fork
from tasks.routing import CONTROL_QUEUE, celery_queues


def visibility_timeout(settings: Settings) -> int:
    """Seconds before Redis hands an unacked message out again: two attempt limits (see the module)."""
    return 2 * attempt_limit_seconds(settings)


def make_app() -> Celery:
    # Workers started as `celery -A tasks.app worker` (autooptimize up does) log through Celery's own
    # handlers: every record is redacted, whoever formats it.
    install_log_redaction()
    settings = get_settings()
    app = Celery("autooptimize", broker=settings.redis_url, include=["tasks.actions", "tasks.control", "tasks.buffer"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=CONTROL_QUEUE,
        task_queues=celery_queues(settings.priority_classes),
        task_create_missing_queues=False,
        broker_transport_options={
            "priority_steps": list(range(10)),
            "sep": ":",
            "queue_order_strategy": "priority",
            # An unacked task comes back after this long: longer than any attempt may take (see above).
            "visibility_timeout": visibility_timeout(settings),
        },
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    return app


app = make_app()


#: whether this worker consumes a queue whose tasks run on Spark (set before the pool forks)
_spark_queues = False


def does_spark_work(queues: object) -> bool:
    """True when a worker consuming ``queues`` (names) takes Spark work: any queue but the control queue."""
    return any(str(q) != CONTROL_QUEUE for q in queues)  # type: ignore[attr-defined]


@celeryd_after_setup.connect
def _after_setup(sender: object, instance: object, **_: object) -> None:
    global _spark_queues
    _spark_queues = does_spark_work(instance.app.amqp.queues.consume_from)  # type: ignore[attr-defined]


@worker_process_init.connect
def _after_fork(**_: object) -> None:
    # Pools and Spark sessions must not be shared with the parent process.

    reset_engines_after_fork()
    reset_after_fork()
    settings = get_settings()
    if _spark_queues and settings.actor_warm_up and settings.rewrite_engine != "local":
        from spark_actors.warmup import warm_up_in_background

        # the first action then finds the session open (spark_actors/warmup.py)
        warm_up_in_background(settings)


@worker_process_shutdown.connect
def _before_exit(**_: object) -> None:
    # Release the server-side session now, so exit never waits on a server that is going away.

    close_session()
