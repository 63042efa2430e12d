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
from django.views.decorators.http import require_GET, require_POST

from apps.a2a.signing import card_signing_status
from apps.console import selectors
from apps.console.login_throttle import ThrottledAuthenticationFormMixin, sign_in_answer
from apps.console.models import TenantMembership
from apps.console.stream_session import console_session_check
from apps.core.egress import EgressRefused
from apps.core.errors import NotFound, OpenWopError, RateLimited, ValidationFailed
from apps.core.sse import SseEvent, sse_response, stream_log
from apps.core.stream_lease import while_allowed
from apps.push.services import push_config_create, push_config_delete, push_config_get
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_EVENT_TYPES, Run
from apps.runs.reads import events_after_sync
from apps.runs.selectors import run_get_readable
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


class PushConfigCreateForm(forms.Form):
    task_id = forms.CharField(max_length=260, label="Task (run) id")
    url = forms.URLField(max_length=2048, label="Receiver URL (https)", assume_scheme="https")
    token = forms.CharField(max_length=500, required=False, label="Token (optional, sent as Bearer)")


def _page(request: HttpRequest, membership: TenantMembership, template: str, **context: Any) -> HttpResponse:
    return render(request, template, {"tenant": membership.tenant, "section": template.split("/")[-1][:-5], **context})


@require_GET
@member_required
def home(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    return redirect("console:keys")


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
        request, membership, "console/keys.html", form=form, new_key=new_key,
        keys=selectors.api_keys(tenant=membership.tenant),
        # The console's home page (home redirects here): scheduled floors that will bind the tenant.
        floor_notices=selectors.floor_notices(tenant=membership.tenant),
    )
    response["Cache-Control"] = "no-store"  # the page may carry a raw key
    if refused:
        response.status_code = 429
    return response


@require_POST
@member_required
def key_revoke(request: HttpRequest, membership: TenantMembership, prefix: str) -> HttpResponse:
    key = selectors.api_key_get(tenant=membership.tenant, prefix=prefix)
    if key is None:
        return not_found(request)
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


@require_GET
@member_required
def runs(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    subject = selectors.console_subject(membership)
    return _page(request, membership, "console/runs.html", runs=selectors.recent_runs(subject=subject))


@member_required
def push(request: HttpRequest, membership: TenantMembership) -> HttpResponse:
    """Push configs per task (POST registers one through the push service) and webhooks."""
    form = PushConfigCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            config = push_config_create(
                subject=selectors.console_subject(membership), task_id=data["task_id"], url=data["url"],
                token=data["token"] or None,
            )
        except NotFound:
            form.add_error("task_id", "No such task.")
        except (EgressRefused, ValidationFailed) as exc:
            form.add_error("url", exc.message)
        else:
            messages.success(request, f"Push config {config.config_id} registered on {config.run.run_id}.")
            return redirect("console:task-push", task_id=config.run.run_id)
    return _page(
        request, membership, "console/push.html", form=form,
        configs=selectors.push_configs(tenant=membership.tenant),
        webhooks=selectors.webhooks(tenant=membership.tenant),
    )


@require_GET
@member_required
def task_push(request: HttpRequest, membership: TenantMembership, task_id: str) -> HttpResponse:
    subject = selectors.console_subject(membership)
    detail = selectors.task_push(subject=subject, task_id=task_id)
    return _page(request, membership, "console/task_push.html", detail=detail)


@require_POST
@member_required
def push_config_remove(
    request: HttpRequest, membership: TenantMembership, task_id: str, config_id: str
) -> HttpResponse:
    """Remove a push config through the push service (its pending deliveries go with it). A task
    or config that is not the tenant's is the one not-found page (NotFound, via member_required)."""
    subject = selectors.console_subject(membership)
    config = push_config_get(subject=subject, task_id=task_id, config_id=config_id)
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
    """SSE of one run's status for the runs page: each log event with the run's status after it,
    ending after the terminal event. Session-authenticated; anything unreadable is the 404 page."""
    user = await request.auser()
    run = await sync_to_async(_run_for_stream)(user, run_id)
    if run is None:
        return await sync_to_async(not_found)(request)

    async def fetch(position: int) -> list[SseEvent]:
        return await sync_to_async(_status_events)(run, position)

    stream = stream_log(group=run_wake_group(run.run_id), after=0, fetch=fetch, poll_seconds=0.5)
    # Authorized by the session when it opened; it ends once the sign-in no longer holds.
    return sse_response(while_allowed(stream, console_session_check(request.session.session_key, user.pk)))
