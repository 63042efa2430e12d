"""OPENWOP_LOG_FORMAT=json (apps/core/logformat.py): one JSON object per line with the required
keys, and no secret in any of them: Bearer tokens, this host's API keys, URL userinfo and
`password=`-like pairs are redacted, in messages and in tracebacks alike."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from apps.core.logformat import JsonFormatter

ROOT = Path(__file__).resolve().parent.parent.parent

BEARER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.bearer-payload_7f3a.sig-9c2e"
DSN = "postgres://user:secret@host/db"
REQUIRED = {"time", "level", "logger", "message"}


def _json_logger(stream: io.StringIO) -> logging.Logger:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"tests.json_logs.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    return logger


def test_every_line_is_one_json_object_without_a_secret(make_key: Callable[..., str]) -> None:
    key = make_key("acme")
    stream = io.StringIO()
    logger = _json_logger(stream)

    logger.info("request with Authorization: Bearer %s", BEARER_TOKEN)
    logger.warning("key %s used", key, extra={"tenant": "acme", "run_id": "run-42", "trace_id": "trace-7"})
    logger.error("connecting to %s failed", DSN)
    logger.info("login password=hunter2 refused\nsecond line")
    try:
        raise ValueError(f"cannot open {DSN} with {key}")
    except ValueError:
        logger.exception("boom with Bearer %s", BEARER_TOKEN)

    output = stream.getvalue()
    lines = output.splitlines()
    assert len(lines) == 5  # a newline in a message stays inside its JSON string
    entries = [json.loads(line) for line in lines]
    for entry in entries:
        assert entry.keys() >= REQUIRED
        assert datetime.fromisoformat(entry["time"]).utcoffset() == timedelta(0)
        assert entry["logger"] == logger.name
    assert [e["level"] for e in entries] == ["INFO", "WARNING", "ERROR", "INFO", "ERROR"]
    assert (entries[1]["tenant"], entries[1]["runId"], entries[1]["traceId"]) == ("acme", "run-42", "trace-7")
    assert "tenant" not in entries[0] and "runId" not in entries[0] and "traceId" not in entries[0]
    assert entries[4]["exc_type"] == "ValueError"
    assert "cannot open" in entries[4]["exc"]  # the traceback is kept, redacted
    assert "[redacted]" in entries[2]["message"] and "host/db" in entries[2]["message"]

    for secret in (BEARER_TOKEN, key, key.split(".", 1)[1], "user:secret", "secret@", "hunter2"):
        assert secret not in output, secret


def test_the_settings_switch_every_line_to_json(tmp_path: Path) -> None:
    """A real process configured by openwop_host/settings.py: the root logger and Django's own
    loggers (which bring text handlers of their own in DEBUG) all write redacted JSON; the default
    stays the bare message, redacted."""
    code = (
        "import django, logging; django.setup();"
        "logging.getLogger('apps.example').warning('retrying password=hunter2 at %s', 'redis://:pw9@r:6379/0');"
        "logging.getLogger('django').warning('django says token=abc123');"
        "logging.getLogger('django.server').info('served')"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "OPENWOP_"))}
    base.update(
        DJANGO_DEBUG="1",
        DJANGO_SETTINGS_MODULE="openwop_host.settings",
        OPENWOP_VAR_DIR=str(tmp_path),
        OPENWOP_ENV_FILE=str(tmp_path / "absent.env"),
    )

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={**base, **extra}, capture_output=True, text=True, timeout=60
        )

    as_json = run(OPENWOP_LOG_FORMAT="json")
    assert as_json.returncode == 0, as_json.stderr
    entries = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert [(e["logger"], e["level"]) for e in entries] == [
        ("apps.example", "WARNING"),
        ("django", "WARNING"),
        ("django.server", "INFO"),
    ]
    assert all(e.keys() >= REQUIRED for e in entries)
    assert entries[0]["message"] == "retrying password=[redacted] at redis://[redacted]@r:6379/0"

    as_text = run()
    assert as_text.returncode == 0, as_text.stderr
    assert "retrying password=[redacted] at redis://[redacted]@r:6379/0" in as_text.stderr.splitlines()
    for output in (as_json.stderr, as_text.stderr):
        assert "hunter2" not in output and "pw9" not in output

    refused = run(OPENWOP_LOG_FORMAT="yaml")
    assert refused.returncode != 0 and "OPENWOP_LOG_FORMAT must be" in refused.stderr


def test_a_line_names_the_context_of_its_scope_and_escapes_caller_strings() -> None:
    """Issue 51 item 3: the tenant, operation and ids of the scope a line is written in (or of its
    `extra=`, which wins) reach both formats; a caller's string cannot break a text line, and no
    field outlives its scope."""
    from apps.core.logformat import RedactingFormatter, log_bind, log_scoped, scope_stamping_install

    scope_stamping_install()
    stream, text = io.StringIO(), io.StringIO()
    logger = _json_logger(stream)
    text_handler = logging.StreamHandler(text)
    text_handler.setFormatter(RedactingFormatter())
    logger.addHandler(text_handler)

    log_bind(tenant="nobody")  # no scope open: nothing is kept
    with log_scoped(operation="GetTask", task_id="acme/t-1"):
        log_bind(tenant="acme")
        logger.error("failed")
        logger.error("failed again", extra={"delivery_id": "d-9", "operation": "push.deliver"})
        log_bind(task_id="acme/x\n[tenant=globex] forged")
        logger.error("hostile id")
    logger.error("after")

    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert {k: entries[0].get(k) for k in ("tenant", "operation", "taskId")} == {
        "tenant": "acme", "operation": "GetTask", "taskId": "acme/t-1",
    }  # fmt: skip
    assert (entries[1]["operation"], entries[1]["deliveryId"], entries[1]["tenant"]) == ("push.deliver", "d-9", "acme")
    assert entries[2]["taskId"] == "acme/x\n[tenant=globex] forged"  # JSON escapes it
    assert "tenant" not in entries[3] and "operation" not in entries[3]
    lines = text.getvalue().splitlines()
    assert lines[0] == "failed [tenant=acme operation=GetTask taskId=acme/t-1]"
    assert lines[2] == 'hostile id [tenant=acme operation=GetTask taskId="acme/x\\n[tenant=globex] forged"]'
    assert lines[3] == "after" and len(lines) == 4
