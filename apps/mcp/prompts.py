"""`prompts/list` and `prompts/get`: the prompts declared on the caller's workflows and agents.

SCAFFOLD: being built (issue 20); every entry point below is replaced.
"""

from __future__ import annotations

from typing import Any

from apps.mcp.errors import method_not_found
from apps.mcp.exchange import Exchange


def prompts_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("prompts/list")


def prompt_get(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("prompts/get")
