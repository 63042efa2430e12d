"""Operators can read runs and their logs in the admin, and change nothing there."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.runs.models import Run
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db


def test_run_admin_is_read_only(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-123456789"))
    listing = admin.get("/admin/runs/run/")
    assert listing.status_code == 200 and run_id in listing.content.decode()
    page = admin.get(f"/admin/runs/run/{run.pk}/change/")
    assert page.status_code == 200
    assert "interrupt.requested" in page.content.decode()
    assert admin.post(f"/admin/runs/run/{run.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin.get("/admin/runs/run/add/").status_code == 403
    assert Run.unscoped_all_tenants.filter(run_id=run_id).exists()
