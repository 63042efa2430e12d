"""With PROMETHEUS_MULTIPROC_DIR shared (README "Metrics"), /metrics sums what every process of the
host recorded: here two separate processes record (as two web processes or a web process and a
Celery worker would), and the scrape shows both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.metrics_samples import scraped_in_process

ROOT = Path(__file__).resolve().parents[2]

RECORD = """
import os, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
django.setup()
from apps.core import metrics
metrics.request_observed("a2a", "GetTask", "ok", time.perf_counter())
metrics.push_attempt_settled("dead")
metrics.run_events_committed("mcp", ["run.started", "run.completed"])
"""


def test_the_scrape_sums_every_process(db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_DEBUG": "1"}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", RECORD], cwd=ROOT, env=env, check=True, timeout=120)
    assert list(tmp_path.glob("*.db")), "the processes wrote no samples to the shared directory"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scraped_in_process()
    request = (("door", "a2a"), ("operation", "GetTask"), ("outcome", "ok"))
    assert samples[("openwop_requests_total", request)] == 2
    assert samples[("openwop_push_attempts_total", (("result", "dead"),))] == 2
    assert samples[("openwop_runs_finished_total", (("status", "completed"), ("transport", "mcp")))] == 2
    assert ("openwop_push_oldest_pending_age_seconds", ()) in samples  # read at scrape time, beside them
