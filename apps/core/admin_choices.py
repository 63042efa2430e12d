"""Admin choices that say whose they are (issue 53 item 5): a tenant's agent or workflow is offered
as "demo-assistant (demo)", since two tenants may each have one of that id."""

from __future__ import annotations

from typing import Any

from django.db.models import ForeignKey, Model
from django.forms import ModelChoiceField
from django.http import HttpRequest


def _tenant_owned(model: type[Model]) -> bool:
    return any(field.name == "tenant" and field.is_relation for field in model._meta.fields)


def tenant_label(obj: Any) -> str:
    return f"{obj} ({obj.tenant.slug})"


class TenantLabelledChoicesAdminMixin:
    """Mix into a ModelAdmin, before the admin base class: each select of a tenant-owned row (one
    with a `tenant` key) labels its options with the tenant, read in the options' one query."""

    def formfield_for_foreignkey(self, db_field: ForeignKey, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        if isinstance(field, ModelChoiceField) and field.queryset is not None and _tenant_owned(db_field.related_model):
            field.queryset = field.queryset.select_related("tenant")
            field.label_from_instance = tenant_label  # type: ignore[method-assign]
        return field
