"""One name, one contract: no two modules of our packages define the same public top-level name.

A reader who meets ``Lease`` or ``is_local`` should not have to ask which one. Names starting with ``_``
are private to their module and not counted. The few repeats left are listed in ALLOWED with why each
is the same contract (or unavoidable); a new repeat fails here until it is renamed or explained.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("autooptimize", "tasks", "scheduler", "spark_actors")

# name -> (the modules that define it, why that is one contract or unavoidable)
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "main": (frozenset({"autooptimize/cli/__init__.py", "scheduler/dispatcher.py", "scheduler/listener.py"}),
             "each entry point's process function (the autooptimize script; python -m scheduler.dispatcher or .listener): argv in, exit code out"),
    "land": (frozenset({"autooptimize/api.py", "autooptimize/services/buffer/landing.py"}),
             "the Python API's facade of the service: the same call with settings defaulted and a port built"),
    "track": (frozenset({"autooptimize/api.py", "autooptimize/services/tracking.py"}),
              "the Python API's facade of the service: the same call with settings defaulted"),
    "explain": (frozenset({"autooptimize/api.py", "autooptimize/services/explain.py"}),
                "the Python API's facade of the service: the same call with settings defaulted"),
    "notify": (frozenset({"autooptimize/api.py", "autooptimize/services/notify.py"}),
               "the Python API's facade of the service: the same call with settings defaulted and the wake-up built"),
    "buffer_status": (frozenset({"autooptimize/api.py", "autooptimize/services/buffer/rules.py"}),
                      "the Python API's facade of the service: the same call with settings defaulted"),
    "sweep_actions": (frozenset({"autooptimize/services/sweeper.py", "tasks/actions.py"}),
                      "the beat task of that name (autooptimize.sweep_actions) runs the service and nothing else"),
    "validate_options": (frozenset({"autooptimize/services/sort.py", "autooptimize/services/zorder.py"}),
                         "one kind's validator, named by services/kinds.py as 'module:validate_options': the "
                         "same signature (table, options) -> options for every kind"),
}


def _public_top_level(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")]


def duplicate_names() -> dict[str, frozenset[str]]:
    """Every public top-level class or function name defined in more than one module, with the modules."""
    where: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in _public_top_level(path):
                where[name].add(path.relative_to(ROOT).as_posix())
    return {name: frozenset(paths) for name, paths in where.items() if len(paths) > 1}


def test_no_public_name_is_defined_twice_with_another_contract():
    unexplained = {name: sorted(paths) for name, paths in duplicate_names().items()
                   if name not in ALLOWED or ALLOWED[name][0] != paths}
    assert not unexplained, (
        "the same public name is defined in more than one module; rename one (a name says what it is) or, "
        f"when both are truly one contract, add it to ALLOWED with why: {unexplained}")


def test_every_allowed_repeat_still_exists():
    # an entry whose repeat is gone is stale: the list stays exactly as long as it must be
    found = duplicate_names()
    stale = sorted(name for name in ALLOWED if name not in found)
    assert not stale, f"ALLOWED lists names no longer repeated: {stale}"
    assert all(reason.strip() for _, reason in ALLOWED.values())


def test_the_check_sees_a_repeat(tmp_path, monkeypatch):
    # the scan itself: two modules defining one public name are reported, private names are not
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "tasks" / "a.py").write_text("class Lease:\n    pass\n\ndef _helper():\n    pass\n")
    (tmp_path / "scheduler" / "b.py").write_text("def Lease():\n    pass\n\ndef _helper():\n    pass\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert duplicate_names() == {"Lease": frozenset({"tasks/a.py", "scheduler/b.py"})}
