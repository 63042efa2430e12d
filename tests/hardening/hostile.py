"""Hypothesis strategies of hostile JSON-RPC for the A2A and MCP doors, and the properties every
answer must keep (issue 12): never a 5xx, never the OpenWOP envelope on a protocol URL, never a
stack trace, never a state change from a refused request.

A case is (body bytes, headers). Bodies range from near-valid requests with one field poisoned to
raw garbage: wrong types, huge numbers (past a double too), deep nesting, strings past their
columns (a 513-character messageId), odd unicode (lone surrogates, NUL, RTL, non-ASCII digits),
duplicate keys (written as text, since a dict cannot hold them), missing and extra fields, wrong
and legacy methods. Headers vary the credential, the version headers and the Content-Type.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from apps.push.models import PushConfig
from apps.runs.models import Run, RunEvent

# `make fuzz` raises this (FUZZ_EXAMPLES=10000); the normal suite runs a derandomized few hundred.
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0") or 0)


def fuzz_settings(default_examples: int, *, fuzz_cap: int | None = None) -> settings:
    """`default_examples` in the suite; FUZZ_EXAMPLES (at most `fuzz_cap`) under `make fuzz`."""
    fuzzing = min(FUZZ_EXAMPLES, fuzz_cap) if FUZZ_EXAMPLES and fuzz_cap else FUZZ_EXAMPLES
    return settings(
        max_examples=fuzzing or default_examples,
        deadline=None,
        derandomize=not FUZZ_EXAMPLES,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


A2A_METHODS = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/send",
    "tasks/get",
    "tasks/cancel",  # 0.3 names
]
MCP_METHODS = [
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "initialize",
    "ping",
    "resources/list",
    "prompts/list",
    "subscriptions/listen",
    "notifications/cancelled",
]

weird_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\ud800",
            "\u202e",
            "\U0001f600" * 50,
            "../../etc/passwd",
            "%2F",
            "~2F",
            "~ZZ",
            "acme/../globex",
            "a" * 5000,
            "' OR 1=1 --",
            "<script>",
            "\r\nX-Injected: 1",
            "null",
            "1e999",
            "m" * 513,
            "a\x00b",
            "\x00" * 3,
            "²",
            "٣",
        ]
    ),
)
huge_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(
        [2**63, -(2**63) - 1, 2**64, 10**30, -1, 0, 1e308, -1e308, 1e-320, 0.5, 10**309, -(10**309), 10**400]
    ),  # the last three: past a double (issue 33 item 11)
)
scalars = st.one_of(st.none(), st.booleans(), huge_numbers, weird_text)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(weird_text, inner, max_size=4), max_leaves=8
)


def _field_values(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names) | weird_text, json_values, max_size=6)


A2A_FIELDS = [
    "message",
    "configuration",
    "metadata",
    "tenant",
    "id",
    "taskId",
    "contextId",
    "historyLength",
    "pageSize",
    "pageToken",
    "status",
    "url",
    "token",
    "authentication",
    "returnImmediately",
    "acceptedOutputModes",
    "includeArtifacts",
    "statusTimestampAfter",
    "pushNotificationConfig",
    "taskPushNotificationConfig",
]
MCP_FIELDS = ["name", "arguments", "taskId", "_meta", "cursor", "inputResponses", "requestState", "task", "ttl"]


def _message(role: Any) -> st.SearchStrategy[dict[str, Any]]:
    parts = st.lists(
        st.one_of(
            st.fixed_dictionaries({"text": weird_text}),
            st.fixed_dictionaries({"data": json_values}),
            st.fixed_dictionaries({"url": weird_text, "mediaType": weird_text}),
            st.dictionaries(weird_text, json_values, max_size=3),
        ),
        max_size=3,
    )
    return st.fixed_dictionaries(
        {"messageId": weird_text | huge_numbers, "role": role, "parts": parts},
        optional={"taskId": weird_text, "contextId": weird_text, "metadata": json_values},
    )


a2a_params = st.one_of(
    json_values,
    _field_values(A2A_FIELDS),
    st.fixed_dictionaries(
        {"message": _message(st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", 7, None]))},
        optional={"configuration": _field_values(A2A_FIELDS), "metadata": json_values, "tenant": weird_text},
    ),
    st.fixed_dictionaries({"id": weird_text | huge_numbers}, optional={"historyLength": huge_numbers}),
    st.fixed_dictionaries({"taskId": weird_text, "url": weird_text}, optional={"id": weird_text}),
)

mcp_meta = st.one_of(
    st.just(
        {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        }
    ),
    _field_values(
        [
            "io.modelcontextprotocol/protocolVersion",
            "io.modelcontextprotocol/clientCapabilities",
            "traceparent",
            "tracestate",
        ]
    ),
    json_values,
)
mcp_params = st.one_of(
    json_values,
    st.builds(lambda fields, meta: {**fields, "_meta": meta}, _field_values(MCP_FIELDS), mcp_meta),
    st.builds(
        lambda name, args, meta: {"name": name, "arguments": args, "_meta": meta},
        st.sampled_from(["echo", "conformance-noop", "conformance-approval", "conformance-failure"]) | weird_text,
        json_values,
        mcp_meta,
    ),
)


def _request(methods: list[str], params: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0, None, ""]),
            "id": st.one_of(
                st.integers(),
                weird_text,
                st.none(),
                st.booleans(),
                st.lists(st.integers(), max_size=2),
                st.just(2**80),
                st.just(1.5),
            ),
            "method": st.sampled_from(methods) | weird_text | huge_numbers,
            "params": params,
            "extra": json_values,
        },
    )


def _well_formed(methods: list[str], params: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 10**6) | st.text(max_size=8),
            "method": st.sampled_from(methods),
            "params": params,
        }
    )


def _duplicate_keys(body: dict[str, Any], key: str, value: Any) -> bytes:
    """The body's JSON with `key` written twice (the second wins in Python's parser)."""
    text = json.dumps(body)
    inner = text[1:-1]
    duplicate = f"{json.dumps(key)}: {json.dumps(value)}"
    return ("{" + duplicate + (", " + inner if inner else "") + "}").encode()


def _bodies(methods: list[str], params: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    requests = _request(methods, params)
    return st.one_of(
        _well_formed(methods, params).map(lambda b: json.dumps(b).encode()),
        _well_formed(methods, params).map(lambda b: json.dumps(b, ensure_ascii=False).encode("utf-8", "surrogatepass")),
        requests.map(lambda b: json.dumps(b).encode()),
        st.builds(
            _duplicate_keys,
            _well_formed(methods, params),
            st.sampled_from(["method", "id", "params", "jsonrpc"]),
            json_values,
        ),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.sampled_from(
            [
                b"",
                b"{",
                b"[]",
                b"[{}]",
                b"null",
                b"NaN",
                b'{"jsonrpc": "2.0", "id": 1e999, "method": "x"}',
                b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":' + b"9" * 5000 + b"}}",
                b"[" * 100 + b"]" * 100,
                b'{"a":' * 80 + b"1" + b"}" * 80,
                b"\xef\xbb\xbf{}",
                b"\xff\xfe{\x00}\x00",
                b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"text":"\\ud800"}]}}}',
            ]
        ),
    )


CONTENT_TYPES = [
    "application/json",
    "application/a2a+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "",
    "application/json; charset=latin-1",
    "image/png",
]


@dataclass(frozen=True)
class Case:
    body: bytes
    headers: dict[str, str]
    auth: str  # "valid" | "missing" | "garbage" | "foreign-scheme"
    http_method: str = "POST"

    def __repr__(self) -> str:  # keep hypothesis reports readable
        return f"Case(method={self.http_method}, auth={self.auth}, headers={self.headers}, body={self.body[:300]!r})"


def _case(body_strategy: st.SearchStrategy[bytes], extra_headers: st.SearchStrategy[dict[str, str]]) -> Any:
    return st.builds(
        Case,
        body=body_strategy,
        headers=st.builds(
            lambda ct, extra: {"Content-Type": ct, **extra}, st.sampled_from(CONTENT_TYPES), extra_headers
        ),
        auth=st.sampled_from(["valid"] * 6 + ["missing", "garbage", "foreign-scheme"]),
        http_method=st.sampled_from(["POST"] * 12 + ["GET", "PUT", "DELETE", "PATCH"]),
    )


header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20)

# Issue 33 items 10, 11: well-formed requests with one stored value poisoned (a NUL, a string past
# its column, a number past a double), so the hostility reaches the columns instead of the parser.
poison = st.sampled_from(["a\x00b", "\x00", "m" * 513, "c" * 300, 10**400, -(10**309)])
A2A_POISONED_FIELDS = ["messageId", "contextId", "taskId", "text", "data", "dataKey", "skillId", "historyLength"]


def _poisoned_a2a_case(field: str, value: Any, request_id: int) -> Case:
    message: dict[str, Any] = {
        "messageId": f"poisoned-{request_id}",
        "role": "ROLE_USER",
        "parts": [{"text": "x"}],
        "metadata": {"openwop": {"skillId": "echo"}},
    }
    params: dict[str, Any] = {"message": message}
    if field == "text":
        message["parts"] = [{"text": value}]
    elif field == "data":
        message["parts"] = [{"data": {"v": value}}]
    elif field == "dataKey":
        message["parts"] = [{"data": {str(value)[:600]: 1}}]
    elif field == "skillId":
        message["metadata"]["openwop"]["skillId"] = value
    elif field == "historyLength":
        params["configuration"] = {"historyLength": -1 if isinstance(value, str) else value}
    else:
        message[field] = value
    body = {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": params}
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    return Case(body=json.dumps(body).encode(), headers=headers, auth="valid")


poisoned_a2a_cases = st.builds(_poisoned_a2a_case, st.sampled_from(A2A_POISONED_FIELDS), poison, st.integers(0, 10**9))
a2a_cases = st.one_of(
    _case(
        _bodies(A2A_METHODS, a2a_params),
        st.fixed_dictionaries(
            {},
            optional={
                "A2A-Version": st.sampled_from(["1.0", "0.3", "", "9.9", "1", "1.0.1"]) | header_text,
                "A2A-Extensions": header_text,
                "Origin": header_text,
            },
        ),
    ),
    poisoned_a2a_cases,
)
VALID_MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}
NAME_PARAM = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


def _routed_mcp_case(method: str, fields: dict[str, Any], request_id: Any) -> Case:
    """A request that passes the envelope and header checks, so the hostility reaches dispatch."""
    params = {**fields, "_meta": VALID_MCP_META}
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    name_key = NAME_PARAM.get(method)
    if name_key is not None and isinstance(params.get(name_key), str) and params[name_key].isprintable():
        headers["Mcp-Name"] = params[name_key].encode("ascii", "ignore").decode()
        params[name_key] = headers["Mcp-Name"]
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return Case(body=json.dumps(body).encode(), headers=headers, auth="valid")


routed_mcp_cases = st.builds(
    _routed_mcp_case,
    st.sampled_from(MCP_METHODS),
    st.one_of(
        _field_values(MCP_FIELDS),
        st.fixed_dictionaries(
            {"name": st.sampled_from(["echo", "conformance-noop", "conformance-approval", "conformance-failure"])},
            optional={
                "arguments": json_values,
                "task": json_values,
                "inputResponses": json_values,
                "requestState": weird_text,
            },
        ),
        st.fixed_dictionaries({"taskId": weird_text}, optional={"inputResponses": json_values}),
    ),
    st.integers(0, 10**6) | st.text(max_size=6),
)
mcp_raw_cases = _case(
    _bodies(MCP_METHODS, mcp_params),
    st.fixed_dictionaries(
        {},
        optional={
            "MCP-Protocol-Version": st.sampled_from(["2026-07-28", "2025-06-18", "", "bogus"]) | header_text,
            "Mcp-Method": st.sampled_from(MCP_METHODS) | header_text,
            "Mcp-Name": header_text,
            "Origin": st.sampled_from(["http://127.0.0.1:8000", "https://evil.example", "null"]) | header_text,
        },
    ),
)


def _poisoned_mcp_case(where: str, value: Any, request_id: int) -> Case:
    if where == "prompt":
        method, fields = "prompts/get", {"name": value if isinstance(value, str) else "p", "arguments": {"a": value}}
    elif where == "answer":
        answer = {"action": "accept", "content": {"action": "accept", "comment": value}}
        fields = {
            "name": "conformance-approval",
            "arguments": {},
            "requestState": "x.y",
            "inputResponses": {"acme/x": answer},
        }
        method = "tools/call"
    else:
        method, fields = "tools/call", {"name": "echo", "arguments": {"greeting": value, "nested": [{"v": value}]}}
    return _routed_mcp_case(method, fields, request_id)


poisoned_mcp_cases = st.builds(
    _poisoned_mcp_case, st.sampled_from(["arguments", "prompt", "answer"]), poison, st.integers(0, 10**9)
)
mcp_cases = st.one_of(routed_mcp_cases, mcp_raw_cases, poisoned_mcp_cases)


def authorization(case: Case, key: str) -> dict[str, str]:
    return {
        "valid": {"Authorization": f"Bearer {key}"},
        "missing": {},
        "garbage": {"Authorization": "Bearer owk_nope.nope"},
        "foreign-scheme": {"Authorization": f"Basic {key}"},
    }[case.auth]


def state_counts() -> tuple[int, int, int]:
    return (
        Run.unscoped_all_tenants.count(),
        RunEvent.unscoped_all_tenants.count(),
        PushConfig.unscoped_all_tenants.count(),
    )


TRACE_MARKERS = ("Traceback (most recent call last)", 'File "/', "django.core.exceptions", "Exception Value")


def assert_protocol_answer(status: int, content_type: str, content: bytes) -> Any:
    """The properties of every answer on a protocol URL; returns the parsed JSON body (or None for
    a stream or an empty 202/405)."""
    assert status < 500, (status, content[:500])
    text = content.decode("utf-8", "replace")
    assert not any(marker in text for marker in TRACE_MARKERS), text[:800]
    if content_type.startswith("text/event-stream") or not content:
        return None
    assert content_type.startswith("application/"), (status, content_type, text[:300])
    body = json.loads(content)
    # The OpenWOP envelope is `{error: "<code>", message}`; JSON-RPC and Status put an object in `error`.
    assert not (isinstance(body, dict) and isinstance(body.get("error"), str)), body
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "jsonrpc" in body:
        # -32603 means an exception escaped a handler: hostile input must get a client error instead.
        assert body["error"].get("code") != -32603, body
    return body


def is_refusal(status: int, body: Any) -> bool:
    return status >= 400 or (isinstance(body, dict) and "error" in body)
