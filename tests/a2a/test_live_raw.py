"""Raw httpx probes against the live server: what crosses the real ASGI stack (uvicorn decodes
`%2F` in paths; middleware must leave the A2A URLs alone)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.a2a.conftest import immediately, user_message


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


def _headers(key: str | None, **extra: str) -> dict[str, str]:
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json", **extra}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def test_no_envelope_and_identical_not_found_over_the_wire(live_url: str, keys: dict[str, str]) -> None:
    rpc = f"{live_url}/a2a/jsonrpc"
    with httpx.Client(timeout=60) as http:
        for body, key, extra, code in [
            (b"{oops", keys["acme"], {}, -32700),
            (b'{"jsonrpc":"2.0","id":1,"method":"GetTask"}', None, {}, -32600),
            (b'{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}', keys["acme"], {}, -32601),
            (
                b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
                keys["acme"],
                {"A2A-Version": "0.3"},
                -32009,
            ),
        ]:
            response = http.post(rpc, content=body, headers=_headers(key, **extra))
            doc = response.json()
            assert "error" in doc and isinstance(doc["error"]["data"], list), doc
            assert doc["error"]["code"] == code and "message" not in set(doc) - {"error"}
            assert "OpenWOP-Version" not in response.headers

        sent = http.post(
            rpc,
            content=json.dumps(
                {"jsonrpc": "2.0", "id": "g", "method": "SendMessage", "params": immediately(user_message("raw-g"))}
            ),
            headers=_headers(keys["globex"]),
        ).json()
        foreign = sent["result"]["task"]["id"]
        unknown = f"acme/{'A' * 26}"

        def get(task_id: str) -> bytes:
            body = {"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": task_id}}
            return http.post(rpc, content=json.dumps(body), headers=_headers(keys["acme"])).content

        assert get(foreign) == get(unknown)
        rest_unknown = http.get(f"{live_url}/a2a/rest/tasks/{unknown}", headers=_headers(keys["acme"]))
        for form in (foreign, foreign.replace("/", "%2F"), foreign.replace("/", "~2F")):
            answer = http.get(f"{live_url}/a2a/rest/tasks/{form}", headers=_headers(keys["acme"]))
            assert (answer.status_code, answer.content) == (404, rest_unknown.content)
            mine = http.get(f"{live_url}/a2a/rest/tasks/{form}", headers=_headers(keys["globex"]))
            assert mine.status_code == 200 and mine.json()["id"] == foreign


def test_jsonrpc_subscribe_frames(live_url: str, keys: dict[str, str]) -> None:
    """SSE frames are JSON-RPC responses carrying the request id; the Task first, the terminal
    status last. The cancel is sent only after the first frame arrived, so the order is fixed."""
    rpc = f"{live_url}/a2a/jsonrpc/"
    with httpx.Client(timeout=60) as http:
        params = immediately(
            user_message(
                "raw-sub",
                text=None,
                data={"waitMs": 120000},
                metadata={"openwop": {"skillId": "conformance-cancellable"}},
            )
        )
        started = http.post(
            rpc,
            content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}),
            headers=_headers(keys["acme"]),
        ).json()["result"]["task"]
        body = {"jsonrpc": "2.0", "id": 42, "method": "SubscribeToTask", "params": {"id": started["id"]}}
        frames = []
        with http.stream("POST", rpc, content=json.dumps(body), headers=_headers(keys["acme"])) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                frames.append(json.loads(line[6:]))
                if len(frames) == 1:
                    cancel = {"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": started["id"]}}
                    assert "result" in http.post(rpc, content=json.dumps(cancel), headers=_headers(keys["acme"])).json()
    assert all(f["jsonrpc"] == "2.0" and f["id"] == 42 for f in frames)
    results = [f["result"] for f in frames]
    assert results[0]["task"]["id"] == started["id"]
    assert all(next(iter(r)) == "statusUpdate" for r in results[1:])
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
