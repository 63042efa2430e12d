"""`conformance_profile apply [--tenant-b <slug>] ...` / `conformance_profile clear`: put the host into
the OpenWOP conformance suite's shape and take it out again (apps/conformance/services.py).

`apply` prints the variables the suite reads as shell lines on stdout (`eval "$(manage.py
conformance_profile apply)"`), everything else on stderr. It mints a fresh key per tenant each
time (raw keys are shown once) and revokes the profile's previous ones. Refused, with the reason
and status 2, on a host whose conformance seams are off.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.conformance.services import (
    DEFAULT_TENANT,
    DEFAULT_TENANT_B,
    PINNED_SKILL,
    ProfileApplied,
    ProfileRefused,
    profile_apply,
    profile_clear,
)
from apps.core.command_args import REFUSED_STATUS

# The suite's fakes listen on loopback; pinned ports let the host know them before they start.
DEFAULT_MCP_FAKE_PORT = 3841
DEFAULT_A2A_FAKE_PORT = 3842
# A loopback port nothing listens on (discard): `conformance-down` must be an address nothing answers.
DEFAULT_DOWN_URL = "http://127.0.0.1:9/mcp"


def _fake_url(url_env: str, port_env: str, default_port: int) -> str:
    if os.environ.get(url_env):
        return os.environ[url_env]
    return f"http://127.0.0.1:{os.environ.get(port_env) or default_port}"


def _loopback_port(url: str) -> int | None:
    parts = urlsplit(url)
    return parts.port if parts.hostname in ("127.0.0.1", "localhost", "::1") else None


def suite_variables(applied: ProfileApplied, *, mcp_url: str, a2a_url: str) -> dict[str, str]:
    """What the suite reads (its lib/env.ts, setup.ts and the cross-tenant legs), in order."""
    variables = {
        "OPENWOP_BASE_URL": settings.OPENWOP_PUBLIC_URL,
        "OPENWOP_API_KEY": applied.api_key,
        "OPENWOP_TARGET_MAJOR": "2",
        "OPENWOP_TEST_TENANT_B_API_KEY": applied.api_key_b,
        "OPENWOP_TEST_TENANT_B_AGENT_ID": applied.agent_b_id,
        "OPENWOP_MCP_FAKE_SERVER": "true",
        "OPENWOP_A2A_FAKE_PEER": "true",
        "OPENWOP_A2A_FAKE_PEER_VERSIONS": "1.0,0.3",  # serve the 1.0 card first (our client is 1.0)
    }
    for prefix, url in (("OPENWOP_MCP_FAKE_SERVER", mcp_url), ("OPENWOP_A2A_FAKE_PEER", a2a_url)):
        port = _loopback_port(url)
        if port is not None:
            variables[f"{prefix}_PORT"] = str(port)  # the suite starts its fake there, on loopback
        else:
            variables[f"{prefix}_URL"] = url  # a public front: pin its _PORT to where it forwards
    if settings.OPENWOP_EGRESS_ALLOW_CIDRS:
        # security-defaults.md §Relaxations: a loopback run relaxes the egress guard; say so.
        cidrs = ", ".join(settings.OPENWOP_EGRESS_ALLOW_CIDRS)
        variables["OPENWOP_WEBHOOK_ALLOW_PRIVATE"] = "true"
        variables["OPENWOP_HOST_RELAXATIONS"] = json.dumps(
            [
                {
                    "obligation": "webhooks.egress-guard",
                    "durability": "session",
                    "reason": f"loopback conformance run: OPENWOP_EGRESS_ALLOW_CIDRS={cidrs} lets push, webhooks "
                    "and A2A/MCP interop reach the suite's loopback receiver and fakes",
                }
            ],
            separators=(",", ":"),
        )
    return variables


class Command(BaseCommand):
    help = "Apply or clear the OpenWOP conformance suite's profile on this host (audited, idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["apply", "clear"])
        parser.add_argument("--tenant", default=DEFAULT_TENANT, help=f"the suite's tenant (default {DEFAULT_TENANT})")
        parser.add_argument(
            "--tenant-b", default=DEFAULT_TENANT_B, help=f"the second tenant (default {DEFAULT_TENANT_B})"
        )
        parser.add_argument(
            "--mcp-server-url",
            help="serverId `conformance`: the suite's fake MCP server (default OPENWOP_MCP_FAKE_SERVER_URL, "
            f"else http://127.0.0.1:$OPENWOP_MCP_FAKE_SERVER_PORT, port {DEFAULT_MCP_FAKE_PORT} by default)",
        )
        parser.add_argument(
            "--mcp-down-url", default=DEFAULT_DOWN_URL, help="serverId `conformance-down`: an address nothing answers"
        )
        parser.add_argument(
            "--a2a-peer-url",
            help="A2A peer `conformance` (the purpose relay's onward peer): the suite's fake A2A peer "
            f"(default OPENWOP_A2A_FAKE_PEER_URL, else loopback port {DEFAULT_A2A_FAKE_PORT})",
        )
        parser.add_argument("--actor", help="who, for the audit row (default cli:<login>)")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = options["actor"] or f"cli:{getpass.getuser()}"
        if options["action"] == "clear":
            change = profile_clear(actor=actor)
            if change is None:
                self.stderr.write("The conformance profile is not applied: nothing to clear.")
            else:
                restored = change.pinned_before or "every enabled route"
                self.stderr.write(
                    f"Conformance profile cleared: the interface routes {restored} again; "
                    "the profile's keys are revoked and its agents unpublished."
                )
            return
        mcp_url = options["mcp_server_url"] or _fake_url(
            "OPENWOP_MCP_FAKE_SERVER_URL", "OPENWOP_MCP_FAKE_SERVER_PORT", DEFAULT_MCP_FAKE_PORT
        )
        a2a_url = options["a2a_peer_url"] or _fake_url(
            "OPENWOP_A2A_FAKE_PEER_URL", "OPENWOP_A2A_FAKE_PEER_PORT", DEFAULT_A2A_FAKE_PORT
        )
        try:
            applied = profile_apply(
                actor=actor,
                tenant=options["tenant"],
                tenant_b=options["tenant_b"],
                mcp_server_url=mcp_url,
                mcp_down_url=options["mcp_down_url"],
                a2a_peer_url=a2a_url,
            )
        except ProfileRefused as exc:
            raise CommandError(str(exc), returncode=REFUSED_STATUS) from exc
        self.stderr.write(
            f"Conformance profile applied: the interface routes only {PINNED_SKILL}; tenants "
            f"{applied.tenant} and {applied.tenant_b} have fresh keys (the previous profile keys are revoked)."
        )
        for name, value in suite_variables(applied, mcp_url=mcp_url, a2a_url=a2a_url).items():
            self.stdout.write(f"export {name}={shlex.quote(value)}")
