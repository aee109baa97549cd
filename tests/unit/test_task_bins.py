"""How an action's calls are spread over the tasks of its Spark job (spark_actors/action_job.py)."""

from __future__ import annotations

import pytest

from spark_actors.action_job import task_bins, task_slots


class _Conf:
    def __init__(self, master: object) -> None:
        self.master = master

    def get(self, key: str, default: object = None) -> object:
        if isinstance(self.master, Exception):
            raise self.master
        return self.master if key == "spark.master" else default


class _Spark:
    def __init__(self, master: object) -> None:
        self.conf = _Conf(master)


@pytest.mark.parametrize(("master", "slots"), [
    ("local[2]", 2), ("local[8]", 8), ("local", 1), ("local[3,4]", 3), ("local[*]", None),
    ("spark://master:7077", None), ("yarn", None), ("k8s://https://api:6443", None), (None, None),
    (RuntimeError("no"), None),
])
def test_slots_come_from_a_local_master_only(master: object, slots: int | None) -> None:
    assert task_slots(_Spark(master)) == slots  # type: ignore[arg-type]


def test_one_task_per_call_without_slots_or_with_enough() -> None:
    assert task_bins([3.0, 1.0, 2.0], None) == [[0], [1], [2]]
    assert task_bins([3.0, 1.0, 2.0], 3) == [[0], [1], [2]]
    assert task_bins([3.0, 1.0, 2.0], 8) == [[0], [1], [2]]
    assert task_bins([], 2) == []


def test_calls_are_spread_over_the_slots_by_weight() -> None:
    weights = [24.0, 23.0, 25.0, 22.0, 24.5, 23.5, 22.5, 24.0]
    bins = task_bins(weights, 2)
    assert len(bins) == 2
    assert sorted(i for b in bins for i in b) == list(range(8))  # every call once
    loads = [sum(weights[i] for i in b) for b in bins]
    assert max(loads) - min(loads) <= max(weights)
    # one large call and many small ones: the small ones go beside it, not after it
    bins = task_bins([10.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2)
    assert sorted(bins, key=len) == [[0], [1, 2, 3, 4, 5]]
