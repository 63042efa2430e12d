"""`oauth_issuer add|list|remove`: trusted OAuth 2.1 / OIDC issuers from the command line, for
operators who keep configuration as code.

    oauth_issuer add --issuer <url> --tenant <slug> [--audience <aud>] [--lane oidc|oauth2]
        [--revocation exp-and-recheck|exp-only] [--window N]
        [--introspection-client-id X --introspection-client-secret-env VAR]
        [--require FAMILY=SCOPE[,SCOPE...] ...]
    oauth_issuer add --issuer <url> --tenant-claim <claim> --allowed-tenants a,b [--tenant c] [...]
    oauth_issuer list
    oauth_issuer remove --issuer <url>

The same services as the admin (apps/oauth/services.py): the same validation, the metadata and
keys fetched through the egress guard (an unreachable issuer is refused), the same audited
TrustedIssuerChange row (actor `cli:<os user>`, `as <text>` beside it with `--actor <text>`). The secret is read
from the environment variable named, never from the command line (where `ps` would show it).
`exp-and-recheck` (the default) needs no introspection client when the issuer's metadata allows
introspection without client authentication (`none` in
`introspection_endpoint_auth_methods_supported`); otherwise it is refused without one. A refusal
prints its message on stderr and exits with status 2, changing nothing. `list` prints a header line
naming its tab-separated columns, then a row per issuer; with none, one line saying so.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.command_args import ACTOR_HELP, actor_option
from apps.core.errors import NotFound, ValidationFailed
from apps.oauth.models import METHOD_FAMILIES, IssuerLane, RevocationMode, TrustedIssuer
from apps.oauth.services import issuer_add, issuer_remove, tenants_by_slug

REFUSED_STATUS = 2


def refusal(exc: ValidationFailed | NotFound) -> CommandError:
    fields = (exc.details or {}).get("fields") or {}
    lines = [f"{field}: {' '.join(messages)}" for field, messages in sorted(fields.items())]
    return CommandError("\n".join(lines) if lines else exc.message, returncode=REFUSED_STATUS)


def _slugs(value: str) -> list[str]:
    slugs = [slug.strip() for slug in value.split(",")]
    if not all(slugs):
        raise CommandError("--allowed-tenants is a comma-separated list of tenant slugs.", returncode=REFUSED_STATUS)
    return slugs


def _required_scopes(values: list[str]) -> dict[str, list[str]]:
    """`--require mcp:tools=mcp:tools,openid` (repeatable) -> {"mcp:tools": ["mcp:tools", "openid"]};
    the services validate the families and scope names."""
    required: dict[str, list[str]] = {}
    for value in values:
        family, equals, scopes = value.partition("=")
        if not equals or not family.strip():
            raise CommandError(f"--require {value!r}: give FAMILY=SCOPE[,SCOPE...].", returncode=REFUSED_STATUS)
        required.setdefault(family.strip(), []).extend(s.strip() for s in scopes.split(",") if s.strip())
    return required


# `list` prints a header naming its columns, then one tab-separated row per issuer (issue 53 item 6).
LIST_COLUMNS = ("issuer", "lane", "tenants", "revocation", "audience", "state")
LIST_EMPTY = "no trusted issuers (oauth_issuer add --issuer <https URL> --tenant <slug> ... adds one)"


class Command(BaseCommand):
    help = "Add, list or remove trusted OAuth 2.1 / OIDC token issuers (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="trust an issuer (fetches its metadata and keys)")
        add.add_argument("--issuer", required=True, help="the exact `iss` of its tokens (https URL)")
        add.add_argument("--tenant", help="the tenant every token of this issuer acts in")
        add.add_argument("--tenant-claim", help="or: the claim naming the tenant (needs --allowed-tenants)")
        add.add_argument("--allowed-tenants", help="with --tenant-claim: the tenants it may name, comma-separated")
        add.add_argument("--audience", default="", help="the `aud` tokens must carry (default: the door's URL)")
        add.add_argument("--lane", choices=IssuerLane.values, default=IssuerLane.OIDC.value)
        add.add_argument("--subject-claim", default="sub")
        add.add_argument("--kind-claim", default="")
        add.add_argument("--default-kind", choices=["user", "agent"], default="user")
        add.add_argument("--algorithms", help="accepted algorithms, comma-separated (default RS256,ES256)")
        add.add_argument("--revocation", choices=RevocationMode.values, default=RevocationMode.EXP_AND_RECHECK.value)
        add.add_argument("--window", type=int, default=300, help="revocationWindowSeconds (exp-only: <= 3600 advised)")
        add.add_argument("--introspection-client-id", default="")
        add.add_argument(
            "--introspection-client-secret-env", help="the environment variable holding the introspection secret"
        )
        add.add_argument(
            "--require", action="append", default=[], metavar="FAMILY=SCOPE[,SCOPE...]",
            help="scopes a token needs for a method family (repeatable): " + ", ".join(METHOD_FAMILIES),
        )  # fmt: skip
        add.add_argument("--actor", help=ACTOR_HELP)
        actions.add_parser("list", help="the trusted issuers")
        remove = actions.add_parser("remove", help="stop trusting an issuer")
        remove.add_argument("--issuer", required=True)
        remove.add_argument("--actor", help=ACTOR_HELP)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list()
            return
        actor = actor_option(options.get("actor"))
        try:
            if action == "add":
                self._add(options, actor)
            else:
                issuer_remove(issuer=options["issuer"], actor=actor)
                self.stdout.write(f"removed {options['issuer']}")
        except (ValidationFailed, NotFound) as exc:
            raise refusal(exc) from exc

    def _add(self, options: dict[str, Any], actor: str) -> None:
        fields: dict[str, Any] = {
            "issuer": options["issuer"],
            "lane": options["lane"],
            "audience": options["audience"],
            "tenant_claim": options["tenant_claim"] or "",
            "subject_claim": options["subject_claim"],
            "kind_claim": options["kind_claim"],
            "default_kind": options["default_kind"],
            "revocation": options["revocation"],
            "revocation_window_seconds": options["window"],
            "introspection_client_id": options["introspection_client_id"],
        }
        allowed = _slugs(options["allowed_tenants"]) if options["allowed_tenants"] else []
        if options["tenant"] and options["tenant_claim"]:
            # With a tenant claim, --tenant is one more tenant the claim may name (never a fixed one).
            allowed = [*allowed, *([options["tenant"]] if options["tenant"] not in allowed else [])]
        elif options["tenant"]:
            fields["tenant"] = tenants_by_slug([options["tenant"]])[0]
        if allowed:
            fields["allowed_tenants"] = tenants_by_slug(allowed)
        if options["algorithms"]:
            fields["algorithms"] = [a.strip() for a in options["algorithms"].split(",") if a.strip()]
        if options["require"]:
            fields["required_scopes"] = _required_scopes(options["require"])
        secret = ""
        variable = options["introspection_client_secret_env"]
        if variable:
            secret = os.environ.get(variable, "")
            if not secret:
                raise CommandError(
                    f"--introspection-client-secret-env: the environment variable {variable} is empty or unset.",
                    returncode=REFUSED_STATUS,
                )
        issuer = issuer_add(fields=fields, introspection_client_secret=secret, actor=actor)
        self.stdout.write(f"added {issuer.issuer} ({self._describe(issuer)})")

    def _describe(self, issuer: TrustedIssuer) -> str:
        if issuer.tenant_id is not None and issuer.tenant:
            mapping = f"tenant {issuer.tenant.slug}"
        else:
            allowed = ",".join(sorted(t.slug for t in issuer.allowed_tenants.all()))
            mapping = f"tenant claim {issuer.tenant_claim} in {allowed}"
        state = "" if issuer.enabled else "; disabled"
        return (
            f"{issuer.lane}; {mapping}; {issuer.revocation} {issuer.revocation_window_seconds}s; "
            f"audience {issuer.audience or '(door URL)'}{state}"
        )

    def _list(self) -> None:
        rows = list(TrustedIssuer.objects.select_related("tenant").prefetch_related("allowed_tenants"))
        if not rows:
            self.stdout.write(LIST_EMPTY)
            return
        self.stdout.write("\t".join(LIST_COLUMNS))
        for issuer in rows:
            self.stdout.write("\t".join(self._columns(issuer)))

    @staticmethod
    def _columns(issuer: TrustedIssuer) -> tuple[str, ...]:
        """The row of `list`, in LIST_COLUMNS order."""
        if issuer.tenant_id is not None and issuer.tenant:
            tenants = f"tenant {issuer.tenant.slug}"
        else:
            allowed = ",".join(sorted(t.slug for t in issuer.allowed_tenants.all()))
            tenants = f"claim {issuer.tenant_claim} in {allowed}"
        return (
            issuer.issuer,
            issuer.lane,
            tenants,
            f"{issuer.revocation} {issuer.revocation_window_seconds}s",
            issuer.audience or "(door URL)",
            "enabled" if issuer.enabled else "disabled",
        )
