"""`manage.py facet_set`: the facet from the command line, through the admin's own service."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.core.actors import os_user
from apps.facets.models import Facet, FacetChange
from apps.facets.services import facet_ensure
from tests.live import process_env

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def _set(*args: str) -> str:
    out = io.StringIO()
    call_command("facet_set", *args, stdout=out)
    return out.getvalue()


def test_offering_a_revision_and_moving_the_floor_is_audited() -> None:
    facet_ensure(protocol="mcp")
    out = _set("--protocol", "mcp", "--versions", "2026-07-28, 2025-11-25", "--minimum", "2025-11-25", "--actor", "ops")
    assert out.strip() == "mcp: versions 2026-07-28, 2025-11-25; preferred 2026-07-28; minimum 2025-11-25"
    facet = Facet.objects.get(protocol="mcp")
    assert facet.versions == ["2026-07-28", "2025-11-25"] and facet.minimum_version == "2025-11-25"
    change = FacetChange.objects.filter(actor=f"cli:{os_user()} as ops").get()  # who ran it, and the claim
    assert change.before["minimum_version"] == "2026-07-28" and change.after["minimum_version"] == "2025-11-25"
    _set("--protocol", "mcp", "--minimum", "2025-11-25", "--actor", "ops")  # unchanged: no second row
    assert FacetChange.objects.filter(actor=f"cli:{os_user()} as ops").count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--protocol", "mcp", "--minimum", "2025-06-18"], "minimum_version"),  # not offered
        (["--protocol", "mcp", "--preferred", "1999-01-01"], "preferred_version"),
        (["--protocol", "a2a", "--versions", "1.0,,0.3"], "none empty"),
        (["--protocol", "a2a"], "Nothing to set"),
    ],
)
def test_a_refused_change_says_why_exits_2_and_changes_nothing(args: list[str], message: str) -> None:
    facet_ensure(protocol="mcp")
    facet_ensure(protocol="a2a")
    before = {f.protocol: (f.versions, f.preferred_version, f.minimum_version) for f in Facet.objects.all()}
    with pytest.raises(CommandError) as refused:
        _set(*args)
    assert refused.value.returncode == 2 and message in str(refused.value)
    after = {f.protocol: (f.versions, f.preferred_version, f.minimum_version) for f in Facet.objects.all()}
    assert after == before and not FacetChange.objects.exclude(actor="system:defaults").exists()


@pytest.mark.django_db(transaction=True)  # the child process sees (and may write) the test database
def test_the_command_exits_with_status_2_from_a_shell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "facet_set", "--protocol", "a2a", "--minimum", "0.0-never"],
        capture_output=True,
        text=True,
        timeout=60,
        env=process_env("facet-set", tmp_path),
        cwd=str(ROOT),
    )
    assert done.returncode == 2 and "minimum_version" in done.stderr and "Traceback" not in done.stderr
