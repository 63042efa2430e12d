"""`manage.py card_key` (issue 32 item 4): card signing keys from the command line, through the
admin's services and their audit rows. The card served afterwards verifies with the a2a-sdk's own
verifier against the served JWKS; a refusal says why and exits with status 2, changing nothing.
Keys are host-wide (no tenant owns one), so there is no cross-tenant case to make here."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import create_signature_verifier
from django.core.management import call_command
from django.core.management.base import CommandError
from jwt import PyJWK

from apps.a2a.models import CardSigningKey, CardSigningKeyChange, CardSigningKeyState
from apps.a2a.signing import JWKS_PATH
from apps.core.actors import os_user
from tests.door_client import DoorClient
from tests.live import ROOT, process_env

pytestmark = pytest.mark.django_db


def card_key(*args: str) -> str:
    out = StringIO()
    call_command("card_key", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        card_key(*args)
    assert caught.value.returncode == 2
    return str(caught.value)


def served_card_kid() -> str | None:
    """The kid that signed the public card as served, after the a2a-sdk verifier accepted it
    with the key from the served JWKS; None when the card is unsigned."""
    client = DoorClient()
    card = parse_agent_card(client.get("/.well-known/agent-card.json").json())
    if not card.signatures:
        return None
    keys = {jwk["kid"]: jwk for jwk in client.get(JWKS_PATH).json()["keys"]}
    create_signature_verifier(lambda kid, jku: PyJWK(keys[kid]), ["EdDSA", "ES256"])(card)
    [signature] = card.signatures
    protected = json.loads(base64.urlsafe_b64decode(signature.protected + "=" * (-len(signature.protected) % 4)))
    return str(protected["kid"])


def trail(kid: str) -> list[tuple[str, str]]:
    return [(c.action, c.actor) for c in CardSigningKeyChange.objects.filter(kid=kid).order_by("at", "id")]


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
def test_generate_activate_retire_and_list(algorithm: str) -> None:
    assert served_card_kid() is None
    kid = card_key("generate", "--algorithm", algorithm, "--actor", "ops:alice").strip()
    key = CardSigningKey.objects.get(kid=kid)
    assert (key.algorithm, key.state) == (algorithm, CardSigningKeyState.GENERATED)
    assert served_card_kid() is None  # generated is not signing yet

    assert f"activated {kid}" in card_key("activate", kid, "--actor", "ops:alice")
    assert served_card_kid() == kid
    listed = card_key("list").splitlines()
    assert listed[0].split("\t") == ["kid", "algorithm", "state", "created", "activated", "retired"]  # a header
    assert listed[1].split("\t")[:3] == [kid, algorithm, "active"] and len(listed) == 2

    assert f"retired {kid}" in card_key("retire", kid, "--actor", "ops:bob")
    assert served_card_kid() is None  # unsigned until another key is activated
    alice, bob = f"cli:{os_user()} as ops:alice", f"cli:{os_user()} as ops:bob"  # who ran it, and the claim
    assert trail(kid) == [("generate", alice), ("activate", alice), ("retire", bob)]
    assert "private" not in "".join(listed) and "BEGIN" not in "".join(listed)


def test_list_with_no_key_says_so_and_how_to_make_one() -> None:
    """Issue 53 item 6: an empty list is one line saying there is nothing, not silence."""
    assert not CardSigningKey.objects.exists()
    assert card_key("list").splitlines() == [
        "no card signing keys (card_key generate --algorithm EdDSA --activate makes one that signs every card)"
    ]


@pytest.mark.parametrize("prefix", ["-", "--"])
def test_a_kid_that_begins_with_a_dash_is_the_kid(prefix: str) -> None:
    """A kid is a base64url thumbprint: one in 64 begins with "-", one in 4,096 with "--". An
    operator pastes it as printed; argparse alone would take it for an unknown option."""
    printed = card_key("generate", "--algorithm", "ES256").strip()
    kid = prefix + printed[len(prefix) :]
    CardSigningKey.objects.filter(kid=printed).update(kid=kid)
    assert f"activated {kid}" in card_key("activate", kid, "--actor", "ops:alice")
    assert f"retired {kid}" in card_key("retire", "--actor", "ops:bob", kid)
    claimed = [f"cli:{os_user()} as ops:alice", f"cli:{os_user()} as ops:bob"]
    assert trail(kid) == list(zip(["activate", "retire"], claimed, strict=True))  # generate was under `printed`
    assert "No such card signing key" in refused("activate", prefix + "no-such-kid")


def test_activating_another_key_retires_the_active_one() -> None:
    first = card_key("generate", "--algorithm", "EdDSA", "--activate").strip()
    second = card_key("generate", "--algorithm", "ES256", "--activate").strip()
    assert served_card_kid() == second
    assert CardSigningKey.objects.get(kid=first).state == CardSigningKeyState.RETIRED
    assert [action for action, _ in trail(first)] == ["generate", "activate", "retire"]
    assert trail(second)[0][1] == f"cli:{os_user()}"  # no --actor: the operating-system user alone


def test_if_none_active_keeps_the_active_key() -> None:
    """`make setup` runs this on every start: the first activates a key, the next change nothing."""
    kid = card_key("generate", "--algorithm", "EdDSA", "--activate", "--if-none-active").strip()
    assert served_card_kid() == kid
    assert card_key("generate", "--algorithm", "EdDSA", "--activate", "--if-none-active") == ""
    assert CardSigningKey.objects.count() == 1 and CardSigningKeyChange.objects.count() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["activate", "no-such-kid"], "No such card signing key"),
        (["retire", "no-such-kid"], "No such card signing key"),
        (["generate", "--algorithm", "EdDSA", "--if-none-active"], "--if-none-active goes with --activate"),
    ],
)
def test_a_refusal_says_why_and_changes_nothing(args: list[str], message: str) -> None:
    assert message in refused(*args)
    assert not CardSigningKey.objects.exists() and not CardSigningKeyChange.objects.exists()


def test_a_retired_key_is_never_reactivated() -> None:
    kid = card_key("generate", "--algorithm", "EdDSA", "--activate").strip()
    card_key("retire", kid)
    before = CardSigningKeyChange.objects.count()
    assert "is retired; generate a new key instead" in refused("activate", kid)
    assert CardSigningKeyChange.objects.count() == before and served_card_kid() is None


@pytest.mark.django_db(transaction=True)  # the child process sees the test database
def test_exit_status_2_from_a_shell(tmp_path: Path, settings: Any) -> None:
    env = process_env("card-key", tmp_path)
    run = [sys.executable, "manage.py", "card_key"]
    unknown = subprocess.run([*run, "activate", "nope"], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert unknown.returncode == 2 and "No such card signing key" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    bad = subprocess.run(
        [*run, "generate", "--algorithm", "RS256"], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert bad.returncode == 2 and "invalid choice: 'RS256'" in bad.stderr
    made = subprocess.run(
        [*run, "generate", "--algorithm", "ES256", "--activate"], capture_output=True, text=True, timeout=60,
        env=env, cwd=ROOT,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert CardSigningKey.objects.get().kid == made.stdout.strip()
    dashed = "-" + made.stdout.strip()[1:]  # as pasted into a shell: no "--" needed before it
    CardSigningKey.objects.update(kid=dashed)
    retired = subprocess.run([*run, "retire", dashed], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert retired.returncode == 0 and f"retired {dashed}" in retired.stdout, retired.stderr
