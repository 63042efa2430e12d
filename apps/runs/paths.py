"""Run ids in URL paths (identity.md §5; openwop-v2 reference (i) 14).

A run id travels as one path segment, `acme~2Fopaque`. The legacy `acme%2Fopaque` must work too,
but servers decode `%2F` before routing (Daphne puts `/runs/acme/opaque` in the ASGI `path`), so
the converter also admits `<tenant>/<opaque>` where the opaque part has the minted grammar; a
trailing `/events` or `/cancel` can never be taken for one (16+ characters).
"""

from __future__ import annotations

from apps.core.errors import TenantMismatch
from apps.core.ids import split_bound_id, unproject_id
from apps.tenants.subject import Subject


class RunRefConverter:
    regex = r"[^/]+(?:/[A-Za-z0-9._~-]{16,128})?"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


def run_id_from_path(*, subject: Subject, segment: str) -> str:
    """The bound run id a path names, checked against the caller's tenant before any lookup:
    a foreign tenant segment is 403 id_tenant_mismatch whether or not such a run exists."""
    run_id = unproject_id(segment)
    tenant, _ = split_bound_id(run_id)
    if tenant != subject.tenant:
        raise TenantMismatch()
    return run_id
