"""Nothing is left behind (issue 13): `autooptimize up` and `autooptimize demo` stop every process they started,
and the Spark Connect server they started, within 30 s of SIGTERM or Ctrl-C; a server that was running before
them is left alone. Real processes, watched from /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_actors.server import SERVER_CLASS, running_server
from tests.helpers import free_port
from tests.integration.processes import TreeWatch, alive, children_of, kill_leftovers, wait_until

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
STOP_BOUND = 30.0


def _env(home: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "AO_FLOWER_PORT": str(free_port()), "AO_FLOWER_PASSWORD": "test-only-pw",
           "AO_CONSOLE_PORT": str(free_port()), "AO_CONSOLE_PASSWORD": "test-only-pw"}
    if home is not None:  # a home of its own: no server is running for it, so the command starts one
        env.update(AO_HOME=str(home), AO_SPARK_PORT=str(free_port()))
    return env


def _launch(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], TreeWatch]:
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "autooptimize.cli", *args], env=env, cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, TreeWatch(proc.pid)


def _stop_within_bound(proc: subprocess.Popen[bytes], signum: int, log: Path) -> float:
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=STOP_BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {STOP_BOUND:.0f} s after signal {signum}:\n{log.read_text()[-3000:]}")
    return time.monotonic() - sent


def _jvm_pid(home: Path) -> int | None:
    try:
        return int((home / "spark" / f"spark-autooptimize-{SERVER_CLASS}-1.pid").read_text().strip())
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_up_stopped_while_its_spark_server_starts_leaves_nothing(settings, tmp_path, signum):
    home, log = tmp_path / "home", tmp_path / "up.log"
    proc, watch = _launch(["up", "--workers", "1"], _env(home), log)
    try:
        assert wait_until(lambda: (pid := _jvm_pid(home)) is not None and alive(pid), 180), log.read_text()
        jvm = _jvm_pid(home)
        assert jvm is not None
        assert not (home / "spark" / "server.json").exists(), "the server must still be starting"
        elapsed = _stop_within_bound(proc, signum, log)
        watch.stop()
        assert not alive(jvm), "the half-started Spark server must go with `up`"
        assert watch.living() == [], f"left behind {elapsed:.1f} s after the signal"
        assert proc.returncode == 0, log.read_text()
    finally:
        watch.stop()
        kill_leftovers(watch)
        if proc.poll() is None:
            proc.kill()


def test_up_restarts_a_killed_child_then_stops_everything_it_started(settings, tmp_path):
    home, log = tmp_path / "home", tmp_path / "up.log"
    proc, watch = _launch(["up", "--workers", "1"], _env(home), log)
    try:
        assert wait_until(lambda: "is up" in log.read_text(), 300), log.read_text()
        jvm = json.loads((home / "spark" / "server.json").read_text())["pid"]
        listeners = [pid for pid, cmd in children_of(proc.pid).items() if "autooptimize.cli listener" in cmd]
        assert len(listeners) == 1
        os.killpg(listeners[0], signal.SIGKILL)  # as a crash would: `up` starts another one
        assert wait_until(lambda: any("autooptimize.cli listener" in cmd and pid != listeners[0]
                                      for pid, cmd in children_of(proc.pid).items()), 30), log.read_text()
        assert proc.poll() is None
        children = children_of(proc.pid)
        # actor worker, control worker, listener, beat, flower, console (+ dispatcher)
        assert len(children) == 6 + (settings.dispatch == "rpq"), children
        elapsed = _stop_within_bound(proc, signal.SIGTERM, log)
        watch.stop()
        assert not alive(jvm), "the Spark server `up` started must be stopped"
        assert watch.living() == [], f"left behind {elapsed:.1f} s after SIGTERM"
        assert proc.returncode == 0, log.read_text()
        assert "listener exited with -9; restarting it" in log.read_text()
        assert "test-only-pw" not in log.read_text()
    finally:
        watch.stop()
        kill_leftovers(watch)
        if proc.poll() is None:
            proc.kill()


def test_a_finished_demo_stops_the_spark_server_it_started(settings, tmp_path):
    home, log = tmp_path / "home", tmp_path / "demo.log"
    proc, watch = _launch(["demo", "--files", "8", "--partitions", "2", "--json"], _env(home), log)
    try:
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo did not finish within 600 s:\n{log.read_text()[-3000:]}")
        assert proc.returncode == 0, log.read_text()[-3000:]
        result = json.loads(log.read_text().strip().splitlines()[-1])
        assert result["rows_after"] == result["rows_before"]
        watch.stop()
        assert any(SERVER_CLASS in cmd for cmd in watch.commands.values()), "the demo must have started a server"
        assert watch.living() == [], "a finished demo leaves nothing running"
    finally:
        watch.stop()
        kill_leftovers(watch)
        if proc.poll() is None:
            proc.kill()


def test_demo_stopped_by_sigterm_stops_its_processes_and_leaves_a_running_server_alone(settings, spark, tmp_path):
    before = running_server(settings)
    assert before is not None
    log = tmp_path / "demo.log"
    proc, watch = _launch(["demo", "--files", "8", "--partitions", "2"], _env(), log)
    try:
        assert wait_until(lambda: any("autooptimize.cli listener" in cmd for cmd in children_of(proc.pid).values()),
                          180), log.read_text()
        time.sleep(2)  # a moment later the worker (none answers on this Redis db) is starting too
        elapsed = _stop_within_bound(proc, signal.SIGTERM, log)
        watch.stop()
        assert watch.living() == [], f"left behind {elapsed:.1f} s after SIGTERM"
        assert proc.returncode == 128 + signal.SIGTERM, log.read_text()
        after = running_server(settings)
        assert after is not None and after.pid == before.pid, "a server running before the demo is left alone"
        assert spark.range(3).count() == 3
    finally:
        watch.stop()
        kill_leftovers(watch)
        if proc.poll() is None:
            proc.kill()



def test_the_demo_recreates_its_table_when_an_earlier_demos_files_are_gone(settings):
    """A demo whose AO_HOME was deleted left its catalog entry behind (the catalog lives in PostgreSQL):
    the next demo stopped at purging it, FileNotFoundError on the vanished metadata file."""
    import shutil
    from urllib.parse import urlsplit

    from autooptimize.demo import create_demo_table

    first = create_demo_table(settings, files=2, partitions=1)
    shutil.rmtree(urlsplit(first.location()).path)
    again = create_demo_table(settings, files=3, partitions=1)
    assert len(list(again.scan().plan_files())) == 3


def _processes_naming(path: Path) -> list[int]:
    """Pids of the running processes whose command line names ``path`` (a Spark server started for a home
    names its properties file there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(path).encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_whatif_suggest_stops_the_spark_server_its_calibration_started(settings, catalog, tmp_path):
    """``whatif --suggest`` asks for a Spark session only to calibrate a table with no merge of its own; with no
    server running for its home it starts one, and stops it before it exits (``explain`` the same way)."""
    from tests.integration.tables import DAY1, identifier, make_table

    table = make_table(catalog, {DAY1: 30}, rows=100, name="lone_cli")
    home = tmp_path / "home"
    home.mkdir()
    run = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", identifier(table), "--suggest", "--json"],
                         env=_env(home), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["output_calibration"] is not None and out["output_calibration"]["engine"] == "spark"
    assert (home / "spark").is_dir()  # it did start a server of its own
    assert _processes_naming(home) == [] and running_server(settings.model_copy(update={"home": home})) is None
