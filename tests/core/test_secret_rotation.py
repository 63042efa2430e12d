"""Rotating DJANGO_SECRET_KEY (docs/operators/secrets-and-rotation.md): every kind of sealed value
opens under a fallback key, `manage.py reseal` moves each to the current key (idempotent, in
batches), `manage.py doctor secrets` names what no key opens (kind, tenant, id; never the value),
and the card says what to do when its key cannot be opened. In-process; the live round trip with
deliveries is tests/push/test_live_secret_rotation.py."""

from __future__ import annotations

import logging
from io import StringIO
from typing import Any

import pytest
from cryptography.fernet import InvalidToken
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.a2a.models import CardSigningKey
from apps.a2a.previews import served_card_wire
from apps.a2a.services import card_key_activate, card_key_generate
from apps.a2a.signing import CARD_SIGNING_KEYS, card_signing_advertised
from apps.agents.models import Agent
from apps.agents.services import DEMO_AGENT_ID, agent_demo_seed
from apps.core.sealing import PUSH_CREDENTIALS, seal, seal_state, unseal
from apps.oauth.models import TrustedIssuer
from apps.oauth.services import OAUTH_INTROSPECTION_SECRET, introspection_secret
from apps.peers.models import PeerCredential
from apps.peers.selectors import PEER_CREDENTIALS, peer_authorization
from apps.peers.services import peer_credential_create
from apps.push.models import PushConfig, Webhook
from apps.push.services import push_config_create, webhook_register
from apps.tenants.models import Tenant
from tests.door_client import DoorClient
from tests.runs import conftest as runs_fixtures
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db
# The seeded callers of tests/runs (a REST client per tenant key).
caller_for, acme, globex, sent_advances = (
    runs_fixtures.caller_for, runs_fixtures.acme, runs_fixtures.globex, runs_fixtures.sent_advances,
)  # fmt: skip

K1 = "rotation-key-one-" + "1" * 40
K2 = "rotation-key-two-" + "2" * 40
K3 = "rotation-key-three-" + "3" * 40
PLAIN = {
    "push": "tok-rotation-push-4e1a",
    "webhook": "whsec-rotation-hook-77b0",
    "peer": "peer-rotation-token-c3d9",
    "oauth": "introspection-rotation-secret-5f2a",
}


@pytest.fixture(autouse=True)
def public_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    import ipaddress

    monkeypatch.setattr("apps.core.egress.resolve_host", lambda host, port: [ipaddress.ip_address("93.184.216.34")])


def _stored(acme: Caller, settings: Any) -> dict[str, Any]:
    """One value of each kind, sealed under K1, as a host running on K1 stores them."""
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = K1, []
    run_id = acme.create_run("conformance-approval")  # not finished: its config keeps the credential
    config = push_config_create(subject=acme.subject, task_id=run_id, url="https://hooks.example.com/push",
                                token=PLAIN["push"])  # fmt: skip
    webhook = webhook_register(subject=acme.subject, url="https://hooks.example.com/hook", events=["run.completed"],
                               secret=PLAIN["webhook"])  # fmt: skip
    peer = peer_credential_create(subject=acme.subject, url="https://peer.example.com/", secret=PLAIN["peer"])
    key = card_key_activate(key_pk=card_key_generate(algorithm="EdDSA", actor="test").pk, actor="test")
    issuer = TrustedIssuer.objects.create(
        issuer="https://idp.example.com", tenant=Tenant.objects.get(slug="acme"),
        introspection_client_secret=seal(PLAIN["oauth"], purpose=OAUTH_INTROSPECTION_SECRET).decode("ascii"),
    )  # fmt: skip
    return {"config": config, "webhook": webhook, "peer": peer, "key": key, "issuer": issuer}


def _opened(rows: dict[str, Any]) -> dict[str, str]:
    config = PushConfig.unscoped_all_tenants.get(pk=rows["config"].pk)
    webhook = Webhook.unscoped_all_tenants.get(pk=rows["webhook"].pk)
    peer = PeerCredential.unscoped_all_tenants.get(pk=rows["peer"].pk)
    unseal(CardSigningKey.objects.get(pk=rows["key"].pk).private_key_sealed, purpose=CARD_SIGNING_KEYS)
    return {
        "push": unseal(config.credentials_sealed, purpose=PUSH_CREDENTIALS),
        "webhook": unseal(webhook.secret_sealed, purpose=PUSH_CREDENTIALS),
        "peer": peer_authorization(peer).removeprefix("Bearer "),
        "oauth": introspection_secret(TrustedIssuer.objects.get(pk=rows["issuer"].pk)),
    }


