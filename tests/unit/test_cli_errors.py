"""Errors under --json: the exit code as before, and one JSON object on stdout naming the error."""

from __future__ import annotations

import json

import pytest

from autooptimize import __version__
from autooptimize.cli import actions, main
from autooptimize.errors import InvalidArgument, ServiceUnavailable, WaitTimeout


@pytest.mark.parametrize(("error", "code"), [(InvalidArgument("bad partition 'x'"), 2),
                                             (ServiceUnavailable("cannot reach Redis"), 3),
                                             (WaitTimeout("action a is still queued after 1 s"), 4)])
def test_json_errors_keep_their_exit_code(monkeypatch, capsys, error, code):
    def fail(_args):
        raise error

    monkeypatch.setattr(actions, "cmd_optimize", fail)
    assert main(["optimize", "db.t", "--json"]) == code
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": {"type": type(error).__name__, "message": str(error), "exit_code": code}}
    assert str(error) in err
    assert main(["optimize", "db.t"]) == code
    out, err = capsys.readouterr()
    assert out == "" and str(error) in err


def test_version(capsys):
    assert main(["--version"]) == 0  # argparse's exit is returned as the code (the CLI runs in-process too)
    assert capsys.readouterr().out.strip() == f"autooptimize {__version__}"


@pytest.mark.parametrize("argv", [["status", "--json", "--bogus"], ["optimize", "--json"],
                                  ["track", "db.t", "--json", "--weight", "0"]])
def test_json_argument_errors_answer_on_stdout(capsys, argv):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["exit_code"] == 2 and error["type"] == "InvalidArgument"
    assert "autooptimize" in error["message"] and error["message"].split(": ", 1)[1].split(" (see")[0] in err
