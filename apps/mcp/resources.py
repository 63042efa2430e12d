"""`resources/list`, `resources/templates/list`, `resources/read`: the caller's run artifacts.

A resource is an artifact one of the caller's runs produced, at the URI the host mints for it:
`openwop:runs/<runId>/artifacts/<artifactId>` (apps/mcp/projection.py). It is readable by whoever
may read the run (`run_get_readable`: every Subject of the run's tenant) and by nobody else: an
unknown URI and another tenant's are one error, byte for byte but the JSON-RPC id (interop.md
§Isolation): -32602 "Resource not found" with `data: {"uri": <as requested>}` (SEP-2164).

Every tenant is also served the conformance suite's fixture resources, defined here in code:
`test://static-text`, `test://static-binary` and the template `test://template/{id}/data`. So the
schemes served are `openwop` and `test`. A requested URI is normalized first (RFC 3986 §6.2.2:
scheme and authority lower-case, percent-escapes of unreserved characters decoded, the others in
upper-case hex); a URI of another scheme, with a `.` or `..` segment (`%2e%2e` included), a
backslash, whitespace or a control character is refused (-32602 "Invalid resource URI"), never
looked up.

Results carry `ttlMs` and `cacheScope: "private"` (SEP-2549): they depend on the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core import signing
from django.db.models import QuerySet

from apps.core.errors import NotFound, ValidationFailed
from apps.core.ids import project_id, split_bound_id, unproject_id
from apps.mcp.errors import McpError, invalid_params
from apps.mcp.exchange import Exchange
from apps.mcp.projection import (
    ARTIFACT_URI_SCHEME,
    ARTIFACT_URI_TEMPLATE,
    RunArtifact,
    artifact_resource_contents,
    artifact_resource_doc,
    call_tool_result,
    definition_emits_artifacts,
    private_result,
)
from apps.runs.models import Run, RunEvent
from apps.runs.selectors import run_get_readable
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

ARTIFACT_EVENT = "artifact.created"
FIXTURE_URI_SCHEME = "test"
SERVED_SCHEMES = frozenset({ARTIFACT_URI_SCHEME, FIXTURE_URI_SCHEME})
RESOURCE_NOT_FOUND_MESSAGE = "Resource not found"
INVALID_URI_MESSAGE = "Invalid resource URI"
RESOURCES_PAGE_SIZE = 50
RESOURCES_LIST_TTL_MS = 5_000  # a new run may add artifacts at any moment
RESOURCE_TEMPLATES_TTL_MS = 300_000  # defined in code
RESOURCE_READ_TTL_MS = 300_000  # an artifact never changes once created
COMPLETION_MAX_VALUES = 100  # completion spec: values "Must not exceed 100 items"
_COMPLETION_SCAN = 500  # the newest artifacts completion looks at
MAX_URI_LENGTH = 2048
_CURSOR_SALT = "openwop.mcp.resources.cursor"

_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE_RE = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ARTIFACT_URI_RE = re.compile(r"openwop:runs/([^/?#]+)/artifacts/([^/?#]+)")
_FIXTURE_TEMPLATE_RE = re.compile(r"test://template/([A-Za-z0-9._~-]{1,128})/data")

# --- the conformance suite's fixture resources (every tenant) -------------------------------------

FIXTURE_TEMPLATE = "test://template/{id}/data"
FIXTURE_TEMPLATE_IDS = ("123", "456", "789")  # completion suggestions; any unreserved id is served
_PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


@dataclass(frozen=True, slots=True)
class FixtureResource:
    uri: str
    name: str
    title: str
    mime_type: str
    text: str | None = None
    blob: str | None = None

    def doc(self) -> dict[str, Any]:
        return {"uri": self.uri, "name": self.name, "title": self.title, "mimeType": self.mime_type}

    def contents(self) -> dict[str, Any]:
        body = {"text": self.text} if self.text is not None else {"blob": self.blob}
        return {"uri": self.uri, "mimeType": self.mime_type, **body}


FIXTURE_RESOURCES: tuple[FixtureResource, ...] = (
    FixtureResource(
        uri="test://static-text",
        name="static-text",
        title="Conformance: static text",
        mime_type="text/plain",
        text="This is the content of the static text resource.",
    ),
    FixtureResource(
        uri="test://static-binary",
        name="static-binary",
        title="Conformance: static binary (a 1x1 PNG)",
        mime_type="image/png",
        blob=_PNG_1X1,
    ),
)
_FIXTURES_BY_URI = {fixture.uri: fixture for fixture in FIXTURE_RESOURCES}

RESOURCE_TEMPLATES: tuple[dict[str, Any], ...] = (
    {
        "uriTemplate": ARTIFACT_URI_TEMPLATE,
        "name": "run-artifact",
        "title": "Run artifact",
        "description": "An artifact one of your runs produced: runId is the run's id as tools/call "
        "answers it in _meta, artifactId the artifact's.",
    },
    {
        "uriTemplate": FIXTURE_TEMPLATE,
        "name": "template-data",
        "title": "Conformance: templated data",
        "description": "Text naming the id it was read with.",
        "mimeType": "text/plain",
    },
)


# --- errors ---------------------------------------------------------------------------------------


def resource_not_found(uri: str) -> McpError:
    """The one answer for every URI the caller cannot read: unknown, another tenant's, malformed."""
    return invalid_params(RESOURCE_NOT_FOUND_MESSAGE, {"uri": uri})


