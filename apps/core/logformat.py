"""Log formatting: secrets redacted in every line, and one JSON object per line with
`OPENWOP_LOG_FORMAT=json` (openwop_host/settings.py LOGGING).

Redaction is a last line of defence (the code never logs a secret on purpose: STYLE.md habit 16):
whatever looks like a credential in a message or a traceback becomes "[redacted]" before the
line is written. It recognises Bearer tokens, this host's API keys, `password=` / `secret=` /
`token=`-like pairs (also `key: value` and quoted forms) and the userinfo of URLs
(`scheme://user:pass@host`).

Standard library only: LOGGING is configured before Django's apps load.
"""

from __future__ import annotations

import json
import logging
import re
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


class RedactingFormatter(logging.Formatter):
    """The plain text format (`%(message)s` unless configured otherwise), redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


# LogRecord attributes (set through `extra=`) copied into a JSON line, and their keys there.
_CONTEXT = (("tenant", "tenant"), ("run_id", "runId"), ("trace_id", "traceId"))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message; tenant, runId and
    traceId when the record carries them (`extra={"tenant": ..., "run_id": ..., "trace_id": ...}`);
    exc_type and the redacted traceback (exc) for an exception."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, tz=UTC)
        entry: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for attribute, key in _CONTEXT:
            value = getattr(record, attribute, None)
            if value is not None and value != "":
                entry[key] = redact(str(value))
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exc"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)
