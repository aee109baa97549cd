"""Bad input (issue 13): fifty fuzzed inputs to the command line and the Python API, and the findings
as real subprocesses. Each gets exit code 2 (the API: the validation error) with a message naming the
input, and none writes a row (any table of the test database), a file (under AO_HOME) or a Redis key.

The inputs come from a seeded generator, so a failure names a case that reproduces; the CLI runs in
this process through ``autooptimize.cli.main`` (fifty interpreters would take minutes)."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from autooptimize import api
from autooptimize.cli import main as cli_main
from autooptimize.config import get_settings
from autooptimize.errors import AutoOptimizeError, ServiceUnavailable
from autooptimize.services import tracking
from tests.integration.state import assert_unchanged, everything
from tests.integration.tables import DAY1, DAY2, identifier, make_table

SEED = 20261113
CASES = 165
CASE_SECONDS = 30  # a bad input is refused at once; one that is accepted may wait for ever


@dataclass
class Case:
    """One bad input: a command line (``argv`` with ``T`` for the tracked table) or an API call, under
    ``env``; the error must contain every ``needles`` entry."""

    label: str
    needles: tuple[str, ...]
    argv: list[str] | None = None
    call: Callable[[str], Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2  # 3: a service that cannot be reached
    yaml: str | None = None  # the text of a .pyiceberg.yaml in a directory of its own (PYICEBERG_HOME)
    secret: str | None = None  # must appear nowhere in what is printed

    def __repr__(self) -> str:
        what = self.argv if self.argv is not None else "api"
        return f"<{self.label} {what!r} env={self.env}>"


# --------------------------------------------------------------------------------------------- generators


def _identifier(rng: random.Random) -> str:
    base = "test.fuzz_table"
    pick = rng.randrange(7)
    if pick == 0:
        return base + rng.choice(["\n", "\r\n", "\t", " ", "\x00", "\x1b", "\x7f"])
    if pick == 1:
        i = rng.randint(1, len(base) - 1)
        return base[:i] + rng.choice([" ", "\n", "/", ";", "'", "é", "*", "%"]) + base[i:]
    if pick == 2:
        return rng.choice(["fuzz_table", "", ".", "test.", ".fuzz", "test..fuzz"])
    if pick == 3:
        return "test." + "x" * rng.randint(129, 300)
    if pick == 4:
        return f"test.{rng.randint(0, 9)}fuzz"
    if pick == 5:
        return "test.fuzz; DROP TABLE ao_actions"
    return "\n".join([base, base])


def identifiers(rng: random.Random) -> Case:
    bad = _identifier(rng)
    needles = ("not a valid identifier", repr(bad))
    if rng.random() < 0.3:
        call = rng.choice([
            lambda t: api.track(bad), lambda t: api.status(bad), lambda t: api.optimize(bad, dry_run=True),
            lambda t: api.buffer_status(bad), lambda t: api.buffer_rules(bad, max_age="15m"),
            lambda t: api.flush(bad, wait=False), lambda t: api.land(bad, ["/nonexistent.parquet"]),
        ])
        return Case("identifier", needles, call=call)
    argv = rng.choice([["track", bad], ["optimize", bad], ["optimize", bad, "--dry-run"], ["status", bad],
                       ["explain", bad], ["scan", bad], ["whatif", bad, "--target-size", "1MiB"],
                       ["buffer", "rules", bad, "--max-age", "15m"], ["buffer", "status", bad],
                       ["buffer", "flush", bad], ["land", bad, "/nonexistent.parquet"]])
    return Case("identifier", needles, argv=argv)


def partitions(rng: random.Random) -> Case:
    bad = rng.choice(["day", "day=", "day=2026-13-01", "day=2026-02-30", "day=yesterday", "region=eu",
                      "day=2026-01-01,day=2026-01-02", "day=2026-01-01\n", "=2026-01-01", "day=%ZZ",
                      "day=2026-01-01,extra=1", "", " ", "day=20260101", "day=2026-01-01/day=x",
                      "".join(rng.choice("abc=,/%\t") for _ in range(rng.randint(1, 12)))])
    if rng.random() < 0.3:
        return Case("partition", ("partition",), call=lambda t: api.optimize(t, partition=bad, dry_run=True))
    command = rng.choice([["optimize", "T"], ["optimize", "T", "--dry-run"], ["explain", "T"], ["scan", "T"]])
    return Case("partition", ("partition",), argv=[*command, "--partition", bad])


def _size(rng: random.Random) -> str:
    return rng.choice([
        str(2**63 + rng.randint(0, 10**6)), str(rng.randint(10**19, 10**25)), f"{rng.randint(1, 999)}.{rng.randint(1, 9)}",
        f"-{rng.randint(1, 100)}MiB", f"{rng.randint(1, 9)}e{rng.randint(3, 12)}", f"{rng.randint(1, 99)}XB", "0.5B",
        "8388608TiB", "lots", "NaN", "1_000", "64MiB\n", "inf",
    ])


def sizes(rng: random.Random) -> Case:
    bad = _size(rng)
    if rng.random() < 0.3:
        name, call = rng.choice([
            ("target_file_size", lambda t: api.track(t, target_file_size=bad)),
            ("target_file_size", lambda t: api.optimize(t, dry_run=True, target_file_size=bad)),
            ("max-bytes", lambda t: api.buffer_rules(t, max_bytes=bad)),
            ("tolerance", lambda t: api.track(t, tolerance=bad)),
        ])
        return Case("size", (name,), call=call)
    command, option, name = rng.choice([
        (["track", "T"], "--target-size", "target_file_size"), (["track", "T"], "--tolerance", "tolerance"),
        (["track", "T"], "--max-bytes-per-action", "max_bytes_per_action"),
        (["optimize", "T"], "--target-size", "target_file_size"), (["explain", "T"], "--target-size", "target_file_size"),
        (["whatif", "T"], "--target-size", "target_file_size"),
        (["whatif", "T", "--target-size", "1MiB"], "--tolerance", "tolerance"),
        (["buffer", "rules", "T"], "--min-bytes", "min-bytes"), (["buffer", "rules", "T"], "--max-bytes", "max-bytes"),
    ])
    return Case("size", (name,), argv=[*command, f"{option}={bad}"])


def durations(rng: random.Random) -> Case:
    seconds = rng.choice(["-1", "0", "-0.5", "nan", "inf", "-inf", "1e400", "soon", "", "3m", str(2**40)])
    pick = rng.randrange(6)
    if pick == 0:
        return Case("duration", ("--timeout",), argv=["optimize", "T", "--wait", "--timeout", seconds])
    if pick == 1:
        return Case("duration", ("--interval",), argv=["listener", "--once", "--interval", seconds])
    if pick == 2:
        command = rng.choice([["buffer", "flush", "T", "--wait", "--timeout"], ["buffer", "watch", "--once", "--interval"]])
        return Case("duration", (command[-1],), argv=[*command, seconds])
    if pick == 3:
        bad = rng.choice(["-5m", "0", "0s", "soon", "1y", "5 parsecs", "1e3", str(2**40), "15m\n"])
        return Case("duration", ("max-age",), argv=["buffer", "rules", "T", "--max-age", bad])
    if pick == 4:
        kind, option = rng.choice([("remove_orphans", "min-age"), ("expire_snapshots", "older_than")])
        bad = rng.choice(["soon", "-1d", "10m", "1y", str(2**40), "3 days"])
        return Case("duration", (option.replace("-", "_"),), argv=["optimize", "T", "--action", kind, "--option",
                                                                    f"{option}={bad}"])
    bad_timeout = rng.choice([-1, 0, -0.001, math.nan, math.inf, "10", True])
    return Case("duration", ("timeout",), call=lambda t: api.ActionHandle(str(uuid.uuid4()), get_settings())
                .wait(timeout=bad_timeout))


def options(rng: random.Random) -> Case:
    pick = rng.randrange(7)
    if pick == 0:
        bad = rng.choice(["nope=1", "policy=greedy", "target_file_size=1", "respec=perhaps", "max_commits=0",
                          "max_commits=1.5", "partial_progress=maybe"])
        return Case("option", (bad.split("=")[0],), argv=["optimize", "T", "--option", bad])
    if pick == 1:
        bad = rng.choice(["=x", "min-age", "Min-Age=1d", " =1", "a b=1"])
        return Case("option", ("--option",), argv=["optimize", "T", "--action", "remove_orphans", "--option", bad])
    if pick == 2:
        kind = rng.choice(["compact_deletes", "rewrite_manifests", "expire_snapshots"])
        return Case("option", ("frobnicate",), argv=["optimize", "T", "--action", kind, "--option", "frobnicate=1"])
    if pick == 3:
        command, flag = rng.choice([(["track", "T"], "--frobnicate"), (["optimize", "T"], "--dryrun"),
                                    (["status"], "--qeues"), (["explain", "T"], "--partitions")])
        return Case("option", (flag,), argv=[*command, flag])
    if pick == 4:
        flag, bad, needle = rng.choice([
            ("--action", "defragment", "defragment"), ("--priority", "urgent!", "urgent!"),
        ])
        return Case("option", (needle,), argv=["optimize", "T", flag, bad])
    if pick == 5:
        flag, bad = rng.choice([("--weight", "0"), ("--weight", "1.5"), ("--min-input-files", "1"),
                                ("--min-interval", "-1"), ("--min-interval", "99999999999"),
                                ("--allowed-actions", "merge,explode"), ("--allow", "delete_everything"),
                                ("--priority", "ultra"), ("--sort-order", "no_such_column")])
        needle = flag if flag.startswith(("--w", "--min", "--allow")) else bad
        return Case("option", (needle,), argv=["track", "T", flag, bad])
    name, call = rng.choice([
        ("nope", lambda t: api.optimize(t, options={"nope": 1}, dry_run=True)),
        ("explode", lambda t: api.optimize(t, action="explode")),
        ("frobnicate", lambda t: api.track(t, frobnicate=1)),
        ("weight", lambda t: api.track(t, weight=1.5)),
        ("dry_run", lambda t: api.optimize(t, dry_run="yes")),
        ("frob", lambda t: api.buffer_rules(t, frob=1)),
        ("allowed_actions", lambda t: api.track(t, allowed_actions=[])),
        ("enabled", lambda t: api.track(t, enabled="no")),
    ])
    return Case("option", (name,), call=call)


def urls(rng: random.Random) -> Case:
    if rng.random() < 0.4:
        bad = rng.choice(["ftp://h/x", "http://", "http://h:port/x", "http://h x/", "https://h/\n", "javascript:alert(1)",
                          "//h/x"])
        if rng.random() < 0.5:
            return Case("url", ("callback",), call=lambda t: api.buffer_rules(t, callback_url=bad))
        return Case("url", ("callback",), argv=["buffer", "rules", "T", "--callback", bad])
    name, bad = rng.choice([
        ("AO_REDIS_URL", "redis://h:port/0"), ("AO_REDIS_URL", "http://h:6379"), ("AO_REDIS_URL", "redis://h:6379/zero"),
        ("AO_REDIS_URL", "redis://h :1/0"), ("AO_REDIS_URL", "redis://h:0/0"), ("AO_REDIS_URL", "redis://h:99999/0"),
        ("AO_DATABASE_URL", "mysql://u@h/db"), ("AO_DATABASE_URL", "postgresql://u@h:abc/db"),
        ("AO_DATABASE_URL", "postgresql://u@h/bad%20name"), ("AO_DATABASE_URL", "postgresql://u@h/"),
        ("AO_SPARK_REMOTE", "yarn"), ("AO_SPARK_REMOTE", "sc://"), ("AO_SPARK_REMOTE", "sc://h:port"),
        ("AO_SPARK_REMOTE", "sc://h:15002/;token="),
    ])
    return Case("url", (name,), argv=rng.choice([["status"], ["explain", "T"], ["track", "T"]]), env={name: bad})


def env_vars(rng: random.Random) -> Case:
    name, bad = rng.choice([
        ("AO_MAX_GROUP_BYTES", "1.5"), ("AO_DEFAULT_TARGET_FILE_SIZE", "1e9"),
        ("AO_DEFAULT_TARGET_FILE_SIZE", "99999999999999999999"), ("AO_WORKER_CONCURRENCY", "0"),
        ("AO_WORKER_CONCURRENCY", "1.5"), ("AO_SETTLE_SECONDS", "nan"), ("AO_SETTLE_SECONDS", "-1"),
        ("AO_LEASE_SECONDS", "5"), ("AO_LEASE_SECONDS", "99999999999"), ("AO_SPARK_PORT", "70000"),
        ("AO_CATALOG", "a b"), ("AO_HOME", "/tmp/x\ny"), ("AO_DISPATCH", "fast"), ("AO_MERGE_POLICY", "greedy"),
        ("AO_PRIORITY_CLASSES", "High"), ("AO_PRIORITY_WEIGHTS", "high=-1"), ("AO_AUTO_TRACK", "*"),
        ("AO_FLOWER_PASSWORD", ""), ("AO_SPARK_TOKEN", " "), ("AO_FLOWER_USER", "a:b"),
        ("AO_SPARK_DRIVER_MEMORY", "2 GB"), ("AO_DEFAULT_TOLERANCE", "-1"), ("AO_ORPHAN_MIN_AGE_SECONDS", "60"),
        ("AO_MERGE_FAN_IN", "1"), ("AO_AUTO_TRACK_SECONDS", "inf"), ("AO_BUFFER_MAX_BYTES", "0.5"),
    ])
    if rng.random() < 0.25:
        return Case("env", (name,), call=lambda t: api.status(t), env={name: bad})
    argv = rng.choice([["status"], ["explain", "T"], ["optimize", "T", "--dry-run"], ["track", "T"], ["scan", "T"]])
    return Case("env", (name,), argv=argv, env={name: bad})


def revisions(rng: random.Random) -> Case:
    bad = rng.choice(["nonsense", "0099", "base", "-1", "head\n", "0001;drop", "heads", "+1", "HEAD"])
    return Case("revision", ("revision", repr(bad)), argv=["db", "upgrade", bad])


CLOSED_PORT = 9  # nothing listens there (discard): connections are refused at once


def _catalog_name(rng: random.Random) -> str:
    return "fz" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10))


def _secret(rng: random.Random) -> str:
    return "S3cr3t-" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(16))


def _catalog_command(rng: random.Random) -> list[str]:
    return rng.choice([["explain", "T"], ["optimize", "T", "--dry-run"], ["scan", "T"], ["track", "T"]])


def pyiceberg_files(rng: random.Random) -> Case:
    """A malformed .pyiceberg.yaml holding a credential: a ConfigError naming the file, quoting none of it."""
    name, secret = _catalog_name(rng), _secret(rng)
    text = rng.choice([
        f"catalog:\n  {name}:\n    uri: http://rest:8181\n    credential: {secret}\n   token: [unclosed\n",
        f"catalog:\n\t{name}:\n\t\tcredential: {secret}\n",
        f"catalog: [{name}, credential: {secret}\n",
        f"catalog:\n  {name}:\n    credential: {secret}\n    credential: {secret}x\n",
        f"catalog:\n  {name}:\n    credential: '{secret}\n",
        f"- {name}\n- credential: {secret}\n",
        f"catalog:\n  {name}: {{uri: http://rest:8181, credential: {secret}\n",
        f"catalog:\n  {name}:\n    credential: {secret}\n  - broken\n",
    ])
    if rng.random() < 0.25:
        return Case("pyiceberg.yaml", (".pyiceberg.yaml",), call=lambda t: api.status(t), env={"AO_CATALOG": name},
                    yaml=text, secret=secret)
    return Case("pyiceberg.yaml", (".pyiceberg.yaml",), argv=_catalog_command(rng), env={"AO_CATALOG": name},
                yaml=text, secret=secret)


def catalog_configs(rng: random.Random) -> Case:
    """A catalog configured wrongly (unknown type, no URI, an implementation that does not exist, no
    configuration at all): exit 2 naming the catalog, its secrets masked."""
    name, secret = _catalog_name(rng), _secret(rng)
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    env = rng.choice([
        {prefix + "TYPE": "nosuchtype", prefix + "URI": "http://rest:8181", prefix + "CREDENTIAL": secret},
        {prefix + "URI": "ftp://lake.example/x", prefix + "TOKEN": secret},
        {prefix + "PY-CATALOG-IMPL": "no_such_module.NoSuchCatalog", prefix + "TOKEN": secret},
        {prefix + "TYPE": "sql", prefix + "URI": f"mysql+nosuchdriver://u:{secret}@127.0.0.1/x"},
        {prefix + "TYPE": "rest", prefix + "CREDENTIAL": secret},
        {},  # AO_CATALOG names a catalog nothing configures
    ])
    needles = (name,)
    if rng.random() < 0.25:
        return Case("catalog", needles, call=lambda t: api.status(t), env={"AO_CATALOG": name, **env}, secret=secret)
    return Case("catalog", needles, argv=_catalog_command(rng), env={"AO_CATALOG": name, **env}, secret=secret)


def unreachable_catalogs(rng: random.Random) -> Case:
    """A catalog of each kind that does not answer: exit 3 naming it, its credentials nowhere."""
    name, secret = _catalog_name(rng), _secret(rng)
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    _kind, env = rng.choice([
        ("rest", {prefix + "TYPE": "rest", prefix + "URI": f"http://127.0.0.1:{CLOSED_PORT}",
                  prefix + "CREDENTIAL": f"client:{secret}"}),
        ("rest", {prefix + "URI": f"http://127.0.0.1:{CLOSED_PORT}/catalog", prefix + "TOKEN": secret}),
        ("hive", {prefix + "TYPE": "hive", prefix + "URI": f"thrift://127.0.0.1:{CLOSED_PORT}"}),
        ("hive", {prefix + "URI": f"thrift://u:{secret}@127.0.0.1:{CLOSED_PORT}"}),
        ("sql", {prefix + "TYPE": "sql", prefix + "URI": f"postgresql+psycopg2://u:{secret}@127.0.0.1:{CLOSED_PORT}/x"}),
        ("sql", {prefix + "URI": f"postgresql+psycopg2://u:{secret}@127.0.0.1:{CLOSED_PORT}/lake"}),
    ])
    secret_used = secret if any(secret in v for v in env.values()) else None
    if rng.random() < 0.25:
        return Case("unreachable", (name,), call=lambda t: api.optimize(t, dry_run=True),
                    env={"AO_CATALOG": name, **env}, code=3, secret=secret_used)
    return Case("unreachable", (name,), argv=rng.choice([["explain", "T"], ["optimize", "T", "--dry-run"],
                                                         ["scan", "T"]]),
                env={"AO_CATALOG": name, **env}, code=3, secret=secret_used)


GENERATORS = (identifiers, partitions, sizes, durations, options, urls, env_vars, revisions, pyiceberg_files,
              catalog_configs, unreachable_catalogs)


def fuzzed_cases() -> list[Case]:
    """CASES cases, every kind of input many times, the same ones on every run."""
    rng = random.Random(SEED)
    return [GENERATORS[i % len(GENERATORS)](rng) for i in range(CASES)]


# ------------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def fuzz_table(settings, catalog) -> str:
    """A tracked, partitioned table with a few small files: the inputs are bad, not the table."""
    table = make_table(catalog, {DAY1: 3, DAY2: 2}, rows=10, name="fuzz")
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return ident


def _run(case: Case, table: str, capsys: pytest.CaptureFixture[str]) -> tuple[int | str, str]:
    """The exit code (the API: 2 for our error, 3 for an unreachable service) and everything printed or
    raised; anything else raised is a failure."""
    try:
        if case.argv is not None:
            code = cli_main([table if a == "T" else a for a in case.argv])
            printed = capsys.readouterr()
            return code, printed.err + printed.out
        assert case.call is not None
        case.call(table)
    except ServiceUnavailable as exc:
        return (3 if case.call is not None else "raised"), str(exc) + capsys.readouterr().err
    except AutoOptimizeError as exc:
        return (2 if case.call is not None else "raised"), str(exc) + capsys.readouterr().err
    except Exception:  # a traceback instead of a message
        return "raised", traceback.format_exc()
    except _TooLong:
        return "still running", f"no answer after {CASE_SECONDS} s: the input was accepted"
    return 0, "the call returned"


class _TooLong(BaseException):
    """An accepted input started something that waits (a wait on a queued action, a listener)."""


def _too_long(_signum: int, _frame: object) -> None:
    raise _TooLong


def test_fuzzed_inputs_exit_2_or_3_name_the_input_print_no_secret_and_change_nothing(
        settings, fuzz_table, capsys, monkeypatch, tmp_path):
    cases = fuzzed_cases()
    assert len(cases) == CASES >= 150
    assert {c.label for c in cases} >= {"identifier", "partition", "size", "duration", "option", "url", "env",
                                        "revision", "pyiceberg.yaml", "catalog", "unreachable"}
    failures = []
    for n, case in enumerate(cases):
        before = everything(settings)
        with monkeypatch.context() as env:
            for name, value in case.env.items():
                env.setenv(name, value)
            if case.yaml is not None:
                home = tmp_path / f"pyiceberg-{n}"
                home.mkdir()
                (home / ".pyiceberg.yaml").write_text(case.yaml)
                env.setenv("PYICEBERG_HOME", str(home))
            get_settings.cache_clear()
            previous = signal.signal(signal.SIGALRM, _too_long)
            signal.alarm(CASE_SECONDS)
            try:
                code, message = _run(case, fuzz_table, capsys)
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
                get_settings.cache_clear()
        problems = [] if code == case.code else [f"exit {code}, not {case.code}"]
        problems += [f"message lacks {n!r}" for n in case.needles if n not in message]
        problems += ["traceback"] if "Traceback" in message else []
        problems += ["the secret was printed"] if case.secret and case.secret in message else []
        try:
            assert_unchanged(before, everything(settings), repr(case))
        except AssertionError as exc:
            problems.append(str(exc))
        if problems:
            failures.append(f"{case!r}: {'; '.join(problems)}\n    {message.strip()[-400:]}")
    assert not failures, f"{len(failures)} of {CASES} fuzzed inputs misbehaved:\n" + "\n".join(failures)
    assert sum(c.code == 3 for c in cases) >= 10 and sum(c.secret is not None for c in cases) >= 30


@pytest.mark.parametrize(("argv", "env", "needles"), [
    (["track", "T", "--target-size", "99999999999999999999"], {}, ["target_file_size", "out of range"]),
    (["status"], {"AO_MAX_GROUP_BYTES": "1.5"}, ["AO_MAX_GROUP_BYTES", "fraction of a byte"]),
    (["optimize", "T", "--wait", "--timeout", "-1"], {}, ["--timeout", "positive number of seconds"]),
    (["track", "test.fuzz_table\n"], {}, ["not a valid identifier", "'test.fuzz_table\\n'"]),
    (["db", "upgrade", "nonsense"], {}, ["revision 'nonsense'", "valid: head, 0001"]),
])
def test_the_findings_as_real_commands(settings, fuzz_table, argv, env, needles):
    before = everything(settings)
    result = subprocess.run([sys.executable, "-m", "autooptimize.cli", *[fuzz_table if a == "T" else a for a in argv]],
                            capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert result.returncode == 2, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    assert "Traceback" not in result.stderr
    assert_unchanged(before, everything(settings), " ".join(argv))


@pytest.mark.parametrize("argv", [["status"], ["explain", "T"], ["track", "T"]])
def test_a_malformed_pyiceberg_yaml_as_a_real_command(settings, fuzz_table, tmp_path, argv):
    """pyiceberg reads the file when its catalog module is imported: the check runs before that import."""
    secret = "S3cr3t-" + uuid.uuid4().hex
    (tmp_path / ".pyiceberg.yaml").write_text(
        f"catalog:\n  lake:\n    uri: http://rest:8181\n    credential: {secret}\n   token: [unclosed\n")
    before = everything(settings)
    result = subprocess.run([sys.executable, "-m", "autooptimize.cli", *[fuzz_table if a == "T" else a for a in argv]],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYICEBERG_HOME": str(tmp_path), "AO_CATALOG": "lake"})
    assert result.returncode == 2, result.stderr
    assert f"{tmp_path}/.pyiceberg.yaml" in result.stderr and "line 5" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert secret not in result.stderr + result.stdout
    assert_unchanged(before, everything(settings), " ".join(argv))
