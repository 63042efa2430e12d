"""Every CSV the host serves goes through one writer that neutralises formula cells (CWE-1236,
OWASP: a cell beginning with =, +, -, @, tab or CR gets a leading quote), and every download's
name is made of safe characters only, with an RFC 6266 `filename*` and an ASCII fallback (issue 33
items 3 and 8). The hostile version arrives as a caller sends it: a header on the live host."""

from __future__ import annotations

import csv
import io
import re
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from apps.audit.models import HostEvent
from apps.core.downloads import attachment_disposition, csv_cell
from apps.facets.negotiation import NEGOTIATION_EVENT
from tests.live import wait_until

FORMULA = '=HYPERLINK("http://x","y")'
AUDIT = "/host/openwop-host/audit/negotiations"
DEPRECATION = "/host/openwop-host/deprecation/"
DRILL = "/host/openwop-host/deprecation/version/"


@pytest.fixture
def auditor() -> Client:
    client = Client()
    user = User.objects.create_user("aud-csv", password="x", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    client.force_login(user)
    return client


def _rows(response: Any) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def _records(tenant: str) -> list[HostEvent]:
    return list(HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT, subject__tenant=tenant))


def _hostile_requests(live_url: str, key: str) -> None:
    """An A2A call and an MCP call naming a formula as their version: both refused, both recorded."""
    a2a = httpx.post(
        f"{live_url}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": FORMULA},
        timeout=30,
    )
    assert "error" in a2a.json()
    version = f"+{FORMULA[1:]}"
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    mcp = httpx.post(
        f"{live_url}/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
        headers={"Authorization": f"Bearer {key}", "MCP-Protocol-Version": version, "Mcp-Method": "tools/list"},
        timeout=30,
    )
    assert mcp.status_code < 500
    wait_until(lambda: len(_records("csvco")) >= 2, "both refusals recorded")


def test_formula_versions_come_out_as_text_in_every_export(live_url: str, make_key, auditor: Client) -> None:  # type: ignore[no-untyped-def]
    _hostile_requests(live_url, make_key("csvco"))
    assert {r.payload["requested"] for r in _records("csvco")} == {FORMULA, f"+{FORMULA[1:]}"}  # kept as named

    exported = _rows(auditor.get(AUDIT, {"format": "csv", "tenant": "csvco"}))
    column = exported[0].index("requested")
    assert sorted(r[column] for r in exported[1:]) == sorted([f"'{FORMULA}", f"'+{FORMULA[1:]}"])

    overview = _rows(auditor.get(DEPRECATION, {"format": "csv"}))
    assert f"'{FORMULA}" in [r[1] for r in overview[1:]] and FORMULA not in [r[1] for r in overview[1:]]

    drill = auditor.get(DRILL, {"protocol": "a2a", "requested": FORMULA, "format": "csv", "table": "tenants"})
    assert [r[0] for r in _rows(drill)[1:]] == ["csvco"]
    name = _filename(drill["Content-Disposition"])
    assert name.startswith("deprecation-a2a-_HYPERLINK_http_x_y_-tenants-") and name.endswith(".csv")

    # Another tenant's export holds none of it.
    make_key("other-co")
    assert _rows(auditor.get(AUDIT, {"format": "csv", "tenant": "other-co"}))[1:] == []


def _filename(header: str) -> str:
    """The name a browser saves under: `filename*` (RFC 6266 §4.3 prefers it), percent-decoded."""
    match = re.search(r"filename\*=UTF-8''([^;\s]+)", header)
    assert match, header
    return unquote(match.group(1), errors="strict")


@pytest.mark.django_db
def test_a_caller_version_cannot_break_out_of_the_download_name(auditor: Client) -> None:
    for requested in ('0.3"><svg onload=alert(1)>', "0.3\r\nSet-Cookie: x=y", "1.0;filename=evil.exe"):
        for table in ("tenants", "peers"):
            response = auditor.get(DRILL, {"protocol": "a2a", "requested": requested, "format": "csv", "table": table})
            assert response.status_code == 200, requested
            header = response["Content-Disposition"]
            fallback = header.split('filename="', 1)[1].split('"', 1)[0]
            assert set(fallback) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
            assert header.count('"') == 2 and header.count(";") == 2 and "\r" not in header and "\n" not in header
            assert _filename(header).startswith(f"deprecation-a2a-{fallback.split('-')[2]}")
    header = auditor.get(DRILL, {"protocol": "a2a", "requested": '0.3"><svg onload=alert(1)>', "format": "csv"})[
        "Content-Disposition"
    ]
    assert header.startswith('attachment; filename="deprecation-a2a-0.3_svg_onload_alert_1_-tenants-')


def test_the_disposition_keeps_letters_of_any_script_in_filename_star() -> None:
    header = attachment_disposition('rapport "été" 漢字.csv')
    assert header == (
        "attachment; filename=\"rapport_ete_.csv\"; filename*=UTF-8''rapport_%C3%A9t%C3%A9_%E6%BC%A2%E5%AD%97.csv"
    )
    assert _filename(header) == "rapport_été_漢字.csv"
    assert attachment_disposition("../../etc/passwd") == (
        "attachment; filename=\"_.._etc_passwd\"; filename*=UTF-8''_.._etc_passwd"
    )


@pytest.mark.parametrize("cell", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", FORMULA])
def test_formula_starts_get_a_quote(cell: str) -> None:
    assert csv_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["1.0", "2026-07-28", "", "a=b", " =1", 3, None])
def test_other_cells_are_unchanged(cell: object) -> None:
    assert csv_cell(cell) == cell
