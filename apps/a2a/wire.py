"""A2A 1.0 requests as every binding's parse step checks them (views.py, grpc_server.py).

The run's A2A wire form, which the door and push delivery both send, is apps/runs/a2a_wire.py.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from apps.core.caller_input import CallerInputInvalid, caller_json_check, number_problem, text_problem

# The request strings a column stores, by (message, field): the column's length (a2a.TaskMessage,
# runs.Run, push.PushConfig). Longer is invalid params, never a DataError.
STORED_LENGTHS: dict[tuple[str, str], int] = {
    ("lf.a2a.v1.Message", "message_id"): 512,
    ("lf.a2a.v1.Message", "context_id"): 256,
    ("lf.a2a.v1.TaskPushNotificationConfig", "id"): 128,
    ("lf.a2a.v1.TaskPushNotificationConfig", "url"): 2048,
    ("lf.a2a.v1.AuthenticationInfo", "scheme"): 64,
}
_WELL_KNOWN = "google.protobuf."


def _refused(path: str, problem: str) -> CallerInputInvalid:
    return CallerInputInvalid(f"{path} {problem}.", field=path)


def request_doc_check(doc: dict[str, Any], descriptor: Descriptor, *, field: str = "params") -> None:
    """The JSON form of a request, before ParseDict: no NUL, no number past a double (ParseDict
    raises OverflowError on one), and no enum name the proto lacks (`ignore_unknown_fields` would
    drop `"status": "TASK_STATE_BOGUS"` silently, listing every task)."""
    caller_json_check(doc, field=field)
    stack: list[tuple[str, dict[str, Any], Descriptor]] = [(field, doc, descriptor)]
    while stack:
        path, node, described = stack.pop()
        for key, value in node.items():
            spec = described.fields_by_camelcase_name.get(key) or described.fields_by_name.get(key)
            if spec is None:
                continue
            values = value if isinstance(value, list) else [value]
            if spec.enum_type is not None:
                names = spec.enum_type.values_by_name
                if any(isinstance(v, str) and v not in names for v in values):
                    raise _refused(f"{path}.{key}", f"is not a {spec.enum_type.name} value")
            elif spec.message_type is not None and not spec.message_type.full_name.startswith(_WELL_KNOWN):
                stack.extend((f"{path}.{key}", v, spec.message_type) for v in values if isinstance(v, dict))


def request_check(message: ProtoMessage, *, field: str = "params", structs: bool = True) -> None:
    """A parsed request, whatever its binding sent (gRPC's arrive as protos): no NUL in a string,
    no string past its column (STORED_LENGTHS), only finite numbers (a gRPC Struct can carry NaN
    and Infinity, which no JSON can), only enum values the proto names, no negative historyLength
    (A2A 1.0 §3.2.4 gives it no meaning; GetTask, ListTasks and SendMessage alike refuse it).

    `structs=False`: the Struct/Value subtrees came from JSON that request_doc_check already
    walked, so they are skipped (walking them again through the proto API costs as much as
    ParseDict itself)."""
    stack: list[tuple[str, ProtoMessage]] = [(field, message)]
    while stack:
        path, node = stack.pop()
        owner = node.DESCRIPTOR.full_name
        for spec, value in node.ListFields():
            if not structs and spec.message_type is not None and spec.message_type.full_name.startswith(_WELL_KNOWN):
                continue
            here = f"{path}.{spec.camelcase_name}"
            if spec.message_type is not None and spec.message_type.GetOptions().map_entry:
                value_spec = spec.message_type.fields_by_name["value"]
                for key, item in value.items():
                    if isinstance(key, str) and (problem := text_problem(key)) is not None:
                        raise _refused(f"A member name in {here}", problem)
                    if value_spec.message_type is not None:
                        stack.append((f"{here}[…]", item))
                    else:
                        _scalar_check(f"{here}[…]", value_spec, item, None)
                continue
            items = list(value) if spec.is_repeated else [value]
            for index, item in enumerate(items):
                at = f"{here}[{index}]" if spec.is_repeated else here
                if spec.message_type is not None:
                    stack.append((at, item))
                else:
                    _scalar_check(at, spec, item, STORED_LENGTHS.get((owner, spec.name)))


def _scalar_check(path: str, spec: FieldDescriptor, value: Any, max_length: int | None) -> None:
    if isinstance(value, str):
        problem = text_problem(value, max_length=max_length)
    elif spec.enum_type is not None:
        problem = None if value in spec.enum_type.values_by_number else f"is not a {spec.enum_type.name} value"
    elif isinstance(value, float):
        problem = number_problem(value)
    elif spec.name == "history_length" and value < 0:
        problem = "must not be negative"
    else:
        problem = None
    if problem is not None:
        raise _refused(path, problem)
