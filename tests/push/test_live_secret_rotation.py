"""Black box: DJANGO_SECRET_KEY rotated on a live host (uvicorn + a Celery worker, restarted with
each new key as an operator would; the commands run with its keys on its database) while
deliveries go to a real HTTPS receiver on loopback (docs/operators/secrets-and-rotation.md).

With the old key as a fallback: deliveries queued before the change and made after it arrive,
signed with the webhook's secret and carrying the push credential; the card stays signed by the
same key; the per-agent routing value stays; `reseal` moves every value to the new key (again:
nothing to do); the fallback goes and everything still opens.

Without it: each delivery is dead-lettered at once with `credential_unopenable` (no attempt, one
log line with its id and tenant, never a secret), the dead-letter read says so, `doctor secrets`
lists each value (kind, tenant, id), `reseal` exits 2 naming them, the card is served unsigned
with the log saying what to do, and the routing value still stays."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import StringIO
from typing import Any

import httpx
import pytest
import trustme
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from apps.a2a.services import card_key_activate, card_key_generate
from apps.peers.services import peer_credential_create
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus, PushConfig
from apps.push.services import push_config_create
from apps.tenants.selectors import subject_from_api_key
from tests.core.https_receivers import Received, Receiver, https_receiver
from tests.live import LiveProcess, start_celery_worker, start_web, wait_until
from tests.push.conftest import live_push_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]

K1 = "live-rotation-key-one-" + "1" * 40
K2 = "live-rotation-key-two-" + "2" * 40
K3 = "live-rotation-key-three-" + "3" * 40
HOOK_SECRET = "whsec-live-rotation-3f9d"
TOKEN = "tok-live-rotation-8a21"
PEER_SECRET = "peer-live-rotation-6c04"


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


class Host:
    """The live host of one test: web + worker on one queue, restarted with each key."""

    def __init__(self, env: dict[str, str], var_dir: Any, ca_bundle: str) -> None:
        self.base_env = live_push_env(env, ca_bundle, queue="rotation", BACKOFF_BASE_SECONDS="0", MAX_ATTEMPTS="3")
        self.var_dir = var_dir
        self.env: dict[str, str] = {}
        self.web: LiveProcess | None = None
        self.worker: LiveProcess | None = None
        self.url = ""
        self.generation = 0

    def start(self, key: str, fallbacks: str = "", *, worker: bool = True) -> None:
        self.stop()
        self.generation += 1
        self.env = {**self.base_env, "DJANGO_SECRET_KEY": key, "DJANGO_SECRET_KEY_FALLBACKS": fallbacks}
        self.web, self.url = start_web(self.env, self.var_dir)
        if worker:
            self.worker = start_celery_worker(self.env, self.var_dir, name=f"rotation-{self.generation}")

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None

    def stop(self) -> None:
        self.stop_worker()
        if self.web is not None:
            self.web.stop()
            self.web = None

    def manage(self, *args: str) -> Outcome:
        """A management command with this host's keys, in this process (the same database)."""
        fallbacks = [k for k in self.env["DJANGO_SECRET_KEY_FALLBACKS"].split(",") if k]
        out, err = StringIO(), StringIO()
        with override_settings(SECRET_KEY=self.env["DJANGO_SECRET_KEY"], SECRET_KEY_FALLBACKS=fallbacks):
            try:
                call_command(*args, stdout=out, stderr=err)
            except CommandError as exc:
                return Outcome(exc.returncode, out.getvalue(), err.getvalue() + str(exc))
        return Outcome(0, out.getvalue(), err.getvalue())

    def logs(self) -> str:
        return "".join(p.log() for p in (self.web, self.worker) if p is not None)


@pytest.fixture
def host(live_env: Any, ca_bundle: str) -> Iterator[Host]:
    env, var_dir = live_env
    live = Host(env, var_dir, ca_bundle)
    try:
        yield live
    finally:
        live.stop()


@contextmanager
def receiving(ca: trustme.CA) -> Iterator[Receiver]:
    with https_receiver(ca, "127.0.0.1") as receiver:
        yield receiver


def _signed(seen: Received) -> bool:
    timestamp = seen.headers["OpenWOP-Timestamp"]
    expected = hmac.new(HOOK_SECRET.encode(), f"{timestamp}.".encode() + seen.body, hashlib.sha256).hexdigest()
    return bool(seen.headers.get("OpenWOP-Signature") == f"sha256={expected}")


def _hooks(receiver: Receiver) -> list[Received]:
    return [seen for seen in receiver.received if seen.path == "/hook"]


def _pushes(receiver: Receiver) -> list[Received]:
    return [seen for seen in receiver.received if seen.path == "/push"]


