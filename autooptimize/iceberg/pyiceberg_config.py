"""pyiceberg's own configuration file, checked before pyiceberg reads it.

pyiceberg reads ``.pyiceberg.yaml`` when its catalog module is imported and again in many calls; a
malformed file then surfaces as a YAML parser's traceback that quotes the file's lines (credentials
included). :func:`check_pyiceberg_config` reads it first and turns any failure into a ConfigError that
names the file and the line, quoting nothing of it."""

from __future__ import annotations

import os

from autooptimize.errors import ConfigError


def check_pyiceberg_config() -> None:
    """Read pyiceberg's own configuration (``.pyiceberg.yaml`` in $PYICEBERG_HOME, the home directory or
    the working directory, and ``PYICEBERG_*`` variables) as pyiceberg will; ConfigError naming the file
    and where it cannot be read. The message quotes nothing of the file: its lines may hold credentials."""
    from pyiceberg.utils.config import PYICEBERG_HOME, PYICEBERG_YML, Config

    try:
        Config()
    except Exception as exc:
        candidates = [d for d in (os.environ.get(PYICEBERG_HOME), os.path.expanduser("~"), os.getcwd()) if d]
        found = next((os.path.join(d, PYICEBERG_YML) for d in candidates
                      if os.path.isfile(os.path.join(d, PYICEBERG_YML))), f"{PYICEBERG_YML} or PYICEBERG_* variables")
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        what = f"{type(exc).__name__}: {problem}" if isinstance(problem, str) else type(exc).__name__
        raise ConfigError(f"cannot read pyiceberg's configuration {found}{where} ({what}); fix the file (YAML "
                          "with a 'catalog:' mapping) or move it away to use the built-in catalog") from None
