"""Writes for the console: console users and their tenant membership, and the audit of refused
sign-ins (staff and console share the throttle, apps/console/login_throttle.py)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from apps.console.models import SignInRefusal, TenantMembership
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant


def membership_refusal(*, username: str, password: str | None) -> str | None:
    """Why `membership_create` would refuse these, or None: one user, one tenant; staff accounts
    (operators) stay out of the console; a new user needs a password."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return None if password else "A new console user needs a password."
    if user.is_staff or user.is_superuser:
        return f"{username!r} is a staff account; console users are tenant users only."
    if TenantMembership.objects.filter(user=user).exists():
        return f"{username!r} already belongs to a tenant."
    return None


def membership_create(*, tenant: Tenant, username: str, password: str | None = None) -> TenantMembership:
    """A console user of `tenant`: the user is created when missing (never staff), or an existing
    non-staff user without a membership is bound. One user, one tenant."""
    user_model = get_user_model()
    # Not durable: the admin's add view calls this inside its own transaction.
    with transaction.atomic():
        refusal = membership_refusal(username=username, password=password)
        if refusal:
            raise ValidationFailed(refusal, details={"field": "username"})
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_user(username=username, password=password)
        elif password:
            user.set_password(password)
            user.save(update_fields=["password"])
        return TenantMembership.objects.create(user=user, tenant=tenant)


def sign_in_refusal_record(*, door: str, username: str, address: str) -> SignInRefusal:
    """Audit a sign-in the throttle refused (one insert: no transaction needed). The username is a
    caller's string: kept as the form normalized it, cut to the column; templates escape it."""
    return SignInRefusal.objects.create(door=door, username=username[:150], address=address[:64])
