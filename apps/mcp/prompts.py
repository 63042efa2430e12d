"""`prompts/list` and `prompts/get`: the caller's tenant's prompts (apps/agents `Prompt`).

The mount translates; apps/agents decides. Argument values are inserted as plain text in one pass
(`prompt_messages_render`); an unknown prompt and another tenant's answer the same -32602 bytes
(interop.md §Isolation), because the argument checks run only once the prompt is found.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from apps.agents.models import Prompt
from apps.agents.selectors import (
    prompt_arguments_read,
    prompt_get_readable,
    prompt_list_readable,
    prompt_messages_render,
)
from apps.core.errors import OpenWopError
from apps.mcp.errors import invalid_params, mcp_error_from
from apps.mcp.exchange import Exchange, name_and_arguments
from apps.mcp.projection import private_result, server_meta

PROMPTS_TTL_MS = 30_000
PROMPTS_PAGE_SIZE = 50
_CURSOR_PREFIX = "prompts:"


def prompt_doc(prompt: Prompt) -> dict[str, Any]:
    """A Prompt as `prompts/list` shows it; completion `values` stay on the host."""
    doc: dict[str, Any] = {"name": prompt.name}
    if prompt.title:
        doc["title"] = prompt.title
    if prompt.description:
        doc["description"] = prompt.description
    if prompt.arguments:
        doc["arguments"] = [
            {key: argument[key] for key in ("name", "title", "description", "required") if key in argument}
            for argument in prompt.arguments
        ]
    return doc


def cursor_mint(last_name: str) -> str:
    return base64.urlsafe_b64encode((_CURSOR_PREFIX + last_name).encode()).decode().rstrip("=")


def cursor_open(cursor: Any) -> str:
    """The name a `nextCursor` continues after; anything we did not mint is -32602."""
    try:
        if not isinstance(cursor, str):
            raise ValueError
        decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error):
        raise invalid_params("Invalid cursor") from None
    if not decoded.startswith(_CURSOR_PREFIX):
        raise invalid_params("Invalid cursor")
    return decoded[len(_CURSOR_PREFIX) :]


def prompts_list(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    """One page of the caller's prompts by name; the list depends on the caller: private."""
    cursor = params.get("cursor")
    after = cursor_open(cursor) if cursor is not None else None
    page = prompt_list_readable(subject=exchange.subject, after=after, limit=PROMPTS_PAGE_SIZE + 1)
    result = private_result(PROMPTS_TTL_MS, prompts=[prompt_doc(p) for p in page[:PROMPTS_PAGE_SIZE]])
    if len(page) > PROMPTS_PAGE_SIZE:
        result["nextCursor"] = cursor_mint(page[PROMPTS_PAGE_SIZE - 1].name)
    return result


def prompt_get(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    """The prompt's messages with the caller's arguments filled in. GetPromptResult carries no
    caching hints in 2026-07-28 (SEP-2549 names list and read results only)."""
    name, arguments = name_and_arguments(params, "prompt")
    try:
        prompt = prompt_get_readable(subject=exchange.subject, name=name)
        arguments = {**arguments, **_answered(prompt, params)}
        missing = _missing(prompt, arguments)
        if missing and exchange.elicitation_form and not exchange.handshake and not _refused(params):
            return _ask_for(prompt, missing)
        values = prompt_arguments_read(prompt=prompt, arguments=arguments)
    except OpenWopError as exc:
        raise mcp_error_from(exc) from None
    result: dict[str, Any] = {"resultType": "complete"}
    if prompt.description:
        result["description"] = prompt.description
    result["messages"] = prompt_messages_render(prompt=prompt, values=values)
    result["_meta"] = server_meta()
    return result


# --- missing required arguments, asked for by MRTR (2026-07-28: prompts/get may answer
# InputRequiredResult). No run and no interrupt stands behind a prompt, so the one input request
# has a fixed key and the retry needs no requestState: it repeats the name and the arguments it
# had, with the answer in `inputResponses`. Without declared form elicitation: -32602, as before.

ARGUMENTS_INPUT_KEY = "prompt-arguments"


def _missing(prompt: Prompt, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in prompt.arguments if a.get("required") and a["name"] not in arguments]


def _ask_for(prompt: Prompt, missing: list[dict[str, Any]]) -> dict[str, Any]:
    properties = {
        a["name"]: {"type": "string", **({"description": a["description"]} if a.get("description") else {})}
        for a in missing
    }
    request = {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": f"The prompt {prompt.title or prompt.name} needs: {', '.join(sorted(properties))}.",
            "requestedSchema": {"type": "object", "properties": properties, "required": sorted(properties)},
        },
    }
    return {"resultType": "input_required", "inputRequests": {ARGUMENTS_INPUT_KEY: request}, "_meta": server_meta()}


def _form_action(params: dict[str, Any]) -> tuple[Any, Any]:
    """The action and content of the ElicitResult a retry gave the arguments form, if any."""
    responses = params.get("inputResponses")
    response = responses.get(ARGUMENTS_INPUT_KEY) if isinstance(responses, dict) else None
    return (response.get("action"), response.get("content")) if isinstance(response, dict) else (None, None)


def _answered(prompt: Prompt, params: dict[str, Any]) -> dict[str, str]:
    """The argument values an accepted ElicitResult gave (only declared names, only strings);
    anything else answers nothing, so the argument is still missing."""
    action, content = _form_action(params)
    if action != "accept" or not isinstance(content, dict):
        return {}
    declared = {a["name"] for a in prompt.arguments}
    return {key: value for key, value in content.items() if key in declared and isinstance(value, str)}


def _refused(params: dict[str, Any]) -> bool:
    """The user declined or cancelled the form: not asked again (the missing argument is -32602)."""
    return _form_action(params)[0] in ("decline", "cancel")
