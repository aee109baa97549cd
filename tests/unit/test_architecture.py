"""The house rules, checked on the source: imports point down, no cycles, no module over 400 lines.

Every import counts, those inside functions included (an import deferred into a function is still a
dependency). Layers, from the bottom: ``domain`` (and ``errors``); the adapters ``storage``, ``arrow``,
``iceberg``, ``engines`` and ``spark_actors``; ``services``; the entry points ``tasks``, ``scheduler``,
``api``, ``cli`` and ``console``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("autooptimize", "tasks", "scheduler", "spark_actors")
MAX_LINES = 400

ENTRY_POINTS = ("tasks", "scheduler", "autooptimize.api", "autooptimize.cli", "autooptimize.console")
ADAPTERS = ("autooptimize.storage", "autooptimize.iceberg", "autooptimize.engines", "autooptimize.arrow", "spark_actors")
# What each layer may not import (a prefix matches the module and everything below it).
FORBIDDEN: dict[tuple[str, ...], tuple[str, ...]] = {
    ("autooptimize.domain",): ("autooptimize.storage", "autooptimize.iceberg", "autooptimize.engines",
                               "spark_actors", "autooptimize.services", "autooptimize.config",
                               *ENTRY_POINTS, "autooptimize.demo"),
    ADAPTERS: ("autooptimize.services", *ENTRY_POINTS, "autooptimize.demo"),
    ("autooptimize.services",): (*ENTRY_POINTS, "autooptimize.demo"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


SOURCES = _sources()


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _resolve(name: str) -> str:
    """The longest prefix of ``name`` that is one of our modules (``from a.b import c`` may name a module)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in SOURCES:
            return candidate
        parts.pop()
    return name


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                names.add(f"{origin}.{alias.name}")
    return {_resolve(n) for n in names if _ours(n)} - {module}


GRAPH = {module: _imports(module, path) for module, path in SOURCES.items()}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_walk_sees_the_tree() -> None:
    # guards the test itself: an empty or broken walk would pass every rule below
    assert len(SOURCES) > 40
    assert "autooptimize.domain.entropy" in SOURCES
    assert any(GRAPH[m] for m in SOURCES)


def test_imports_point_down() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for layer, forbidden in FORBIDDEN.items()
        if _within(module, layer)
        for target in targets
        if _within(target, forbidden)
    )
    assert not wrong, "imports that point up:\n" + "\n".join(wrong)


