"""Redaction: every URL form of a password, secret-named parameters, known secrets, logs and stdout."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from autooptimize.redact import install_log_redaction, redact, redact_value, remember_secrets


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://:Pw0rd@redis:6379/0", "redis://:***@redis:6379/0"),  # docker-compose's form: no user
    ("redis://default:Pw0rd@redis:6379/0", "redis://default:***@redis:6379/0"),
    ("postgresql+psycopg2://ao:p%40ss@db:5432/ao", "postgresql+psycopg2://ao:***@db:5432/ao"),
    ("rediss://u:p@ss:w@host/0", "rediss://u:***@host/0"),  # an unescaped '@' in the password
    ("cannot reach Redis at redis://:Pw0rd@h:1/0: Error 111", "cannot reach Redis at redis://:***@h:1/0: Error 111"),
    ("postgresql://u@h/db?password=Pw0rd&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ("http://h/x?a=1&password=Pw0rd", "http://h/x?a=1&password=***"),
    ("http://h/x?passwd=a&pwd=b", "http://h/x?passwd=***&pwd=***"),
    ("sc://h:15002/;token=abc;use_ssl=true", "sc://h:15002/;token=***;use_ssl=true"),
    ("https://hook/x?token=t1&secret=s1&key=k1", "https://hook/x?token=***&secret=***&key=***"),
    ("s3.secret-access-key=AKIA s3.access-key-id=AK", "s3.secret-access-key=*** s3.access-key-id=AK"),
    ("api_key=zz aws_secret=qq,next", "api_key=*** aws_secret=***,next"),
    ('{"token": "t", "n": 1}', '{"token": "***", "n": 1}'),
    ("{'password': 'p'}", "{'password': '***'}"),
    # not secrets: left alone
    ("redis://localhost:6379/0", "redis://localhost:6379/0"),
    ("http://user@host/path", "http://user@host/path"),
    ("partition_key=day sort_key=id monkey=1 keys=3", "partition_key=day sort_key=id monkey=1 keys=3"),
    ("redis://:@h/0", "redis://:@h/0"),  # an empty password is no secret
])
def test_redact_masks_every_form(text, shown):
    assert redact(text) == shown


def test_known_secrets_are_masked_in_any_shape():
    remember_secrets(["Sq7-vault-pass", "p@ss/Word99", None, "short"])
    assert redact("FATAL: auth with Sq7-vault-pass failed") == "FATAL: auth with *** failed"
    assert redact("quoted: p%40ss%2FWord99 and p@ss/Word99") == "quoted: *** and ***"
    assert redact("a short word") == "a short word"  # below MIN_SECRET_LENGTH: would mask ordinary words


def test_redact_value_masks_secret_keys_and_nested_strings():
    detail = {"password": "x", "api_key": "y", "urls": ["redis://:pw1@h/0", ("sc://h/;token=t",)],
              "nested": {"token": 5, "n": 3, "partition_key": "day=1"}, "none": None}
    assert redact_value(detail) == {"password": "***", "api_key": "***", "urls": ["redis://:***@h/0",
                                    ("sc://h/;token=***",)], "nested": {"token": "***", "n": 3,
                                    "partition_key": "day=1"}, "none": None}


def test_log_records_are_redacted_whoever_formats_them():
    install_log_redaction()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("test.redact.child")  # records propagate; the handler sits on the parent
    parent = logging.getLogger("test.redact")
    parent.addHandler(handler)
    parent.setLevel(logging.INFO)
    try:
        logger.info("connecting to %s", "redis://:LogPw1@h:6379/0")
        try:
            raise ConnectionError("redis://:TracePw2@h:6379/0 refused")
        except ConnectionError:
            logger.exception("failed with token=%s", "abc")
    finally:
        parent.removeHandler(handler)
    text = stream.getvalue()
    assert "LogPw1" not in text and "TracePw2" not in text and "abc" not in text
    assert "redis://:***@h:6379/0" in text and "token=***" in text and "ConnectionError" in text


def test_cli_output_is_redacted(capsys):
    from autooptimize.cli.common import print_result, redacted_output

    with redacted_output():
        print_result({"error": "cannot reach redis://:OutPw3@h/0"}, as_json=True)
        print("token=OutTok4", file=sys.stderr)
    out, err = capsys.readouterr()
    assert "OutPw3" not in out and "redis://:***@h/0" in out
    assert err.strip() == "token=***"


def test_unquoted_keys_and_authorization_headers_are_masked():
    from autooptimize.redact import redact

    cases = {
        "credential: supersecret123": "supersecret123",
        '  s3.secret-access-key: "abcdef123"': "abcdef123",
        "Authorization: Bearer eyJhbGciOi.abc.def": "eyJhbGciOi.abc.def",
        "headers={'Authorization': 'Bearer abcdefghij'}": "abcdefghij",
        "GET / Authorization: Basic dXNlcjpwYXNz": "dXNlcjpwYXNz",
        "retrying with bearer abcdef0123456789": "abcdef0123456789",
        "catalog:\n  lake:\n    token: t0k3n-v4lue\n": "t0k3n-v4lue",
    }
    for text, secret in cases.items():
        shown = redact(text)
        assert secret not in shown and "***" in shown, (text, shown)
    for harmless in ("uri: http://rest:8181", "the bearer of bad news", "s3.endpoint: http://x", "monkey: banana"):
        assert redact(harmless) == harmless
