"""Facet validation, shared by the service, the admin form (FacetAdmin.instance_check) and the API alike.

interop.md §The facets and §Legacy profiles are absent: preferred and floor are members of the
offered list, floor <= preferred, profile ids match `a2a-<major.minor>` / `mcp-<date>` and never
end in `-legacy`, refresh window at most 90 days. And only what the protocol's door can serve may be
offered (apps/facets/servable.py): an offered version the mount would refuse is a false claim.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.conf import settings
from django.urls import Resolver404, resolve

from apps.core.door_request import door_route_match
from apps.core.protocol_versions import GRAMMAR, NOUN, Protocol, is_valid_version, profile_version, version_key
from apps.facets.servable import is_servable, servable_versions

MCP_TRANSPORTS = ("streamable-http", "stdio")
# The routes that serve the agent card: the default path, the /a2a catch-all (a moved path under
# /a2a/) and the root catch-all included last (apps/a2a/card_path_urls.py). Any other route that
# resolves a path would answer it instead of the card.
CARD_SERVING_ROUTES = frozenset({"a2a-agent-card", "a2a-unknown", "a2a-agent-card-facet-path"})


def card_path_taken(path: str) -> str | None:
    """Why the card cannot be served at `path`, or None when it can: the path is resolved against
    the doors' routes and Django's URLconf, and anything another route (or the static files) answers
    first is refused, named."""
    static_prefix = "/" + (settings.STATIC_URL or "static/").lstrip("/")
    if path.startswith(static_prefix):
        return f"The agent card path {path} is under the static files ({static_prefix}): choose another path."
    match = door_route_match(path)  # the doors answer their routes before Django's URLconf
    if match is None:
        try:
            match = resolve(path)
        except Resolver404:
            return f"No route on this host can serve the agent card at {path}: choose another path."
    if match.url_name in CARD_SERVING_ROUTES:
        return None
    route = match.view_name or match._func_path
    return (
        f"The agent card path {path} is already served by another route ({route}): "
        "choose a path no other route answers."
    )


def facet_errors(protocol: Protocol, data: dict[str, Any]) -> dict[str, list[str]]:
    """Every problem with a facet's fields, keyed by model field name. Empty when valid."""
    errors: dict[str, list[str]] = defaultdict(list)
    noun, grammar = NOUN[protocol], GRAMMAR[protocol]

    versions = data.get("versions")
    if not isinstance(versions, list) or not versions:
        errors["versions"].append(f"Offer at least one {noun}.")
        versions = []
    for value in versions:
        if not is_valid_version(protocol, value):
            errors["versions"].append(f"{value!r} is not a valid {protocol.upper()} {noun}: use {grammar}.")
    for value in versions:
        if is_valid_version(protocol, value) and not is_servable(protocol, value):
            servable = ", ".join(sorted(servable_versions(protocol))) or "none"
            errors["versions"].append(
                f"{protocol} {noun} {value} cannot be offered: this host's {protocol} door does not serve it "
                f"(servable: {servable})."
            )
    if len(set(map(str, versions))) != len(versions):
        errors["versions"].append(f"Each {noun} is offered once.")
    offered = {v for v in versions if is_valid_version(protocol, v)}

    preferred, floor = data.get("preferred_version"), data.get("minimum_version")
    for field, value, label in (("preferred_version", preferred, "preferred"), ("minimum_version", floor, "floor")):
        if not is_valid_version(protocol, value):
            errors[field].append(f"The {label} {noun} {value!r} is not valid: use {grammar}.")
        elif value not in offered:
            errors[field].append(f"The {label} {noun} {value} must be one of the offered {noun}s.")
    both_valid = is_valid_version(protocol, preferred) and is_valid_version(protocol, floor)
    if both_valid and version_key(protocol, floor) > version_key(protocol, preferred):  # type: ignore[arg-type]
        errors["minimum_version"].append(f"The floor {floor} is above the preferred {noun} {preferred}.")

    profiles = data.get("profiles") or []
    if not isinstance(profiles, list):
        errors["profiles"].append("Profiles are a list of ids.")
        profiles = []
    for profile in profiles:
        if isinstance(profile, str) and profile.endswith("-legacy"):
            errors["profiles"].append(
                f"{profile!r}: legacy profiles do not exist; a legacy version is spoken privately, never advertised."
            )
            continue
        version = profile_version(protocol, profile) if isinstance(profile, str) else None
        if version is None:
            errors["profiles"].append(f"{profile!r} is not an {protocol.upper()} profile id ({protocol}-<{noun}>).")
        elif version not in offered:
            errors["profiles"].append(f"{profile!r} names {version}, which is not an offered {noun}.")

    window = data.get("refresh_window_days")
    if not isinstance(window, int) or not 1 <= window <= 90:
        errors["refresh_window_days"].append("The refresh window is 1 to 90 days.")

    if protocol == "a2a":
        path = data.get("agent_card_path") or ""
        if (
            not isinstance(path, str)
            or not path.startswith("/")
            or "//" in path
            or any(c.isspace() or c in "?#" for c in path)
        ):
            errors["agent_card_path"].append(
                "The agent card path is an absolute path on this host, e.g. /.well-known/agent-card.json."
            )
        elif (taken := card_path_taken(path)) is not None:
            errors["agent_card_path"].append(taken)
    else:
        for value in data.get("transports") or []:
            if value not in MCP_TRANSPORTS:
                errors["transports"].append(f"{value!r} is not an MCP server transport ({', '.join(MCP_TRANSPORTS)}).")
        for path in data.get("server_paths") or []:
            if not isinstance(path, str) or not path.startswith("/"):
                errors["server_paths"].append(f"{path!r}: mount paths are absolute paths on this host.")
        for feature in data.get("features") or []:
            if not isinstance(feature, str) or not feature or not feature.replace("-", "").isalnum():
                errors["features"].append(f"{feature!r} is not a feature id.")
        rounds = data.get("mrtr_max_rounds")
        if not isinstance(rounds, int) or not 1 <= rounds <= 16:
            errors["mrtr_max_rounds"].append("mrtr.maxRounds is 1 to 16.")
    return dict(errors)