def test_domain_imports_nothing_of_ours_but_domain_and_errors() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _within(module, ("autooptimize.domain",))
        for target in targets
        if not _within(target, ("autooptimize.domain", "autooptimize.errors"))
    )
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_no_import_cycle_between_packages() -> None:
    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == "autooptimize" and len(parts) > 1 else parts[0]

    packages: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        packages.setdefault(package(module), set()).update(package(t) for t in targets if package(t) != package(module))
    cycles = _cycles(packages)
    assert not cycles, "package cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_module_is_at_most_400_lines(module: str) -> None:
    lines = len(SOURCES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{SOURCES[module].relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"


def test_every_path_in_the_where_to_find_it_table_exists():
    """docs/architecture.md's "Where each thing lives": a reader finds each concept at the path it names."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "architecture.md").read_text()
    section = text[text.index("## Where each thing lives"):]
    section = section[:section.index("\n## ", 1)]
    missing, seen = [], 0
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| concern"):
            continue
        for token in re.findall(r"`([^`]+)`", line.rsplit("|", 2)[-2]):
            path = token.split()[0]
            if not re.search(r"\.py$|\.py\}|/$|\}$", path) and "/" not in path:
                continue
            match = re.match(r"^(.*)\{([^}]*)\}(.*)$", path)
            paths = [f"{match.group(1)}{alt}{match.group(3)}" for alt in match.group(2).split(",")] if match else [path]
            for one in paths:
                if not one.endswith(".py") and not one.endswith("/"):
                    continue
                seen += 1
                candidates = [root / one, root / "autooptimize" / one]
                if not any(c.exists() for c in candidates):
                    missing.append(one)
    assert seen >= 40, f"only {seen} paths found: the table's format changed"
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


# -- imports at the top ----------------------------------------------------------------------------
# A module's own imports sit at its top, where a reader sees what it depends on. An import of our own
# modules inside a function is allowed when it keeps a costly dependency (Celery, FastAPI, pyspark) off
# the import path of a module that does not otherwise load it (computed below: the CLI's commands, for
# one, import the Celery-backed API only when run), when it is a command of the CLI importing a module
# that loads autooptimize.iceberg (whose import checks pyiceberg's configuration file: a bad one must be
# the ConfigError cli.main maps to exit code 2, raised inside it, not a traceback at import), or when it
# is listed here with why.
COSTLY = ("celery", "fastapi", "uvicorn", "pyspark")
DEFERRED_IMPORTS: dict[tuple[str, str], str] = {
    # (importing module, imported module): why it is inside a function
    ("spark_actors.action_job", "spark_actors.action_job"):
        "runs on the executor after the task has put our shipped code first on sys.path",
    ("tasks.app", "spark_actors.warmup"):
        "only an actor worker's forked process warms up; the CLI, listener and beat import the app and would "
        "load pyarrow and numba for nothing (0.9 s a start)",
}
# Modules whose imports have not moved up yet (none: keep it so, or say here why one is late)
PENDING: tuple[str, ...] = ()


def _top_level_imports(path: Path) -> tuple[set[str], set[str]]:
    """(our modules, third-party top-level packages) imported when ``path`` is imported (type-checking
    blocks left out; a module-level ``try`` counts)."""
    ours: set[str] = set()
    third: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        for n in node.body if isinstance(node, ast.Try) else [node]:
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level:
                names = [f"{n.module}.{a.name}" for a in n.names] if _ours(n.module or "") else [n.module or ""]
            else:
                continue
            for name in names:
                (ours.add(_resolve(name)) if _ours(name) else third.add(name.split(".")[0]))
    return ours, third


def _loading(seed: set[str] | None = None) -> set[str]:
    """Our modules whose import loads one of ``seed`` (default: a module importing one of :data:`COSTLY`),
    directly or through our other modules and their packages."""
    graph: dict[str, set[str]] = {}
    costly: set[str] = set(seed or ())
    for module, path in SOURCES.items():
        ours, third = _top_level_imports(path)
        parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        graph[module] = ours | (parents & set(SOURCES))
        if seed is None and third & set(COSTLY):
            costly.add(module)
    grew = True
    while grew:
        grew = False
        for module, targets in graph.items():
            if module not in costly and targets & costly:
                costly.add(module)
                grew = True
    return costly


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, our module) of every import of our own modules inside a function of ``path``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import):
                found.extend((child.lineno, _resolve(a.name)) for a in child.names if _ours(a.name))
            elif in_function and isinstance(child, ast.ImportFrom) and _ours(child.module or ""):
                found.extend((child.lineno, _resolve(f"{child.module}.{a.name}")) for a in child.names)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text()), False)
    return found


def test_imports_of_our_modules_sit_at_the_top_unless_deferred_for_a_reason() -> None:
    costly = _loading()
    checks_config = _loading({"autooptimize.iceberg"})
    assert {"tasks.app", "autooptimize.console.app"} <= costly  # guards the computation itself
    assert {"autooptimize.iceberg.catalog", "autooptimize.api"} <= checks_config

    def deferred(module: str, target: str) -> bool:
        return ((module, target) in DEFERRED_IMPORTS or (target in costly and module not in costly)
                or (_within(module, ("autooptimize.cli",)) and target in checks_config))

    wrong = sorted(
        f"{SOURCES[module].relative_to(ROOT)}:{line} imports {target} inside a function"
        for module, path in SOURCES.items() if module not in PENDING
        for line, target in _function_level_imports(path)
        if not deferred(module, target)
    )
    assert not wrong, ("move these imports to the top of their module (or say in DEFERRED_IMPORTS why "
                       "not):\n" + "\n".join(wrong))


def test_every_deferred_import_is_still_there() -> None:
    present = {(module, target) for module, path in SOURCES.items() for _, target in _function_level_imports(path)}
    assert set(DEFERRED_IMPORTS) <= present, f"stale entries: {set(DEFERRED_IMPORTS) - present}"
    assert all(module in SOURCES for module in PENDING)