def _command(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


def _tokens(rows: dict[str, Any]) -> list[str]:
    return [
        bytes(PushConfig.unscoped_all_tenants.get(pk=rows["config"].pk).credentials_sealed).decode(),
        bytes(Webhook.unscoped_all_tenants.get(pk=rows["webhook"].pk).secret_sealed).decode(),
        bytes(PeerCredential.unscoped_all_tenants.get(pk=rows["peer"].pk).secret_sealed).decode(),
        bytes(CardSigningKey.objects.get(pk=rows["key"].pk).private_key_sealed).decode(),
        TrustedIssuer.objects.get(pk=rows["issuer"].pk).introspection_client_secret,
    ]


def test_rotation_with_a_fallback_every_kind_opens_reseal_moves_them_then_the_fallback_can_go(
    acme: Caller, settings: Any
) -> None:
    rows = _stored(acme, settings)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = K2, [K1]
    assert _opened(rows) == PLAIN  # everything opens under the fallback
    assert card_signing_advertised()["signed"] is True

    code, out, _ = _command("doctor", "secrets")
    assert code == 0 and "5 values open only under DJANGO_SECRET_KEY_FALLBACKS" in out, out

    code, out, _ = _command("reseal", "--batch", "1")  # one row per transaction: still every row
    assert code == 0, out
    for kind in ("push.credentials", "webhook.secret", "peer.credential", "card.signing-key",
                 "oauth.introspection-secret"):  # fmt: skip
        assert f"{kind}: 1 resealed, 0 already current, 0 cannot be opened" in out, out
    assert all(seal_state(t.encode(), purpose=p) == "current" for t, p in zip(
        _tokens(rows), [PUSH_CREDENTIALS, PUSH_CREDENTIALS, PEER_CREDENTIALS, CARD_SIGNING_KEYS,
                        OAUTH_INTROSPECTION_SECRET], strict=True))  # fmt: skip
    resealed = _tokens(rows)
    code, out, _ = _command("reseal")
    assert code == 0 and out.count(": 0 resealed, 1 already current, 0 cannot be opened") == 5, out
    assert _tokens(rows) == resealed  # idempotent: a second run rewrote nothing

    settings.SECRET_KEY_FALLBACKS = []  # the fallback goes
    assert _opened(rows) == PLAIN
    code, out, _ = _command("doctor", "secrets")
    assert code == 0 and "every stored secret opens" in out and "FALLBACKS" not in out, out
    for value in PLAIN.values():
        assert value not in out


def test_rotation_without_a_fallback_doctor_and_reseal_name_each_value_and_the_card_says_what_to_do(
    acme: Caller, globex: Caller, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rows = _stored(acme, settings)
    theirs = peer_credential_create(subject=globex.subject, url="https://peer.example.com/", secret="globex-peer")
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = K3, []
    with pytest.raises(InvalidToken):
        unseal(rows["webhook"].secret_sealed, purpose=PUSH_CREDENTIALS)

    code, out, err = _command("doctor", "secrets")
    assert code == 1, out + err
    listed = set(out.splitlines())
    expected = {
        f"push.credentials\tacme\t{rows['config'].config_id}",
        f"webhook.secret\tacme\t{rows['webhook'].webhook_id}",
        f"peer.credential\tacme\t{rows['peer'].credential_id}",
        f"peer.credential\tglobex\t{theirs.credential_id}",
        f"card.signing-key\t(host)\t{rows['key'].kid}",
        "oauth.introspection-secret\tacme\thttps://idp.example.com",
    }
    assert expected <= listed, out
    for secret in [*PLAIN.values(), *_tokens(rows)]:
        assert secret not in out + err  # never the value, sealed or clear

    code, out, err = _command("reseal")
    assert code == 2, out + err
    assert "6 stored values open under no key" in err and set(err.splitlines()) >= expected, err
    for secret in [*PLAIN.values(), *_tokens(rows)]:
        assert secret not in out + err

    # The card: served unsigned, discovery says so, the log says what to do (once per card build).
    caplog.set_level(logging.ERROR)
    assert card_signing_advertised() == {"signed": False}
    assert "signatures" not in served_card_wire()
    assert "card_key generate --algorithm EdDSA --activate" in caplog.text
    assert "DJANGO_SECRET_KEY_FALLBACKS" in caplog.text and rows["key"].kid in caplog.text
    # ...and doing it mends the card.
    call_command("card_key", "generate", "--algorithm", "EdDSA", "--activate", stdout=StringIO())
    assert card_signing_advertised()["signed"] is True
    # The old key is retired: it never signs again, so its private half is no longer a loss.
    code, out, _ = _command("doctor", "secrets")
    assert code == 1 and "card.signing-key" not in out and f"webhook.secret\tacme\t{rows['webhook'].webhook_id}" in out


def test_per_agent_cards_keep_their_tenant_across_a_secret_change_and_a_version_change(
    acme: Caller, globex: Caller, settings: Any
) -> None:
    """The per-agent card (GetExtendedAgentCard with `tenant: R`, HTTP+JSON binding) of an agent
    made by this release and of one from before R was stored (after `reseal`)."""
    tenant = Tenant.objects.get(slug="acme")
    demo = agent_demo_seed(tenant=tenant)
    agent_demo_seed(tenant=Tenant.objects.get(slug="globex"))
    old = Agent.objects.for_tenant(tenant).get(agent_id=DEMO_AGENT_ID)
    assert old.pk == demo.pk

    def card(caller: Caller, r: str) -> Any:
        headers = {"Authorization": f"Bearer {caller.key}", "A2A-Version": "1.0"}
        return DoorClient().get(f"/a2a/rest/{r}/extendedAgentCard", headers=headers)

    def tenants_of(caller: Caller, r: str) -> set[str]:
        response = card(caller, r)
        assert response.status_code == 200, response.content
        return {i["tenant"] for i in response.json()["supportedInterfaces"]}

    r = Agent.objects.for_tenant(tenant).get(pk=demo.pk).a2a_tenant
    assert r and tenants_of(acme, r) == {r}
    settings.SECRET_KEY = K2
    settings.SPECTACULAR_SETTINGS = {**settings.SPECTACULAR_SETTINGS, "VERSION": "9.9.9"}
    assert tenants_of(acme, r) == {r}
    # Another tenant's caller with this R: exactly an R never minted.
    foreign, never = card(globex, r), card(globex, "A" * 32)
    assert foreign.status_code == never.status_code and foreign.content == never.content
