"""`resources/list`, `resources/templates/list`, `resources/read`: the caller's run artifacts.

SCAFFOLD: being built (issue 20); every entry point below is replaced.
"""

from __future__ import annotations

from typing import Any

from apps.mcp.errors import method_not_found
from apps.mcp.exchange import Exchange
from apps.tenants.subject import Subject


def resources_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("resources/list")


def resource_templates_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("resources/templates/list")


def resource_read(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("resources/read")


def complete_template_variable(
    subject: Subject, uri_template: str, name: str, value: str, context: dict[str, str]
) -> list[str] | None:
    """Completion values for variable `name` of the resource template `uri_template`, given the
    partial `value` and the other variables already chosen; None when no template of the caller
    has that URI (completion answers -32602 then)."""
    return None
