"""After-commit hooks for tenant creation, registered by the apps that need them."""

from __future__ import annotations

from collections.abc import Callable

_TENANT_CREATED: list[Callable[[int], None]] = []


def on_tenant_created(hook: Callable[[int], None]) -> Callable[[int], None]:
    if hook not in _TENANT_CREATED:
        _TENANT_CREATED.append(hook)
    return hook


def run_tenant_created_hooks(tenant_pk: int) -> None:
    for hook in _TENANT_CREATED:
        hook(tenant_pk)