def invalid_uri(uri: str) -> McpError:
    return invalid_params(INVALID_URI_MESSAGE, {"uri": uri})


# --- URIs -----------------------------------------------------------------------------------------


def _escape_normalize(match: re.Match[str]) -> str:
    decoded = chr(int(match.group(1), 16))
    return decoded if decoded in _UNRESERVED else f"%{match.group(1).upper()}"


def uri_normalize(uri: str) -> str:
    """The URI in normal form (module docstring), or -32602 for one this host never looks up."""
    if len(uri) > MAX_URI_LENGTH or any(not 0x21 <= ord(c) <= 0x7E for c in uri) or "\\" in uri:
        raise invalid_uri(uri)
    match = _SCHEME_RE.fullmatch(uri)
    if match is None or match.group(1).lower() not in SERVED_SCHEMES:
        raise invalid_uri(uri)
    scheme, rest = match.group(1).lower(), match.group(2)
    if _BAD_ESCAPE_RE.search(rest):
        raise invalid_uri(uri)
    rest = _ESCAPE_RE.sub(_escape_normalize, rest)
    if "%5C" in rest:  # an encoded backslash: a traversal on some platforms, never a name here
        raise invalid_uri(uri)
    path = re.split(r"[?#]", rest, maxsplit=1)[0]
    if path.startswith("//"):
        authority, slash, path = path[2:].partition("/")
        lowered = re.sub(r"[^%]+", lambda m: m.group(0).lower(), authority)  # not the escapes' hex
        rest = "//" + lowered + slash + rest[2 + len(authority) + len(slash) :]
    if any(segment in (".", "..") for segment in path.split("/")):
        raise invalid_uri(uri)
    return f"{scheme}:{rest}"


# --- reads ----------------------------------------------------------------------------------------


def run_artifacts(run: Run, *, always: bool = False) -> list[RunArtifact]:
    """The run's artifacts in order, as far as its row was read (`last_sequence`). A run whose
    definition has no node that emits one costs no read at all, unless `always`."""
    if not always and not definition_emits_artifacts(run.definition):
        return []
    rows = _artifact_rows(run).filter(sequence__lte=run.last_sequence)
    return [RunArtifact.of(run_id=run.run_id, node_id=node_id, payload=payload) for node_id, payload in rows]


def _artifact_rows(run: Run) -> QuerySet[RunEvent, tuple[str, Any]]:
    """The run's artifact events in order, as (node_id, payload)."""
    return (
        RunEvent.objects.for_tenant(run.tenant_id)
        .filter(run=run, type=ARTIFACT_EVENT)
        .order_by("sequence")
        .values_list("node_id", "payload")
    )


def run_artifact_get(*, subject: Subject, run_id: str, artifact_id: str) -> RunArtifact:
    """One artifact of a run the subject may read; NotFound whatever the reason."""
    run = run_get_readable(subject=subject, run_id=run_id)
    row = _artifact_rows(run).filter(payload__artifactId=artifact_id).first()
    if row is None:
        raise NotFound("No such artifact.")
    return RunArtifact.of(run_id=run.run_id, node_id=row[0], payload=row[1])


def tool_result_of(run: Run) -> dict[str, Any]:
    """A terminal run's CallToolResult with its artifacts (projection.call_tool_result)."""
    return call_tool_result(run, run_artifacts(run), definition=run.definition)


async def atool_result_of(run: Run) -> dict[str, Any]:
    """`tool_result_of` from the event loop: a thread step only when the run has artifacts."""
    if not definition_emits_artifacts(run.definition):
        return call_tool_result(run)
    return await sync_to_async(tool_result_of)(run)


# --- resources/read -------------------------------------------------------------------------------


