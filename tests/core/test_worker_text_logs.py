"""A Celery worker's text logs (OPENWOP_LOG_FORMAT=text, where Celery installs handlers of its own)
keep Celery's line format and carry what the web processes' lines carry: the record's context
(tenant, operation, ids) and the redaction of anything that looks like a secret
(openwop_host/celery.py, on Celery's own `after_setup_logger` signal). A handler the host's LOGGING
made (JSON logs) keeps its formatter."""

from __future__ import annotations

import io
import logging

from celery.signals import after_setup_logger

from apps.core.logformat import JsonFormatter, log_scoped, scope_stamping_install

CELERY_FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"  # worker_log_format's default


def _logger(name: str, formatter: logging.Formatter | None) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    if formatter is not None:
        handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def test_a_worker_text_line_keeps_celerys_format_with_its_context_and_no_secret() -> None:
    scope_stamping_install()
    logger, out = _logger("test.worker-text", logging.Formatter(CELERY_FORMAT))  # as Celery sets it up
    after_setup_logger.send(sender=None, logger=logger, loglevel=logging.INFO, logfile=None,
                            format=CELERY_FORMAT, colorize=False)  # fmt: skip
    with log_scoped(tenant="acme", operation="runs.advance", run_id="acme/run-1"):
        logger.error("node failed calling with Authorization: Bearer sk-live-0123456789abcdef")
    line = out.getvalue()
    assert line.startswith("[") and ": ERROR/MainProcess] node failed calling with" in line, line
    assert "tenant=acme" in line and "operation=runs.advance" in line and "acme/run-1" in line, line
    assert "sk-live-0123456789abcdef" not in line and "[redacted]" in line, line


def test_a_handler_the_hosts_logging_made_keeps_its_json() -> None:
    scope_stamping_install()
    formatter = JsonFormatter()
    logger, out = _logger("test.worker-json", formatter)
    after_setup_logger.send(sender=None, logger=logger, loglevel=logging.INFO, logfile=None,
                            format=CELERY_FORMAT, colorize=False)  # fmt: skip
    assert logger.handlers[0].formatter is formatter
    logger.info("ready")
    assert out.getvalue().startswith('{"time": ') or out.getvalue().startswith('{"time":'), out.getvalue()
