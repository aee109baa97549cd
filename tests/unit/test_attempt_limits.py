"""How long an attempt may run, and the Celery settings that follow from it (issue 13: a healthy long
action must never be redelivered)."""

from __future__ import annotations

import pytest

from autooptimize.config import Settings, get_settings


@pytest.mark.parametrize("timeout", [1, 5, 3600, 6 * 3600])
def test_no_attempt_outlives_the_visibility_timeout(timeout):
    """Shortened timeouts stand for the hour: whatever AO_ACTION_TIMEOUT_SECONDS is, Celery kills an action
    task before it has run half the visibility timeout, so a message that waited for a free process (at
    most one attempt, prefetch 1) and then ran is acked before Redis would hand it out again, and the
    attempt itself gets time to stop and clean up after its timeout."""
    from tasks.actions import action_task_options
    from tasks.app import visibility_timeout

    settings = Settings(action_timeout_seconds=timeout)
    limit = action_task_options(settings)["time_limit"]
    assert timeout < limit
    assert 2 * limit <= visibility_timeout(settings)


def test_the_workers_action_tasks_and_broker_carry_those_limits():
    from tasks.actions import ACTION_TASKS, action_task_options
    from tasks.app import app, visibility_timeout

    settings = get_settings()
    assert {task.time_limit for task in ACTION_TASKS.values()} == {action_task_options(settings)["time_limit"]}
    assert app.conf.broker_transport_options["visibility_timeout"] == visibility_timeout(settings)
    assert app.conf.task_acks_late and app.conf.worker_prefetch_multiplier == 1
