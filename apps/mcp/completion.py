"""`completion/complete` for prompt arguments and resource-template variables.

Prompt arguments complete from the values their prompt declares (apps/agents `Prompt.arguments`);
resource-template variables from `complete_template_variable` (apps/mcp/resources.py). A ref the
caller cannot see -- unknown, another tenant's -- is -32602 with the same bytes as prompts/get.
"""

from __future__ import annotations

from typing import Any

from apps.agents.selectors import prompt_argument_values, prompt_get_readable
from apps.core.errors import NotFound
from apps.mcp.errors import invalid_params, mcp_error_from
from apps.mcp.exchange import Exchange
from apps.mcp.projection import server_meta
from apps.mcp.resources import COMPLETION_MAX_VALUES, complete_template_variable


def prefix_matches(candidates: list[str], value: str) -> list[str]:
    """The candidates starting with `value` (case-insensitive), in their declared order."""
    prefix = value.casefold()
    return [c for c in candidates if c.casefold().startswith(prefix)]


def completion_of(matches: list[str]) -> dict[str, Any]:
    """At most 100 values, with the true total and whether more were left out."""
    matches = list(dict.fromkeys(matches))
    return {
        "values": matches[:COMPLETION_MAX_VALUES],
        "total": len(matches),
        "hasMore": len(matches) > COMPLETION_MAX_VALUES,
    }


def _context_arguments(params: dict[str, Any]) -> dict[str, str]:
    context = params.get("context")
    if context is None:
        return {}
    arguments = context.get("arguments") if isinstance(context, dict) else None
    arguments = {} if isinstance(context, dict) and arguments is None else arguments
    if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
        raise invalid_params("params.context.arguments must be an object of strings")
    return dict(arguments)


def completion_complete(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    ref = params.get("ref")
    argument = params.get("argument")
    if not isinstance(argument, dict) or not isinstance(argument.get("name"), str):
        raise invalid_params("params.argument must be {name, value}")
    value = argument.get("value", "")
    if not isinstance(value, str):
        raise invalid_params("params.argument.value must be a string")
    context = _context_arguments(params)
    kind = ref.get("type") if isinstance(ref, dict) else None
    if kind == "ref/prompt" and isinstance(ref, dict) and isinstance(ref.get("name"), str):
        try:
            prompt = prompt_get_readable(subject=exchange.subject, name=ref["name"])
        except NotFound as exc:
            raise mcp_error_from(exc) from None
        candidates = prompt_argument_values(prompt=prompt, argument=argument["name"])
        if candidates is None:
            raise invalid_params(f"Unknown argument {argument['name']!r} for prompt {prompt.name!r}.")
        matches = prefix_matches(candidates, value)
    elif kind == "ref/resource" and isinstance(ref, dict) and isinstance(ref.get("uri"), str):
        # The resources side matches `value` itself (it knows what its variables hold).
        found = complete_template_variable(exchange.subject, ref["uri"], argument["name"], value, context)
        if found is None:
            raise invalid_params(f"Unknown resource template: {ref['uri']!r}.")
        matches = found
    else:
        raise invalid_params('params.ref must be {type: "ref/prompt", name} or {type: "ref/resource", uri}')
    return {"resultType": "complete", "completion": completion_of(matches), "_meta": server_meta()}
