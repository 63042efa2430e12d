"""Checks of what a workflow is made of: its node list and its input schema."""

from __future__ import annotations

from typing import Any

import jsonschema

from apps.agents.models import AUTHOR_ID_RE
from apps.core.errors import ValidationFailed

# The node kinds a workflow may name, with the JSON Schema of each one's config. The engine's
# registry (apps/runs/nodes.py `register_node_kind`) declares every kind it can execute here as it
# registers it; what a definition is checked against is this table.
NODE_CONFIG_SCHEMAS: dict[str, dict[str, Any]] = {}


def node_kind_declare(kind: str, config_schema: dict[str, Any]) -> None:
    """Declare a node kind a workflow may use, and what its config must hold."""
    if kind in NODE_CONFIG_SCHEMAS:
        raise ValueError(f"node kind {kind!r} registered twice")
    jsonschema.Draft202012Validator.check_schema(config_schema)
    NODE_CONFIG_SCHEMAS[kind] = config_schema


def node_config_errors(kind: str, config: Any) -> list[str]:
    """Why `config` is not a valid configuration of `kind` (empty when it is)."""
    if kind not in NODE_CONFIG_SCHEMAS:
        return [f"unknown node kind {kind!r} (known: {', '.join(sorted(NODE_CONFIG_SCHEMAS))})"]
    validator = jsonschema.Draft202012Validator(NODE_CONFIG_SCHEMAS[kind])
    return [f"{'/'.join(map(str, e.absolute_path)) or '(config)'}: {e.message}" for e in validator.iter_errors(config)]


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


# Input-schema validators by the schema object they were built from (a process-cached workflow
# hands the same object to every run): each entry holds its schema, so its id is not reused while
# cached, and an entry is used only for that very object, so a changed workflow (a new row, a new
# object) never meets a stale validator. Bounded: rows read per request bring new objects.
_VALIDATORS_KEPT = 256
_validators: dict[int, jsonschema.Draft202012Validator] = {}


def _inputs_validator(input_schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    validator = _validators.get(id(input_schema))
    if validator is None or validator.schema is not input_schema:
        validator = jsonschema.Draft202012Validator(input_schema)
        if len(_validators) >= _VALIDATORS_KEPT:
            _validators.clear()  # atomic, whichever threads check at once
        _validators[id(input_schema)] = validator
    return validator


def workflow_inputs_check(*, input_schema: dict[str, Any], inputs: Any) -> None:
    """Raise 400 validation_error with every schema violation of `inputs` (before any run exists)."""
    errors = sorted(
        _inputs_validator(input_schema).iter_errors(inputs), key=lambda e: [str(p) for p in e.absolute_path]
    )
    if errors:
        raise ValidationFailed(
            "The inputs do not match the workflow's inputSchema.",
            details={
                "field": "inputs",
                "errors": [{"path": "/" + "/".join(map(str, e.absolute_path)), "message": e.message} for e in errors],
            },
        )
