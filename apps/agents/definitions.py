"""Checks of what a workflow is made of: its node list and its input schema."""

from __future__ import annotations

from typing import Any

import jsonschema

from apps.agents.models import AUTHOR_ID_RE
from apps.core.errors import ValidationFailed
from apps.runs.nodes import node_config_errors


def workflow_definition_check(*, definition: Any, input_schema: Any) -> None:
    """Raise 400 validation_error, listing every problem, unless the workflow can be executed."""
    problems: list[str] = []
    if not isinstance(definition, dict) or not isinstance(definition.get("nodes"), list):
        raise ValidationFailed("A definition is an object with a `nodes` list.", details={"field": "definition"})
    seen: set[str] = set()
    for index, node in enumerate(definition["nodes"]):
        where = f"nodes/{index}"
        if not isinstance(node, dict) or set(node) - {"id", "kind", "config"}:
            problems.append(f"{where}: a node is an object of id, kind and config")
            continue
        node_id = node.get("id")
        if not isinstance(node_id, str) or not AUTHOR_ID_RE.match(node_id):
            problems.append(f"{where}/id: a node id is 1-128 of [A-Za-z0-9._~:-]")
        elif node_id in seen:
            problems.append(f"{where}/id: {node_id!r} is used twice")
        else:
            seen.add(node_id)
        problems.extend(
            f"{where}/config/{p}" for p in node_config_errors(str(node.get("kind")), node.get("config", {}))
        )
    try:
        jsonschema.Draft202012Validator.check_schema(input_schema)
        if input_schema.get("type") != "object":
            problems.append("inputSchema: the inputs of a run are an object (type: object)")
    except (jsonschema.SchemaError, AttributeError) as exc:
        problems.append(f"inputSchema: {getattr(exc, 'message', 'not a JSON Schema object')}")
    if problems:
        raise ValidationFailed("The workflow definition is not valid.", details={"errors": problems})


def workflow_inputs_check(*, input_schema: dict[str, Any], inputs: Any) -> None:
    """Raise 400 validation_error with every schema violation of `inputs` (before any run exists)."""
    validator = jsonschema.Draft202012Validator(input_schema)
    errors = sorted(validator.iter_errors(inputs), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ValidationFailed(
            "The inputs do not match the workflow's inputSchema.",
            details={
                "field": "inputs",
                "errors": [{"path": "/" + "/".join(map(str, e.absolute_path)), "message": e.message} for e in errors],
            },
        )
