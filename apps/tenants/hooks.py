"""After-commit hooks for tenant creation, registered by the apps that need them (each is called
with the new tenant as `tenant=`)."""

from __future__ import annotations

from collections.abc import Callable

from apps.tenants.models import Tenant

_TENANT_CREATED: list[Callable[..., object]] = []


def on_tenant_created(hook: Callable[..., object]) -> Callable[..., object]:
    if hook not in _TENANT_CREATED:
        _TENANT_CREATED.append(hook)
    return hook


def run_tenant_created_hooks(tenant_pk: int) -> None:
    tenant = Tenant.objects.get(pk=tenant_pk)
    for hook in _TENANT_CREATED:
        hook(tenant=tenant)
