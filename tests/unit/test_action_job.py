"""What one task of an action's Spark job does in its Python worker (spark_actors/action_job.run_task),
run here in-process: the same function an executor runs, without Spark."""

from __future__ import annotations

import gc
import pickle

import pytest

from autooptimize import errors
from spark_actors.action_job import TaskOutcome, run_task


def frozen_objects(table: object, *args: object, attempt: int = 0) -> int:
    """A task's call: how many objects the collector had frozen when the call ran."""
    assert table is None and attempt == 0
    return gc.get_freeze_count()


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process keeps collecting as usual


def test_a_task_freezes_what_is_alive_before_its_call_so_the_collection_after_it_is_short(unfrozen):
    """Spark's worker daemon collects after every task; what a task finds alive (the modules, the code)
    is frozen first, and that collection only looks at what the task made."""
    assert gc.get_freeze_count() == 0
    outcome = pickle.loads(run_task(pickle.dumps(None), 3, pickle.dumps((frozen_objects, ()))))
    assert isinstance(outcome, TaskOutcome)
    assert outcome.index == 3 and outcome.error is None and outcome.attempt == 0
    assert outcome.value > 10_000  # this process's modules and their objects
    assert outcome.seconds >= 0 and outcome.cpu >= 0


@pytest.mark.parametrize("error", [
    errors.ActionRefused("unsupported_type", "uuid cannot be written"),
    errors.TableRefused("format_version", "format version 4"),
    errors.Retry("later", delay=7.5),
    errors.LeaseLost("lost", delay=2.0),
    errors.AttemptTimedOut("slow", delay=1.0),
    errors.ActionBusy("busy", delay=3.0, holder="worker-1"),
    errors.CommitOutcomeUnknown("no answer", snapshot_id=12, parent_id=None),
    errors.VerificationFailed("rows differ"),
    errors.ConflictAbort("input deleted"),
    errors.InvalidArgument("bad partition"),
    errors.WaitTimeout("still running"),
], ids=lambda e: type(e).__name__)
def test_every_error_a_task_raises_comes_back_whole(unfrozen, error):
    """An error of ours raised on an executor reaches the action as itself, with its own fields (pickle
    alone rebuilt ActionRefused from its message only, and failed)."""
    outcome = pickle.loads(run_task(pickle.dumps(None), 0, pickle.dumps((raise_it, (error,)))))
    assert outcome.value is None and type(outcome.error) is type(error)
    assert str(outcome.error) == str(error)
    assert vars(outcome.error) == vars(error)


def raise_it(table: object, error: Exception, *, attempt: int = 0) -> None:
    raise error


def sleeps(table: object, seconds: float, *, attempt: int = 0) -> float:
    """A task's call that takes ``seconds``."""
    import time

    time.sleep(seconds)
    return seconds


def test_the_job_timeline_is_the_time_before_its_first_task_and_after_its_last(unfrozen):
    import time

    from spark_actors.action_job import _timeline

    submitted = time.time()
    time.sleep(0.05)
    outcomes = [pickle.loads(run_task(pickle.dumps(None), i, pickle.dumps((sleeps, (0.02 * (i + 1),)))))
                for i in range(2)]
    time.sleep(0.03)
    timeline = _timeline(outcomes, submitted, time.time())
    assert outcomes[0].started_at >= submitted + 0.05
    assert 0.05 <= timeline["to_first_task"] < 0.5
    assert 0.03 <= timeline["after_last_task"] < 0.5
    assert _timeline([], submitted, time.time()) == {}
