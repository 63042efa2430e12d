"""`manage.py api_key list --tenant <slug>` and `api_key revoke <prefix> [--tenant <slug>]`: an
operator's shell rotates a tenant's key without the admin (docs/operators/secrets-and-rotation.md).
A revoked key is refused on the next request; a key of another tenant is refused as unknown."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from tests.envelope import assert_envelope

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("api_key", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue()


def _prefix(raw: str) -> str:
    return raw.removeprefix("owk_").split(".", 1)[0]


def _runs(raw: str) -> int:
    return Client().get("/runs", headers={"Authorization": f"Bearer {raw}"}).status_code


def test_list_shows_one_tenants_keys_and_never_a_secret(make_key) -> None:  # type: ignore[no-untyped-def]
    old, new, theirs = make_key("acme"), make_key("acme"), make_key("globex")
    code, out = _run("list", "--tenant", "acme")
    assert code == 0
    lines = out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [_prefix(old), _prefix(new)]
    assert all(line.split("\t")[2] == "active" for line in lines)
    assert _prefix(theirs) not in out
    for raw in (old, new, theirs):
        assert raw.split(".", 1)[1] not in out
    assert _run("list", "--tenant", "no-such-tenant")[0] == 2


def test_revoke_rotates_a_key_and_refuses_another_tenants(make_key) -> None:  # type: ignore[no-untyped-def]
    old, new = make_key("acme"), make_key("acme")
    make_key("globex")
    assert _runs(old) == _runs(new) == 200

    # Named with another tenant: refused exactly as a key that does not exist, and nothing changes.
    code, message = _run("revoke", _prefix(old), "--tenant", "globex")
    unknown_code, unknown = _run("revoke", "000000000000", "--tenant", "globex")
    assert code == unknown_code == 2 and "no API key" in message and "no API key" in unknown
    assert _runs(old) == 200

    code, out = _run("revoke", _prefix(old), "--tenant", "acme")
    assert code == 0 and f"{_prefix(old)} (acme) revoked" in out
    assert_envelope(Client().get("/runs", headers={"Authorization": f"Bearer {old}"}), "credential_revoked", 401)
    assert _runs(new) == 200  # the replacement goes on
    code, out = _run("revoke", _prefix(old))
    assert code == 0 and "was already revoked" in out
    assert _run("list", "--tenant", "acme")[1].splitlines()[0].split("\t")[2].startswith("revoked ")
