"""The zip of our code that goes to the executors (spark_actors/artifacts.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from spark_actors.artifacts import build_archive, partial_path


def test_the_archive_holds_every_module_a_task_imports_and_nothing_else():
    content, path = build_archive()
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    for module in ("spark_actors/action_job.py", "spark_actors/group_tasks.py", "autooptimize/arrow/rewrite.py",
                   "autooptimize/arrow/deletes.py", "autooptimize/arrow/consolidate.py", "autooptimize/arrow/writers.py",
                   "autooptimize/arrow/__init__.py", "autooptimize/engines/deletes.py",
                   "autooptimize/engines/xxh64_jit.py", "autooptimize/iceberg/checksum.py",
                   "autooptimize/iceberg/commit.py", "autooptimize/__init__.py", "spark_actors/__init__.py"):
        assert module in names, module
    assert all(n.endswith(".py") and n.split("/")[0] in ("autooptimize", "spark_actors") for n in names)
    assert path.name == f"autooptimize-{content}.zip"
    assert build_archive() == (content, path)  # once per process


def test_forked_actor_processes_write_the_archive_through_temporary_files_of_their_own(tmp_path):
    """The actor pool's processes are forks of one parent and keep its thread id: two building the archive
    at once must not share a temporary file (the second to move it into place found it gone)."""
    import multiprocessing

    target = tmp_path / "autooptimize-0123.zip"
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=lambda: queue.put(str(partial_path(target))))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    theirs, ours = Path(queue.get()), partial_path(target)
    assert theirs != ours and theirs.parent == ours.parent == tmp_path
    assert theirs.name.endswith(".tmp") and ours.name.endswith(".tmp")
