"""The ``autooptimize`` command line. Exit codes: 0 done, 1 the action did not succeed, 2 bad input
(unknown table, malformed partition, invalid option, argument or configuration; nothing was changed),
3 a service is unreachable, 4 timed out waiting. Whatever it prints and logs is redacted
(:mod:`autooptimize.redact`)."""

from __future__ import annotations

import sys

from autooptimize.cli.common import current_settings, redacted_output
from autooptimize.cli.parser import Parser, build_parser
from autooptimize.errors import (
    ActionNotFound,
    AutoOptimizeError,
    ConfigError,
    InvalidArgument,
    ServiceUnavailable,
    TableNotFound,
    WaitTimeout,
)
from autooptimize.failures import failure_text, is_transient
from autooptimize.redact import install_log_redaction, redact


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit code (see the module docstring), never a traceback for our errors."""
    install_log_redaction()
    with redacted_output():
        words = sys.argv[1:] if argv is None else argv
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # argparse has printed the usage and why: 2 for bad input, 0 for --help
            code = exc.code if isinstance(exc.code, int) else 2
            if code and "--json" in words:  # where the result would be: one JSON object saying why
                import json

                why = Parser.last_error or "invalid arguments: " + " ".join(words)
                print(json.dumps({"error": {"type": "InvalidArgument", "exit_code": code,
                                            "message": redact(why) + " (see --help)"}}))
            return code
        return _run(args)


def _run(args: object) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        return int(args.func(args) or 0)  # type: ignore[attr-defined]
    except (InvalidArgument, TableNotFound, ConfigError, ActionNotFound) as exc:
        return _error(exc, str(exc), 2, as_json)
    except ServiceUnavailable as exc:
        return _error(exc, str(exc), 3, as_json)
    except WaitTimeout as exc:
        return _error(exc, str(exc), 4, as_json)
    except AutoOptimizeError as exc:
        return _error(exc, str(exc), 1, as_json)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # connection failures surfacing from libraries: name the service, no traceback
        from sqlalchemy.exc import OperationalError

        if isinstance(exc, OperationalError):
            url = redact(current_settings().database_url)
            return _error(exc, f"cannot reach PostgreSQL at {url}: {str(exc.orig).strip()}", 3, as_json)
        if is_transient(exc):
            return _error(exc, f"a service did not answer: {redact(failure_text(exc))}", 3, as_json)
        raise


def _error(exc: BaseException, message: str, code: int, as_json: bool) -> int:
    """Report an error on stderr; with ``--json`` also as one JSON object on stdout, where the result would be."""
    print(f"autooptimize: error: {message}", file=sys.stderr)
    if as_json:
        import json

        print(json.dumps({"error": {"type": type(exc).__name__, "message": message, "exit_code": code}}))
    return code
