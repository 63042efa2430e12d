"""`completion/complete` for prompt arguments and resource-template variables.

SCAFFOLD: being built (issue 20); the entry point below is replaced.
"""

from __future__ import annotations

from typing import Any

from apps.mcp.errors import method_not_found
from apps.mcp.exchange import Exchange


def completion_complete(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    raise method_not_found("completion/complete")
