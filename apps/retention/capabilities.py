"""What discovery says the host keeps and for how long (root `extensions`, openwop-host.retention).

Host-level and public, like the rest of the discovery document: the host's windows, that tenants
may override them or be held, and where expiring records go first. A tenant's own windows are its
operator's business (the admin, `manage.py retention show`) and an MCP task's `ttlMs`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from apps.audit.archive import archive_url_configured


def retention_advertised() -> dict[str, Any]:
    archive = archive_url_configured()
    return {
        "runs": {"days": settings.OPENWOP_RETENTION_RUNS_DAYS, "from": "terminal"},
        "records": {"days": settings.OPENWOP_RETENTION_RECORDS_DAYS, "from": "written"},
        "perTenantOverrides": True,
        "legalHold": True,
        # The scheme only: a bucket or a folder name is the operator's, not the caller's.
        "exportBeforeExpiry": urlsplit(archive).scheme if archive else None,
    }
