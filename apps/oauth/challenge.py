"""What the protocol doors say about the OAuth 2.1 / OIDC lanes (identity.md §2.5).

Two questions every door asks on its hot path, answered from one per-process snapshot of the
enabled trusted issuers (apps/oauth):

- Is any issuer enabled? Then a 401 carries `WWW-Authenticate: Bearer resource_metadata="..."`
  pointing at the RFC 9728 document, `error="invalid_token"` when a credential was presented, and
  `scope="..."` naming what the door requires (the MCP authorization spec's scope
  selection asks for exactly these; the RFC 9728 document lists the same as `scopes_supported`).
- Does the caller's access token hold the scopes its issuer requires for this method family
  (`required_scopes`: "mcp:tools", ..., "a2a", "rest")? If not, a 403 with the scope challenge
  (`error="insufficient_scope", scope="..."`). API keys carry no scopes (`Subject.scopes` None):
  they are never refused here.

The snapshot is cached under TOPIC_CARD: the trusted-issuer table's trigger (apps/oauth migration
0002) and the facets table's (the MCP mount path is in the facet) both notify it, so every
process drops it on any change. The public URL is process-local and part of the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponseBase

from apps.core.errors import OpenWopError
from apps.core.invalidation import TOPIC_CARD, acached, cached
from apps.core.responses import envelope_response
from apps.tenants.subject import Subject

# The method families the MCP mount's operations fall in (apps/oauth/models.py METHOD_FAMILIES).
MCP_FAMILIES = ("mcp:tools", "mcp:resources", "mcp:prompts", "mcp:tasks", "mcp:other")


@dataclass(frozen=True, slots=True)
class OAuthDoorState:
    """The enabled issuers as the doors need them (immutable: shared by every request)."""

    issuers: tuple[str, ...] = ()
    # issuer -> method family -> the scopes a token of that issuer needs for it
    required: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    # method family -> every scope any enabled issuer requires for it, sorted
    family_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # RFC 9728 §3.1 metadata URLs: the MCP mount's, and the host's own (A2A and REST)
    mcp_metadata_url: str = ""
    host_metadata_url: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.issuers)

    def scopes_of(self, *families: str) -> tuple[str, ...]:
        """Every scope the families require (of any enabled issuer), sorted: a resource's RFC 9728
        `scopes_supported`, and the `scope` of a door's 401 challenge."""
        return tuple(sorted({scope for family in families for scope in self.family_scopes.get(family, ())}))

    @property
    def mcp_scopes(self) -> tuple[str, ...]:
        """What the MCP mount (one resource, every mcp:* family) requires."""
        return self.scopes_of(*MCP_FAMILIES)

    @property
    def host_scopes(self) -> tuple[str, ...]:
        """What the host's own resource (the A2A and REST doors) requires."""
        return self.scopes_of("a2a", "rest")


def _state_load() -> OAuthDoorState:
    from apps.oauth.selectors import protected_resource_metadata_url, trusted_issuers

    issuers = trusted_issuers()
    required: dict[str, dict[str, tuple[str, ...]]] = {}
    by_family: dict[str, set[str]] = {}
    for issuer in issuers:
        families = issuer.required_scopes if isinstance(issuer.required_scopes, dict) else {}
        own = {
            str(family): tuple(s for s in scopes if isinstance(s, str) and s)
            for family, scopes in families.items()
            if isinstance(scopes, list)
        }
        required[issuer.issuer] = {family: scopes for family, scopes in own.items() if scopes}
        for family, scopes in own.items():
            by_family.setdefault(family, set()).update(scopes)
    return OAuthDoorState(
        issuers=tuple(issuer.issuer for issuer in issuers),
        required=required,
        family_scopes={family: tuple(sorted(scopes)) for family, scopes in by_family.items() if scopes},
        mcp_metadata_url=protected_resource_metadata_url("mcp"),
        host_metadata_url=protected_resource_metadata_url("a2a"),
    )


def _key() -> tuple[str, str]:
    return ("oauth-doors", str(settings.OPENWOP_PUBLIC_URL))


def oauth_door_state() -> OAuthDoorState:
    """The snapshot, from this process's cache (bypassed inside a transaction: a test's)."""
    return cached(TOPIC_CARD, _key(), _state_load)


async def aoauth_door_state() -> OAuthDoorState:
    """`oauth_door_state` from the event loop: a hit awaits nothing."""
    return await acached(TOPIC_CARD, _key(), sync_to_async(_state_load))


def scopes_missing(state: OAuthDoorState, subject: Subject, family: str) -> tuple[str, ...]:
    """Every scope the method family requires of this caller's token when it lacks any of them
    (the scope challenge lists them all: identity.md §2.5), else (). API keys: always ()."""
    if subject.scopes is None or not state.required:
        return ()
    needed = state.required.get(subject.issuer, {}).get(family, ())
    if not needed or set(needed) <= subject.scopes:
        return ()
    return needed


def _quoted(value: str) -> str:
    """An RFC 9110 quoted-string (the values here are URLs and scope tokens: no quotes expected)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bearer_challenge(*, metadata_url: str, presented: bool, scopes: tuple[str, ...] = ()) -> str:
    """The 401 challenge on a host with an OAuth lane: the RFC 9728 metadata, `error="invalid_token"`
    only when a credential was presented (identity.md §2.5), and the scopes the door requires
    (RFC 6750 §3; MCP authorization, scope selection: a client asks for these first)."""
    parts = ['realm="openwop"']
    if presented:
        parts.append('error="invalid_token"')
    if scopes:
        parts.append(f"scope={_quoted(' '.join(scopes))}")
    parts.append(f"resource_metadata={_quoted(metadata_url)}")
    return "Bearer " + ", ".join(parts)


def insufficient_scope_challenge(*, metadata_url: str, scopes: tuple[str, ...]) -> str:
    """The 403 scope challenge (RFC 6750 §3.1; MCP authorization, scope challenge)."""
    return (
        f'Bearer realm="openwop", error="insufficient_scope", scope={_quoted(" ".join(scopes))}, '
        f"resource_metadata={_quoted(metadata_url)}"
    )


def oauth_401_challenge(response: HttpResponseBase, *, presented: bool) -> None:
    """A 401 of the REST door on a host with an OAuth lane: the challenge names the host's RFC 9728
    metadata (identity.md §2.5). Sync (a cache miss reads the issuers): call it off the event loop."""
    state = oauth_door_state()
    if state.enabled:
        response["WWW-Authenticate"] = bearer_challenge(
            metadata_url=state.host_metadata_url, presented=presented, scopes=state.scopes_of("rest")
        )


def envelope_challenged(error: OpenWopError, *, presented: bool) -> HttpResponseBase:
    """`envelope_response` with the 401 challenge when it is one (sync: see oauth_401_challenge)."""
    response = envelope_response(error)
    if error.status == 401:
        oauth_401_challenge(response, presented=presented)
    return response