class Tenant:
    def __init__(self, host: Host, key: str) -> None:
        self.host, self.key = host, key

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.host.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30)

    def runs(self, count: int) -> None:
        with self.client() as client:
            for _ in range(count):
                created = client.post("/runs", json={"workflowId": "conformance-noop"})
                assert created.status_code == 201, created.text

    def routing_value(self) -> str:
        with self.client() as client:
            agents = client.get("/agents").json()["agents"]
        [demo] = agents
        return str(demo["a2aTenant"])

    def card_kid(self) -> str | None:
        with self.client() as client:
            discovery = client.get("/.well-known/openwop").json()["extensions"]["openwop-host.cardSigning"]
            card = client.get("/.well-known/agent-card.json").json()
        assert ("signatures" in card) is discovery["signed"]
        return discovery.get("kid")


def _sealed_under(key: str, *, tenant: Tenant, run_id: str, receiver: Receiver) -> dict[str, str]:
    """What a host running on `key` stores sealed besides the webhook (registered through the live
    REST API): a push config on a task still waiting for input (so it keeps its credential), a
    peer credential and the active card key. Made in-process by the services, under `key`."""
    with override_settings(SECRET_KEY=key):
        subject = subject_from_api_key(tenant.key)
        config = push_config_create(subject=subject, task_id=run_id, url=f"https://127.0.0.1:{receiver.port}/push",
                                    token=TOKEN)  # fmt: skip
        peer = peer_credential_create(subject=subject, url="https://peer.example.com/", secret=PEER_SECRET)
        card = card_key_activate(key_pk=card_key_generate(algorithm="EdDSA", actor="test").pk, actor="test")
    return {"config": config.config_id, "peer": peer.credential_id, "kid": card.kid}


def _setup(host: Host, make_key: Callable[..., str], receiver: Receiver) -> tuple[Tenant, str, str, dict[str, str]]:
    """On K1: the tenant, its webhook (REST), a task waiting for approval with a push config."""
    acme = Tenant(host, make_key("acme"))
    with acme.client() as client:
        hook = client.post("/webhooks", json={"url": f"https://127.0.0.1:{receiver.port}/hook",
                                              "events": ["run.completed"], "secret": HOOK_SECRET})  # fmt: skip
        assert hook.status_code == 201, hook.text
        waiting = client.post("/runs", json={"workflowId": "conformance-approval"})
        assert waiting.status_code == 201, waiting.text
    run_id = waiting.json()["runId"]
    wait_until(lambda: _state(acme, run_id) == "waiting-approval", f"the approval run to wait\n{host.logs()[-3000:]}")
    sealed = _sealed_under(K1, tenant=acme, run_id=run_id, receiver=receiver)
    return acme, hook.json()["webhookId"], run_id, sealed


def _state(tenant: Tenant, run_id: str) -> str:
    with tenant.client() as client:
        return str(client.get(f"/runs/{run_id.replace('/', '~2F')}").json().get("status"))


def _approve(tenant: Tenant, run_id: str) -> None:
    with tenant.client() as client:
        answer = client.post(f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve",
                             json={"resumeValue": {"action": "accept"}})  # fmt: skip
    assert answer.status_code in (200, 202), answer.text


def test_rotation_with_the_old_key_as_a_fallback_loses_nothing_then_reseal_lets_it_go(
    host: Host, make_key: Callable[..., str], ca: trustme.CA
) -> None:
    with receiving(ca) as receiver:
        host.start(K1)
        acme, _, run_id, sealed = _setup(host, make_key, receiver)
        r = acme.routing_value()
        assert acme.card_kid() == sealed["kid"]
        acme.runs(2)
        wait_until(lambda: len(_hooks(receiver)) == 2, f"2 deliveries on K1\n{host.logs()[-3000:]}")
        # Runs made while no worker runs: their deliveries are still to be made or sent when the
        # key changes.
        host.stop_worker()
        acme.runs(2)

        host.start(K2, K1)  # the new key, the old one as the fallback
        wait_until(lambda: len(_hooks(receiver)) == 4, f"the 2 queued deliveries on K2\n{host.logs()[-3000:]}")
        acme.runs(2)
        wait_until(lambda: len(_hooks(receiver)) == 6, f"2 more deliveries on K2\n{host.logs()[-3000:]}")
        assert acme.card_kid() == sealed["kid"] and acme.routing_value() == r
        doctor = host.manage("doctor", "secrets")
        assert doctor.returncode == 0 and "values open only under DJANGO_SECRET_KEY_FALLBACKS" in doctor.stdout, doctor
        resealed = host.manage("reseal")
        assert resealed.returncode == 0, resealed.stdout + resealed.stderr
        for kind in ("webhook.secret", "push.credentials", "peer.credential", "card.signing-key"):
            assert f"{kind}: 1 resealed, 0 already current, 0 cannot be opened" in resealed.stdout, resealed.stdout
        again = host.manage("reseal")
        assert again.returncode == 0 and " 1 resealed" not in again.stdout, again.stdout

        host.start(K2)  # the fallback goes
        acme.runs(2)
        _approve(acme, run_id)  # the waiting task's pushes: its credential, resealed, opens on K2 alone
        wait_until(lambda: len(_hooks(receiver)) == 9 and len(_pushes(receiver)) >= 2,
                   f"deliveries on K2 alone\n{host.logs()[-3000:]}")  # fmt: skip
        assert acme.card_kid() == sealed["kid"] and acme.routing_value() == r
        doctor = host.manage("doctor", "secrets")
        assert doctor.returncode == 0 and "every stored secret opens" in doctor.stdout, doctor

    assert all(_signed(seen) for seen in _hooks(receiver))
    assert {seen.headers.get("Authorization") for seen in _pushes(receiver)} == {f"Bearer {TOKEN}"}
    assert not Delivery.unscoped_all_tenants.exclude(status=DeliveryStatus.DELIVERED).exists()
    logs = host.logs()
    for secret in (HOOK_SECRET, TOKEN, PEER_SECRET, K1, K2):
        assert secret not in logs + doctor.stdout + resealed.stdout