def resource_read(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise invalid_params("params.uri must be a string")
    contents = _resource_contents(exchange.subject, uri, uri_normalize(uri))
    if not contents:
        raise resource_not_found(uri)  # SEP-2164: never an empty `contents`
    return private_result(RESOURCE_READ_TTL_MS, contents=contents)


def _resource_contents(subject: Subject, requested: str, uri: str) -> list[dict[str, Any]]:
    fixture = _FIXTURES_BY_URI.get(uri)
    if fixture is not None:
        return [fixture.contents()]
    match = _FIXTURE_TEMPLATE_RE.fullmatch(uri)
    if match is not None:
        return [{"uri": uri, "mimeType": "text/plain", "text": f"Data for the resource with id {match.group(1)}."}]
    match = _ARTIFACT_URI_RE.fullmatch(uri)
    if match is None:
        raise resource_not_found(requested)
    try:
        run_id = unproject_id(match.group(1))
        split_bound_id(run_id)
        artifact = run_artifact_get(subject=subject, run_id=run_id, artifact_id=unproject_id(match.group(2)))
    except (ValidationFailed, NotFound):
        raise resource_not_found(requested) from None
    return artifact_resource_contents(artifact)


# --- resources/list, resources/templates/list ---------------------------------------------------


def resources_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    """The caller's artifacts, newest first, then the fixture resources; `RESOURCES_PAGE_SIZE` a
    page. The cursor is opaque, signed, and bound to the caller's tenant."""
    subject = exchange.subject
    phase, position = _cursor_open(params.get("cursor"), subject)
    resources: list[dict[str, Any]] = []
    next_cursor: str | None = None
    if phase == "artifacts":
        events = RunEvent.objects.for_tenant(subject_tenant_pk(subject)).filter(type=ARTIFACT_EVENT)
        if position:
            events = events.filter(pk__lt=position)
        rows = list(
            events.order_by("-pk").values_list("pk", "run__run_id", "node_id", "payload")[: RESOURCES_PAGE_SIZE + 1]
        )
        for _, run_id, node_id, payload in rows[:RESOURCES_PAGE_SIZE]:
            resources.append(artifact_resource_doc(RunArtifact.of(run_id=run_id, node_id=node_id, payload=payload)))
        if len(rows) > RESOURCES_PAGE_SIZE:
            next_cursor = _cursor_mint(subject, "artifacts", rows[RESOURCES_PAGE_SIZE - 1][0])
        else:
            phase, position = "fixtures", 0
    if phase == "fixtures":
        end = position + RESOURCES_PAGE_SIZE - len(resources)
        resources.extend(fixture.doc() for fixture in FIXTURE_RESOURCES[position:end])
        if end < len(FIXTURE_RESOURCES):
            next_cursor = _cursor_mint(subject, "fixtures", end)
    result = private_result(RESOURCES_LIST_TTL_MS, resources=resources)
    if next_cursor is not None:
        result["nextCursor"] = next_cursor
    return result


def _cursor_mint(subject: Subject, phase: str, position: int) -> str:
    return signing.dumps({"t": subject.tenant, "p": phase, "k": position}, salt=_CURSOR_SALT)


def _cursor_open(cursor: Any, subject: Subject) -> tuple[str, int]:
    """(phase, position) of a cursor this host minted for the caller's tenant; -32602 otherwise."""
    if cursor is None:
        return "artifacts", 0
    try:
        data = signing.loads(cursor, salt=_CURSOR_SALT) if isinstance(cursor, str) else None
        if not isinstance(data, dict) or data.get("t") != subject.tenant:
            raise ValueError("a cursor of another tenant")
        phase, position = data.get("p"), data.get("k")
        if phase not in ("artifacts", "fixtures") or not isinstance(position, int) or position < 0:
            raise ValueError("a malformed cursor")
    except (signing.BadSignature, ValueError):
        raise invalid_params("Invalid cursor") from None
    return str(phase), position


def resource_templates_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    templates = [dict(template) for template in RESOURCE_TEMPLATES]
    return private_result(RESOURCE_TEMPLATES_TTL_MS, resourceTemplates=templates)


# --- completion of template variables -----------------------------------------------------------


def complete_template_variable(
    subject: Subject, uri_template: str, name: str, value: str, context: dict[str, str]
) -> list[str] | None:
    """Completion values for variable `name` of the resource template `uri_template`, given the
    partial `value` and the other variables already chosen; None when no template of the caller
    has that URI (completion answers -32602 then).

    `runId`: the caller's runs with artifacts, newest first; `artifactId`: the artifacts of the
    run `context["runId"]` names, or the caller's newest; the fixture template's `id`: samples."""
    if uri_template == ARTIFACT_URI_TEMPLATE:
        if name == "runId":
            values = _recent_artifacts(subject, run_ids=True)
        elif name == "artifactId":
            values = _artifact_ids(subject, context.get("runId"))
        else:
            values = []
    elif uri_template == FIXTURE_TEMPLATE:
        values = list(FIXTURE_TEMPLATE_IDS) if name == "id" else []
    else:
        return None
    return [v for v in values if v.startswith(value)][:COMPLETION_MAX_VALUES]


def _recent_artifacts(subject: Subject, *, run_ids: bool) -> list[str]:
    """The projected run ids (or artifact ids) of the caller's newest artifacts, once each."""
    rows = (
        RunEvent.objects.for_tenant(subject_tenant_pk(subject))
        .filter(type=ARTIFACT_EVENT)
        .order_by("-pk")
        .values_list("run__run_id", "payload")[:_COMPLETION_SCAN]
    )
    values = [
        project_id(run_id) if run_ids else project_id(str(payload.get("artifactId", "")))
        for run_id, payload in rows
        if isinstance(payload, dict)
    ]
    return list(dict.fromkeys(values))


def _artifact_ids(subject: Subject, run: str | None) -> list[str]:
    if not run:
        return _recent_artifacts(subject, run_ids=False)
    try:
        run_id = unproject_id(run)
        split_bound_id(run_id)
        readable = run_get_readable(subject=subject, run_id=run_id)
    except (ValidationFailed, NotFound):
        return []
    return [project_id(artifact.artifact_id) for artifact in run_artifacts(readable, always=True)]
