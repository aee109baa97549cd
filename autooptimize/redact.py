"""The one redaction: passwords, tokens and keys masked in any text before it is shown or stored.

:func:`redact` masks, in any text:

* the password of a URL, ``scheme://user:PASSWORD@host`` and ``scheme://:PASSWORD@host`` (the form
  ``redis://:PASSWORD@redis:6379/0`` takes);
* the value of a parameter whose name says it holds a secret: ``password=``, ``passwd=``, ``pwd=``,
  ``token=``, ``secret=``, ``credential=`` and names ending in them (``aws_secret=``, ``;token=`` of a
  Spark Connect URL), ``key=`` and the usual key names (``api_key=``, ``s3.secret-access-key=``), after
  ``?``, ``&``, ``;``, a space or the start of the text, and the same names as quoted keys
  (``"token": "…"``);
* the same names as unquoted keys, ``token: abc`` (YAML, a header, a log line), and an
  ``Authorization:`` header's credentials (``Bearer …``, ``Basic …``) or a ``Bearer …`` anywhere;
* every secret value the settings hold (AO_DATABASE_URL's and AO_REDIS_URL's passwords, AO_SPARK_TOKEN,
  AO_FLOWER_PASSWORD): :func:`remember_secrets` records them when the settings are loaded, so a
  password that leaks into a library's message in another shape is masked too. Values shorter than
  :data:`MIN_SECRET_LENGTH` are not masked this way (they would mask ordinary words).

:func:`redact_value` applies it to nested dicts and lists and masks the whole value of a key named like
a secret. :func:`install_log_redaction` makes every log record of the process pass through it (every
entry point calls it). This module imports nothing of ours, so every layer may use it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

MASK = "***"
MIN_SECRET_LENGTH = 6

_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"<>]*:)(?P<secret>[^\s'\"<>]*)@")
_SECRET_NAME = (r"[\w.\-]*(?:password|passwd|pwd|token|secret|credentials?)"
                r"|(?:[\w.\-]*[_.\-])?(?:api|access|secret|private|account|sas|signing|encryption|master)[_\-]?key"
                r"|key")
_PARAM = re.compile(rf"(?P<head>(?:^|(?<=[?&;\s,({{\[]))(?:{_SECRET_NAME})=)(?P<secret>[^&;\s'\",)}}\]]*)",
                    re.IGNORECASE)
# the same names as quoted keys of JSON or a Python repr: "token": "..."
_QUOTED = re.compile(rf"(?P<head>(?P<q>[\"'])(?:{_SECRET_NAME})(?P=q)\s*:\s*(?P<v>[\"']))(?P<secret>[^\"']*)(?P=v)",
                     re.IGNORECASE)
# YAML, headers and logs: token: abc, s3.secret-access-key: "abc" (the key unquoted)
_COLON = re.compile(rf"(?P<head>(?:^|(?<=[\s,;{{(\[]))(?:{_SECRET_NAME})\s*:[ \t]*(?P<v>[\"']?))"
                    rf"(?P<secret>(?!//)[^\s,;'\"}})\]]+)", re.IGNORECASE | re.MULTILINE)
# Authorization: Bearer abc / Basic abc / a bare token; and "Bearer abc" wherever it appears
_AUTHORIZATION = re.compile(r"(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|digest|token|aws4-hmac-sha256)\s+)?)"
                            r"(?P<secret>[^\s'\",;]+)", re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:bearer|basic)\s+)(?P<secret>[A-Za-z0-9\-._~+/]{6,}=*)", re.IGNORECASE)
_KEY_NAME = re.compile(rf"^(?:{_SECRET_NAME})$", re.IGNORECASE)

_known: set[str] = set()
_known_pattern: re.Pattern[str] | None = None
_lock = threading.Lock()


def remember_secrets(values: Iterable[str | None]) -> None:
    """Mask these values wherever they appear from now on (also in their URL-encoded form)."""
    global _known_pattern
    fresh = {form for v in values if v and len(v) >= MIN_SECRET_LENGTH for form in (v, quote(v, safe=""), unquote(v))
             if len(form) >= MIN_SECRET_LENGTH}
    with _lock:
        if fresh <= _known:
            return
        _known.update(fresh)
        # longest first, so a secret that contains another is masked whole
        _known_pattern = re.compile("|".join(re.escape(s) for s in sorted(_known, key=len, reverse=True)))


def redact(text: str) -> str:
    """``text`` with every password, token and key masked as ``***`` (see the module docstring)."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: m["head"] + (MASK if m["secret"] else "") + "@", text)
    text = _PARAM.sub(lambda m: m["head"] + (MASK if m["secret"] else ""), text)
    text = _QUOTED.sub(lambda m: m["head"] + (MASK if m["secret"] else "") + m["v"], text)
    text = _AUTHORIZATION.sub(lambda m: m["head"] + MASK, text)
    text = _BEARER.sub(lambda m: m["head"] + MASK, text)
    text = _COLON.sub(_colon, text)
    pattern = _known_pattern
    return pattern.sub(MASK, text) if pattern is not None else text


def _colon(m: re.Match[str]) -> str:
    # "AO_SPARK_TOKEN: is empty" names one of our settings in a message: not a value
    if m["head"].lstrip().startswith("AO_"):
        return m[0]
    return m["head"] + MASK


def redact_value(value: Any) -> Any:
    """``value`` with every string redacted, recursively through dicts, lists and tuples; the value of a
    dict key named like a secret (``password``, ``token``, ``api_key``, …) is masked whole."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and _KEY_NAME.match(k) and v is not None else redact_value(v))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


def _redact_record(record: logging.LogRecord) -> None:
    """Redact the record's message, traceback and stack in place (formatted now, once)."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when a handler formats the record
        return
    record.msg, record.args = redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process, whichever handler formats it (Celery's and Flower's
    included, and handlers added later): a log record factory rather than a filter, because a filter on
    a logger does not see the records that propagate to it from other loggers. Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _redact_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
