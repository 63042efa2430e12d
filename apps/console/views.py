"""The tenant console: server-rendered pages for one tenant's users (session login, CSRF on).

Every view resolves the signed-in user's membership first; anonymous users go to the console
login, signed-in users without a membership (operators, auditors) get 403. Everything after that is
scoped to the membership's tenant, and any id that is not the tenant's answers the one not-found
page, the same bytes as an unknown id (interop.md §Isolation). Writes call the owning apps'
services (tenants: keys; push: push configs).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.a2a.signing import card_signing_status
from apps.console import selectors
from apps.console.login_throttle import ThrottledAuthenticationFormMixin, sign_in_answer
from apps.console.models import TenantMembership
from apps.console.stream_session import console_session_check
from apps.core.egress import EgressRefused
from apps.core.errors import Conflict, Forbidden, NotFound, OpenWopError, RateLimited, ValidationFailed
from apps.core.sse import SseEvent, sse_response, stream_log
from apps.core.stream_lease import while_allowed
from apps.push.services import push_config_create, push_config_delete, push_config_get
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_EVENT_TYPES, Run, RunStatus
from apps.runs.reads import events_after_sync
from apps.runs.selectors import run_get_readable
from apps.runs.services import interrupt_resolve
from apps.tenants.key_handover import new_key_hold, new_key_take
from apps.tenants.models import ApiKeyKind
from apps.tenants.services import api_key_create, api_key_revoke

ConsoleView = Callable[..., HttpResponse]


def not_found(request: HttpRequest) -> HttpResponse:
    """The one answer for an id the tenant does not have: it names nothing and echoes nothing."""
    return render(request, "console/not_found.html", status=404)


def member_required(view: ConsoleView) -> ConsoleView:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect(f"{reverse('console:login')}?next={request.path}")
        membership = selectors.membership_of(request.user)
        if membership is None:
            return render(request, "console/refused.html", status=403)
        try:
            return view(request, membership, *args, **kwargs)
        except NotFound:
            return not_found(request)

    return wrapped


class ConsoleLoginForm(ThrottledAuthenticationFormMixin, AuthenticationForm):
    """Only users bound to a tenant sign in here; operators use the admin, auditors their page.
    Throttled with the admin's sign-in (apps/console/login_throttle.py)."""

    sign_in_door = "console"

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)
        if not TenantMembership.objects.filter(user=user).exists():
            # The wrong-password answer, word for word (and a failed attempt to the throttle): a
            # different one would tell a guesser that an operator's password was right.
            raise self.get_invalid_login_error()


class ConsoleLoginView(auth_views.LoginView):
    """Sign-in with failed attempts throttled per username + address (apps/console/login_throttle.py):
    once throttled, the form answers 429 with the reason and the password is not checked."""

    template_name = "console/login.html"
    authentication_form = ConsoleLoginForm
    next_page = "console:home"

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return sign_in_answer(super().post(request, *args, **kwargs))  # type: ignore[return-value]


class ApiKeyCreateForm(forms.Form):
    label = forms.CharField(max_length=200, required=False, label="Label")
    kind = forms.ChoiceField(choices=ApiKeyKind.choices, initial=ApiKeyKind.USER, label="Kind")


# The egress guard's refusal, and where an operator relaxes it (webhooks.md §Egress).
EGRESS_HINT = (
    " The host's operator can allow private or internal ranges with OPENWOP_EGRESS_ALLOW_CIDRS"
    " (an allowlist of CIDRs); ask them if this receiver is yours."
)


class PushConfigCreateForm(forms.Form):
    task_id = forms.CharField(max_length=260, label="Task (run) id")
    url = forms.URLField(max_length=2048, label="Receiver URL (https)", assume_scheme="https")
    token = forms.CharField(max_length=500, required=False, label="Token (optional, sent as Bearer)")


