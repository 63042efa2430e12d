"""The conformance seams that drive the host's real client path (openwop-v2 reference (g)):
`sample/a2a/invoke` and `sample/mcp/invoke` run one exchange as a caller would and report it.

Each invocation is a run of a small workflow in the caller's tenant whose one node is the real
`a2a.call` / `mcp.call` client (as their seam kinds, which add the seam's `requestVersion` probe),
so the `negotiation.decided` record lands on that run's log, which the suite then reads from
`/runs/{runId}/events/poll`. The run is advanced inline (a worker that takes
it first is simply waited for). Served only with OPENWOP_CONFORMANCE_SEAMS on.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from django.conf import settings

from apps.agents.models import Workflow
from apps.agents.services import workflow_create
from apps.core.errors import Conflict, OpenWopError, error_status
from apps.core.ids import mint_opaque
from apps.runs.engine import run_advance
from apps.runs.models import Run
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

SEAMS_PROFILE = "openwop-conformance-seams-v2"
SEAM_TIMEOUT_SECONDS = 60.0
# What each seam's run passes its node as `{{placeholders}}` (besides the peer's url), in order.
SEAM_INPUTS: dict[str, tuple[str, ...]] = {
    "a2a": ("version", "requestVersion", "text"),
    "mcp": ("version", "requestVersion", "tool", "arguments", "elicitationAnswer"),
}


def conformance_seams_on() -> bool:
    return bool(getattr(settings, "OPENWOP_CONFORMANCE_SEAMS", False))


SEAM_PATH_PREFIX = "/conformance/seams/"


def openapi_drop_seams_when_off(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """drf-spectacular preprocessing hook (SPECTACULAR_SETTINGS): `/openapi.json` lists the seams
    only while they are served, as discovery's `conformance` block does (issue 53 item 3)."""
    if conformance_seams_on():
        return endpoints
    return [endpoint for endpoint in endpoints if not str(endpoint[0]).startswith(SEAM_PATH_PREFIX)]


def conformance_capability() -> dict[str, Any] | None:
    """Discovery's root `conformance` block: present exactly while the seams are served."""
    return {"seamsProfile": SEAMS_PROFILE} if conformance_seams_on() else None


class SeamExchangeFailed(OpenWopError):
    """The exchange failed for a reason other than negotiation; the envelope names the run."""

    def __init__(self, error: dict[str, Any], run_id: str) -> None:
        # The run's error code, as its node.failed / run.failed events carry it, with the status
        # the registry (or this host's vendor table) gives it: interop_version_unsupported 400,
        # openwop-host.peer_unreachable 502, ... A code neither knows is never put on the wire.
        code = str(error.get("code") or "")
        self.code = code if error_status(code) is not None else "internal_error"
        details = {**(error.get("details") or {}), "runId": run_id}
        super().__init__(str(error.get("message") or "The exchange failed."), details=details)


def _seam_workflow(tenant: Tenant, protocol: str) -> str:
    workflow_id = f"openwop-host.seam.{protocol}-invoke"
    if not Workflow.objects.for_tenant(tenant).filter(workflow_id=workflow_id).exists():
        config = {"url": "{{peerUrl}}", **{name: f"{{{{{name}}}}}" for name in SEAM_INPUTS[protocol]}}
        node = {"id": "invoke", "kind": f"openwop-host.seam.{protocol}-call", "config": config}
        with contextlib.suppress(Conflict):  # created concurrently
            workflow_create(
                tenant=tenant,
                workflow_id=workflow_id,
                definition={"nodes": [node]},
                input_schema={"type": "object"},
                name=f"Conformance seam: {protocol} invoke",
                description="Drives one outbound exchange for the conformance seams.",
            )
    return workflow_id


def seam_invoke(
    *,
    subject: Subject,
    protocol: str,
    inputs: dict[str, Any],
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> dict[str, Any]:
    """Run one exchange; 200 body on success, else raise the error envelope naming the run.

    The seam request's own W3C trace context seeds the run, as a production run's would, so the
    outbound call carries the caller's trace (interop.md §Trace context)."""
    tenant = Tenant.objects.get(slug=subject.tenant)
    run = run_create(
        subject=subject,
        workflow_id=_seam_workflow(tenant, protocol),
        inputs=inputs,
        transport="rest",
        traceparent=traceparent,
        tracestate=tracestate,
    )
    run_advance(run_id=run.run_id, worker=f"seam-{mint_opaque(22)}")
    deadline = time.monotonic() + SEAM_TIMEOUT_SECONDS
    run.refresh_from_db()
    while not run.is_terminal and time.monotonic() < deadline:
        time.sleep(0.1)  # a worker took the run first: it finishes it
        run.refresh_from_db()
    return _seam_answer(run, protocol)


def _seam_answer(run: Run, protocol: str) -> dict[str, Any]:
    outputs = run.outputs if isinstance(run.outputs, dict) else {}
    if run.status == "completed" and "negotiatedVersion" in outputs:
        return {
            "negotiatedVersion": outputs["negotiatedVersion"],
            "protocol": protocol,
            "runId": run.run_id,
            "peerDigest": outputs["peerDigest"],
            "result": outputs.get("result"),
        }
    error = run.error if isinstance(run.error, dict) else {"code": "internal_error", "message": "No outcome."}
    raise SeamExchangeFailed(error, run.run_id)
