"""No secret in any log (STYLE.md habit 16; issue 12 §5): API keys, A2A push tokens and
credentials, webhook secrets. A real uvicorn and a real Celery worker run with DJANGO_LOG_LEVEL=DEBUG
and deliver real pushes over HTTPS; the test process's own logging is captured at DEBUG too. Every
secret is then searched for in every captured line: in full, and its secret half alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trustme
from django.test import Client

from apps.agents.services import workflow_fixtures_seed
from apps.push.models import Delivery, DeliveryStatus
from apps.tenants.models import Tenant
from tests.core.https_receivers import https_receiver
from tests.live import start_celery_worker, start_web, wait_until

PUSH_TOKEN = "push-token-3f9c1e7a5b2d4c6e8f0a1b2c3d4e5f60"
PUSH_CREDENTIALS = "push-credential-9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
WEBHOOK_SECRET = "whsec-6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b"
WRONG_KEY = "owk_0123456789ab.this-is-a-wrong-but-well-formed-secret-xyz"


def _needles(secret: str) -> list[str]:
    """The secret, and for an API key also its secret half (the prefix is public by design)."""
    return [secret, secret.split(".", 1)[1]] if secret.startswith("owk_") else [secret]


def _a2a(client: httpx.Client, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        "/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"},
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.usefixtures("transactional_db")
def test_no_secret_reaches_a_log(
    live_env: Any, make_key: Callable[..., str], ca: trustme.CA, ca_bundle: str, caplog: pytest.LogCaptureFixture
) -> None:
    env, var_dir = live_env
    log_dir = var_dir / "secrets-debug"
    log_dir.mkdir(exist_ok=True)
    own_env = {
        **env,
        "DJANGO_LOG_LEVEL": "DEBUG",
        "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-secrets",
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
        "OPENWOP_EGRESS_CA_BUNDLE": ca_bundle,
    }
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    web, base_url = start_web(own_env, log_dir)
    worker = start_celery_worker(own_env, log_dir, name="secrets", loglevel="debug")
    caplog.set_level(logging.DEBUG)
    try:
        with https_receiver(ca, "127.0.0.1") as receiver, httpx.Client(base_url=base_url, timeout=30) as client:
            hook = f"https://127.0.0.1:{receiver.port}/hook"
            auth = {"Authorization": f"Bearer {key}"}
            registered = client.post(
                "/webhooks", json={"url": hook, "events": ["run.completed"], "secret": WEBHOOK_SECRET}, headers=auth
            )
            assert registered.status_code == 201, registered.text
            # A2A: an inline push config with a token, and a config with scheme + credentials.
            sent = _a2a(
                client,
                key,
                "SendMessage",
                {
                    "message": {"messageId": "secret-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
                    "configuration": {
                        "returnImmediately": True,
                        "taskPushNotificationConfig": {"url": hook, "token": PUSH_TOKEN},
                    },
                },
            )
            task_id = sent["result"]["task"]["id"]
            approval = client.post("/runs", json={"workflowId": "conformance-approval"}, headers=auth).json()["runId"]
            configured = _a2a(
                client,
                key,
                "CreateTaskPushNotificationConfig",
                {
                    "taskId": approval,
                    "url": hook,
                    "authentication": {"scheme": "Basic", "credentials": PUSH_CREDENTIALS},
                },
            )
            assert "credentials" not in str(configured["result"])
            wait_until(  # the worker suspends the run at its gate first
                lambda: (
                    client.post(
                        f"/runs/{approval.replace('/', '~2F')}/interrupts/approve",
                        json={"resumeValue": {"action": "accept"}},
                        headers=auth,
                    ).status_code
                    < 300
                ),
                "the approval gate to open",
                timeout=30,
            )
            # Refusals that see a credential: a wrong key on every door.
            wrong = {"Authorization": f"Bearer {WRONG_KEY}"}
            assert client.get("/runs", headers=wrong).status_code == 401
            for path, method in (("/a2a/jsonrpc", "GetTask"), ("/mcp", "tools/list")):
                body = {"jsonrpc": "2.0", "id": 1, "method": method}
                assert client.post(path, json=body, headers=wrong).status_code == 401

            def pushed() -> bool:
                tokens = {r.headers.get("Authorization") for r in receiver.received}
                settled = not Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.PENDING).exists()
                signed = any(h.lower() == "openwop-signature" for r in receiver.received for h in r.headers)
                return settled and signed and {f"Bearer {PUSH_TOKEN}", f"Basic {PUSH_CREDENTIALS}"} <= tokens

            wait_until(pushed, f"pushes with both credentials to arrive\n{worker.log()[-3000:]}", timeout=60)
            assert task_id
        # In-process too, with this process's logging at DEBUG.
        local = Client()
        local.post(
            "/webhooks",
            data={"url": "https://127.0.0.1:1/x", "events": ["run.completed"], "secret": WEBHOOK_SECRET},
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )
        local.get("/runs", headers={"Authorization": f"Bearer {WRONG_KEY}"})
    finally:
        worker.stop()
        web.stop()

    logs = {"web": web.log(), "worker": worker.log(), "pytest": caplog.text}
    # The lines were really captured: the server's access line per request, the egress module's
    # per-attempt line.
    assert '"POST /webhooks HTTP/1.1" 201' in logs["web"], logs["web"][-2000:]
    assert "answered 200" in logs["worker"], logs["worker"][-2000:]
    for secret in (key, WRONG_KEY, PUSH_TOKEN, PUSH_CREDENTIALS, WEBHOOK_SECRET):
        for needle in _needles(secret):
            for name, text in logs.items():
                assert needle not in text, f"a secret ({needle[:12]}...) is in the {name} log"