class RunFilterForm(forms.Form):
    """The runs list's filters (GET). An invalid field is said on the page and only that field is
    ignored; a range that ends before it starts drops the range, never the other filters."""

    q = forms.CharField(max_length=260, required=False, label="Run id (or its start)")
    status = forms.ChoiceField(choices=[("", "any status"), *RunStatus.choices], required=False, label="Status")
    workflow = forms.ChoiceField(choices=[("", "any workflow")], required=False, label="Workflow")
    # The value <input type="datetime-local"> sends and shows; the field also parses any ISO 8601.
    created_from = forms.DateTimeField(
        required=False,
        label="Created from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    created_until = forms.DateTimeField(
        required=False,
        label="Created before (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, *args: Any, workflow_ids: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["workflow"].choices = [("", "any workflow"), *((w, w) for w in workflow_ids)]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("created_from"), data.get("created_until")
        if start is not None and end is not None and end <= start:
            del data["created_from"], data["created_until"]
            self.add_error(None, "The time range ends before it starts, so it is ignored; the other filters apply.")
        return data

    def query(self) -> selectors.RunQuery:
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return selectors.RunQuery(
            status=data.get("status") or "",
            workflow_id=data.get("workflow") or "",
            created_from=data.get("created_from"),
            created_until=data.get("created_until"),
            run_id_prefix=(data.get("q") or "").strip(),
        )


class InterruptAnswerForm(forms.Form):
    node_id = forms.CharField(max_length=128)
    action = forms.ChoiceField(choices=[("accept", "Approve"), ("reject", "Reject")])
    comment = forms.CharField(max_length=2000, required=False, label="Comment (optional)")


def _page(request: HttpRequest, membership: TenantMembership, template: str, **context: Any) -> HttpResponse:
    return render(request, template, {"tenant": membership.tenant, "section": template.split("/")[-1][:-5], **context})


@require_GET
@member_required
def home(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """The console's landing: recent runs, failures, deliveries needing attention, scheduled floors."""
    return _page(request, membership, "console/overview.html", overview=selectors.overview(tenant=membership.tenant))


@member_required
def keys(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """List the tenant's keys; POST creates one and redirects here (POST-redirect-GET, so a reload
    never creates a second key). The raw key crosses the redirect sealed in the session and is
    popped by the next GET: shown once, and no readable copy is kept server-side."""
    form = ApiKeyCreateForm(request.POST or None)
    refused = False
    if request.method == "POST" and form.is_valid():
        try:
            created, raw = api_key_create(
                tenant=membership.tenant, kind=form.cleaned_data["kind"], label=form.cleaned_data["label"]
            )
        except RateLimited as exc:  # the tenant's api_keys budget: revoke one first
            form.add_error(None, f"{exc.message} Revoke a key you no longer use, or ask the operator.")
            refused = True
        else:
            new_key_hold(request, raw)
            messages.success(request, f"Key {created.prefix} created. Copy it now: it is not shown again.")
            return redirect("console:keys")
    new_key = new_key_take(request)
    response = _page(
        request,
        membership,
        "console/keys.html",
        form=form,
        new_key=new_key,
        keys=selectors.api_keys(tenant=membership.tenant),
    )
    response["Cache-Control"] = "no-store"  # the page may carry a raw key
    if refused:
        response.status_code = 429
    return response


@require_http_methods(["GET", "POST"])
@member_required
def key_revoke(request: HttpRequest, membership: TenantMembership, prefix: str) -> HttpResponse:
    """GET asks to confirm (a page, not a script's dialog); POST revokes."""
    key = selectors.api_key_get(tenant=membership.tenant, prefix=prefix)
    if key is None:
        return not_found(request)
    if request.method == "GET":
        return _page(request, membership, "console/key_revoke.html", key=key)
    api_key_revoke(api_key=key)
    messages.success(request, f"Key {key.prefix} revoked: its next request is refused.")
    return redirect("console:keys")


@require_GET
@member_required
def agents(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    subject = selectors.console_subject(membership)
    return _page(
        request,
        membership,
        "console/agents.html",
        agents=selectors.agents(subject=subject),
        signing=card_signing_status(),  # the cards' signature, as discovery says it
    )


def _runs_filtered(request: HttpRequest, membership: TenantMembership) -> tuple[RunFilterForm, list[Run]]:
    tenant = membership.tenant
    form = RunFilterForm(request.GET, workflow_ids=selectors.workflow_ids(tenant=tenant))
    form.is_valid()  # the valid fields filter; the invalid ones are said on the page
    return form, selectors.runs_filtered(tenant=tenant, query=form.query())


@require_GET
@member_required
def runs(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """The tenant's newest runs that the filters admit; the page polls `runs_rows` for new ones."""
    form, rows = _runs_filtered(request, membership)
    return _page(
        request,
        membership,
        "console/runs.html",
        form=form,
        runs=rows,
        query=request.GET.urlencode(),
        filtered=any(request.GET.values()),
    )


@require_GET
@member_required
def runs_rows(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """The runs table's rows for the same filters, the fragment the runs page polls to show new runs
    without a reload (session-authenticated like every console page)."""
    _, rows = _runs_filtered(request, membership)
    response = render(request, "console/runs_rows.html", {"runs": rows, "filtered": any(request.GET.values())})
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@member_required
def run_page(request: HttpRequest, membership: TenantMembership, run_id: str) -> HttpResponse:
    """One run: inputs, outputs, error, its events as a timeline, its open interrupt (approve or
    reject here), its push configs and deliveries. Another tenant's id is the one not-found page."""
    detail = selectors.run_detail(subject=selectors.console_subject(membership), run_id=run_id)
    return _page(request, membership, "console/run.html", detail=detail)


@require_POST
@member_required
def run_interrupt(request: HttpRequest, membership: TenantMembership, run_id: str) -> HttpResponse:
    """Approve or reject the run's open approval through the run service the REST resume calls
    (interrupt_resolve: the same locks, approver check, schema check and log), then back to the run."""
    subject = selectors.console_subject(membership)
    found = run_get_readable(subject=subject, run_id=run_id)  # NotFound: the one not-found page
    form = InterruptAnswerForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Nothing was resolved: choose Approve or Reject.")
        return redirect("console:run", run_id=found.run_id)
    data = form.cleaned_data
    resume_value: dict[str, Any] = {"action": data["action"]}
    if data["comment"]:
        resume_value["comment"] = data["comment"]
    try:
        interrupt_resolve(subject=subject, run_id=found.run_id, node_id=data["node_id"], resume_value=resume_value)
    except NotFound:
        messages.error(request, "Nothing was resolved: the run has no open interrupt at that node.")
    except Conflict:
        messages.error(request, "Nothing was resolved: the interrupt was already resolved, or its run has ended.")
    except (Forbidden, ValidationFailed, RateLimited) as exc:
        messages.error(request, f"Nothing was resolved: {exc.message}")
    else:
        verb = "Approved" if data["action"] == "accept" else "Rejected"
        messages.success(request, f"{verb}: the run continues from its answer.")
    return redirect("console:run", run_id=found.run_id)


@member_required
def push(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """Push configs per task (POST registers one through the push service) and webhooks."""
    # A run page's "register a push config" link names its task (?task=<run id>).
    form = PushConfigCreateForm(request.POST or None, initial={"task_id": request.GET.get("task", "")[:260]})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            config = push_config_create(
                subject=selectors.console_subject(membership),
                task_id=data["task_id"],
                url=data["url"],
                token=data["token"] or None,
            )
        except NotFound:
            form.add_error("task_id", "No such task.")
        except EgressRefused as exc:
            form.add_error("url", exc.message + EGRESS_HINT)
        except ValidationFailed as exc:
            form.add_error("url", exc.message)
        else:
            messages.success(request, f"Push config {config.config_id} registered on {config.run.run_id}.")
            return redirect("console:task-push", task_id=config.run.run_id)
    return _page(
        request,
        membership,
        "console/push.html",
        form=form,
        configs=selectors.push_configs(tenant=membership.tenant),
        webhooks=selectors.webhooks(tenant=membership.tenant),
    )


@require_GET
@member_required
def task_push(request: HttpRequest, membership: TenantMembership, task_id: str) -> HttpResponse:
    subject = selectors.console_subject(membership)
    detail = selectors.task_push(subject=subject, task_id=task_id)
    return _page(request, membership, "console/task_push.html", detail=detail)


@require_http_methods(["GET", "POST"])
@member_required
def push_config_remove(
    request: HttpRequest, membership: TenantMembership, task_id: str, config_id: str
) -> HttpResponse:
    """GET asks to confirm; POST removes the push config through the push service (its pending
    deliveries go with it). A task or config that is not the tenant's is the one not-found page
    (NotFound, via member_required)."""
    subject = selectors.console_subject(membership)
    config = push_config_get(subject=subject, task_id=task_id, config_id=config_id)
    if request.method == "GET":
        return _page(request, membership, "console/push_config_remove.html", config=config)
    push_config_delete(subject=subject, task_id=config.run.run_id, config_id=config.config_id)
    messages.success(request, f"Push config {config.config_id} removed: nothing more is pushed to it.")
    return redirect("console:task-push", task_id=config.run.run_id)


@require_GET
@member_required
def webhook(request: HttpRequest, membership: TenantMembership, webhook_id: str) -> HttpResponse:
    detail = selectors.webhook_detail(subject=selectors.console_subject(membership), webhook_id=webhook_id)
    return _page(request, membership, "console/webhook.html", detail=detail)


def _run_for_stream(user: Any, run_id: str) -> Run | None:
    membership = selectors.membership_of(user)
    if membership is None:
        return None
    try:
        return run_get_readable(subject=selectors.console_subject(membership), run_id=run_id)
    except OpenWopError:
        return None


def _status_events(run: Run, position: int) -> list[SseEvent]:
    fresh = Run.objects.for_tenant(run.tenant_id).only("status").get(pk=run.pk)
    return [
        SseEvent(
            id=event.sequence,
            event="status",
            data={"runId": run.run_id, "sequence": event.sequence, "type": event.type, "status": fresh.status},
            terminal=event.type in TERMINAL_EVENT_TYPES,
        )
        for event in events_after_sync(tenant_pk=run.tenant_id, run_pk=run.pk, after=position)
    ]


@require_GET
async def run_status_stream(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """SSE of one run's status for the runs and run pages: each log event (after `?after=`, a
    sequence the page already shows; default 0) with the run's status after it, ending after the
    terminal event. Session-authenticated; anything unreadable is the 404 page."""
    user = await request.auser()
    run = await sync_to_async(_run_for_stream)(user, run_id)
    if run is None:
        return await sync_to_async(not_found)(request)
    after = request.GET.get("after", "0")
    position = int(after) if after.isdigit() and len(after) <= 10 else 0

    async def fetch(position: int) -> list[SseEvent]:
        return await sync_to_async(_status_events)(run, position)

    stream = stream_log(group=run_wake_group(run.run_id), after=position, fetch=fetch, poll_seconds=0.5)
    # Authorized by the session when it opened; it ends once the sign-in no longer holds.
    return sse_response(while_allowed(stream, console_session_check(request.session.session_key, user.pk)))