def test_rotation_without_the_old_key_dead_letters_at_once_and_says_what_cannot_be_opened(
    host: Host, make_key: Callable[..., str], ca: trustme.CA
) -> None:
    with receiving(ca) as receiver:
        host.start(K1)
        acme, webhook_id, run_id, sealed = _setup(host, make_key, receiver)
        r = acme.routing_value()
        acme.runs(1)
        wait_until(lambda: len(_hooks(receiver)) == 1, f"a delivery on K1\n{host.logs()[-3000:]}")

        host.start(K3)  # a new key and no fallback
        acme.runs(2)
        _approve(acme, run_id)  # 3 run.completed webhook deliveries, the task's pushes
        dead = Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.DEAD)
        wait_until(lambda: dead.filter(kind="webhook").count() == 3 and dead.filter(kind="a2a_push").count() >= 2,
                   f"the deliveries dead-lettered\n{host.logs()[-3000:]}")  # fmt: skip
        assert len(_hooks(receiver)) == 1 and _pushes(receiver) == []  # nothing was sent without its credential
        for row in dead:
            assert (row.attempts, row.last_error) == (0, "credential_unopenable"), row
            assert host.worker is not None
            lines = [line for line in host.worker.log().splitlines() if row.delivery_id in line]
            assert len(lines) == 1 and "tenant acme" in lines[0], lines
        assert not DeliveryAttempt.unscoped_all_tenants.filter(delivery__in=dead).exists()

        # The tenant reads why; another tenant's read is an unknown webhook's.
        with acme.client() as client:
            records = client.get(f"/webhooks/{webhook_id}/dead-letters").json()["deadLetters"]
        assert [(d["lastError"], d["attempts"]) for d in records] == [("credential_unopenable", 0)] * 3
        globex = Tenant(host, make_key("globex"))
        with globex.client() as client:
            foreign = client.get(f"/webhooks/{webhook_id}/dead-letters")
            unknown = client.get("/webhooks/no-such-webhook-00000000/dead-letters")
        assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content

        # What no key opens, named; the push config's credential went with its task's final push.
        doctor = host.manage("doctor", "secrets")
        assert doctor.returncode == 1, doctor
        listed = set(doctor.stdout.splitlines())
        expected = {
            f"webhook.secret\tacme\t{webhook_id}",
            f"peer.credential\tacme\t{sealed['peer']}",
            f"card.signing-key\t(host)\t{sealed['kid']}",
        }
        assert expected <= listed, doctor.stdout
        assert PushConfig.unscoped_all_tenants.get(config_id=sealed["config"]).credentials_sealed is None
        resealed = host.manage("reseal")
        assert resealed.returncode == 2 and expected <= set(resealed.stderr.splitlines()), resealed

        # The card goes out unsigned, and the log says what to do; doing it signs it again.
        assert acme.card_kid() is None
        assert host.web is not None and "manage.py card_key generate --algorithm EdDSA --activate" in host.web.log()
        generated = host.manage("card_key", "generate", "--algorithm", "EdDSA", "--activate")
        assert generated.returncode == 0, generated.stderr
        wait_until(lambda: acme.card_kid() not in (None, sealed["kid"]), "the card signed by the new key")
        assert acme.routing_value() == r  # stored: no key change moves it

    logs = host.logs()
    for secret in (HOOK_SECRET, TOKEN, PEER_SECRET, K1, K3):
        assert secret not in logs + doctor.stdout + resealed.stdout + resealed.stderr
