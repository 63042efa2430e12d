"""Log formatting: secrets redacted in every line, and one JSON object per line with
`OPENWOP_LOG_FORMAT=json` (openwop_host/settings.py LOGGING).

Redaction is a last line of defence (the code never logs a secret on purpose: STYLE.md habit 16):
whatever looks like a credential in a message or a traceback becomes "[redacted]" before the
line is written. It recognises Bearer tokens, this host's API keys, `password=` / `secret=` /
`token=`-like pairs (also `key: value` and quoted forms) and the userinfo of URLs
(`scheme://user:pass@host`).

**Context** (issue 51 item 3): a line says which tenant (its slug), operation and ids it is about,
from the call's `extra=` or from the *log scope* a request, task or delivery opened
(`log_scope`/`log_scoped`; `log_bind` adds what the code learns on the way, such as the caller's
tenant once its key resolves). A record factory (`scope_stamping_install`, from CoreConfig.ready)
stamps each record with the scope open where it is made, so every handler sees the fields, the
test suite's too; the JSON format writes them as keys, the text format after the message as
`[tenant=acme operation=SendMessage taskId=...]`. Values are the caller's strings at times (an
operation name, a task id): JSON escapes them, the text format quotes any that is not plain.

Standard library only: LOGGING is configured before Django's apps load.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

REDACTED = "[redacted]"

# The raw API key apps/tenants/services.py api_key_create mints: f"{KEY_SCHEME}_{prefix}.{secret}".
_API_KEY = re.compile(r"\bowk_[A-Za-z0-9]+\.[A-Za-z0-9_\-]+")
# Everything between `scheme://` and the last `@` of the same word: a password may hold `/` or `@`.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)(?:[^\s/@]*:\S*@|[^\s/?#@:]+@)")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*")
_KEY_VALUE = re.compile(
    r"(?i)\b([\w.\-]*?(?:password|passwd|pwd|secret|secret[_\-]?key|token|api[_\-]?key|credentials?))"
    r"(['\"]?\s*[=:]\s*)"
    r"(\"[^\"]*\"|'[^']*'|[^\s'\",;&)}\]]+)"
)


def redact(text: str) -> str:
    """`text` with anything that looks like a secret replaced by "[redacted]"."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _API_KEY.sub(REDACTED, text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


# The context a line carries: LogRecord attributes (from `extra=` or the log scope) and their keys
# in a JSON line (and after a text line's message).
CONTEXT = (
    ("tenant", "tenant"), ("operation", "operation"), ("run_id", "runId"), ("task_id", "taskId"),
    ("delivery_id", "deliveryId"), ("config_id", "configId"), ("webhook_id", "webhookId"), ("job", "job"),
    ("trace_id", "traceId"),
)  # fmt: skip
_CONTEXT_ATTRIBUTES = frozenset(attribute for attribute, _ in CONTEXT)
# A value at most this long (an id is far shorter); a longer one is cut.
_VALUE_MAX = 200
# The attribute of a record holding the scope it was made in (a copy).
SCOPE_ATTRIBUTE = "openwop_log_scope"

_scope: ContextVar[dict[str, str] | None] = ContextVar("openwop_log_scope", default=None)


def _fields(fields: dict[str, object]) -> dict[str, str]:
    unknown = set(fields) - _CONTEXT_ATTRIBUTES
    if unknown:
        raise ValueError(f"not a log context field: {', '.join(sorted(unknown))}")
    return {name: str(value)[:_VALUE_MAX] for name, value in fields.items() if value is not None and value != ""}


def log_scope(**fields: object) -> Token[dict[str, str] | None]:
    """Open a scope (one request, task or delivery) with these fields; end it with `log_scope_end`.
    Tasks and threads that copy this context (asyncio tasks, sync_to_async) share the scope."""
    return _scope.set(_fields(fields))


def log_scope_end(token: Token[dict[str, str] | None]) -> None:
    _scope.reset(token)


@contextmanager
def log_scoped(**fields: object) -> Iterator[None]:
    token = log_scope(**fields)
    try:
        yield
    finally:
        _scope.reset(token)


def log_bind(**fields: object) -> None:
    """Add fields to the open scope. Outside any scope nothing happens: a field never outlives the
    work it belongs to (a worker thread's next task)."""
    scope = _scope.get()
    if scope is not None:
        scope.update(_fields(fields))


def record_context(record: logging.LogRecord) -> dict[str, str]:
    """The context of `record` by JSON key: its `extra=` attributes first, then its scope's."""
    scope = getattr(record, SCOPE_ATTRIBUTE, None) or {}
    context: dict[str, str] = {}
    for attribute, key in CONTEXT:
        value = getattr(record, attribute, None)
        if value is None or value == "":
            value = scope.get(attribute)
        if value is not None and value != "":
            context[key] = str(value)[:_VALUE_MAX]
    return context


def scope_stamping_install() -> None:
    """Make every new LogRecord carry a copy of the scope open where it is made (idempotent). A
    record factory rather than a handler's filter: the fields reach every handler, and cannot clash
    with a call's `extra=` (which may name the same fields: they win)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "openwop_stamps_scope", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        scope = _scope.get()
        if scope:
            setattr(record, SCOPE_ATTRIBUTE, dict(scope))
        return record

    factory.openwop_stamps_scope = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


# A value the text format writes bare; any other is written as a JSON string (quoted, escaped), so
# a caller's string can never start a line of its own or pass for another field.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._:/@+~-]+", re.ASCII)


def _text_value(value: str) -> str:
    return value if _PLAIN_VALUE.fullmatch(value) else json.dumps(value)


class RedactingFormatter(logging.Formatter):
    """The plain text format (`%(message)s` unless configured otherwise), the record's context
    after it, redacted."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = super().formatMessage(record)
        context = record_context(record)
        if context:
            message += " [" + " ".join(f"{key}={_text_value(value)}" for key, value in context.items()) + "]"
        return message

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message; the context keys
    (tenant, operation, runId, taskId, deliveryId, configId, webhookId, job, traceId) the record
    carries, from `extra=` or its scope; exc_type and the redacted traceback (exc) for an exception."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, tz=UTC)
        entry: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in record_context(record).items():
            entry[key] = redact(value)
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exc"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)
