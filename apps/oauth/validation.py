"""The rules a trusted issuer's configuration must meet, with a named message per field.

One function, used by the services (every write path: admin, command, code) and by the admin form
(so the operator sees the messages on the fields as they type them)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlsplit

from apps.oauth.models import ALLOWED_ALGORITHMS, METHOD_FAMILIES, IssuerLane, RevocationMode, SubjectKindChoice

# The fields an issuer is written with (services), and their defaults for an add.
ISSUER_FIELD_DEFAULTS: dict[str, Any] = {
    "lane": IssuerLane.OIDC.value,
    "audience": "",
    "tenant": None,
    "tenant_claim": "",
    "allowed_tenants": [],
    "subject_claim": "sub",
    "kind_claim": "",
    "default_kind": SubjectKindChoice.USER.value,
    "algorithms": ["RS256", "ES256"],
    "revocation": RevocationMode.EXP_AND_RECHECK.value,
    "revocation_window_seconds": 300,
    "introspection_client_id": "",
    "required_scopes": {},
    "enabled": True,
}
ISSUER_FIELDS = ("issuer", *ISSUER_FIELD_DEFAULTS)


def issuer_url_errors(issuer: Any) -> list[str]:
    if not isinstance(issuer, str) or not issuer:
        return ["The issuer is required: the exact `iss` of its tokens."]
    if len(issuer) > 500:
        return ["The issuer is at most 500 characters."]
    try:
        parts = urlsplit(issuer)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return ["The issuer is not a well-formed URL."]
    if parts.scheme != "https":
        return ["The issuer must be an https URL (RFC 8414 §2, OIDC Discovery §3)."]
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return ["The issuer must be an https URL with a host and no credentials."]
    if parts.query or parts.fragment or "?" in issuer or "#" in issuer:
        return ["The issuer must not have a query or fragment (RFC 8414 §2)."]
    if any(ch.isspace() for ch in issuer):
        return ["The issuer must not contain whitespace."]
    return []


def algorithms_errors(algorithms: Any) -> list[str]:
    if not isinstance(algorithms, list) or not algorithms or not all(isinstance(a, str) for a in algorithms):
        return ["Algorithms is a non-empty list of signature algorithm names."]
    errors: list[str] = []
    refused = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
    if refused:
        errors.append(
            f"Never accepted: {', '.join(refused)} ('none' is no signature; HS* would make the issuer's "
            "public key a shared secret)."
        )
    unknown = [a for a in algorithms if a not in ALLOWED_ALGORITHMS and a not in refused]
    if unknown:
        errors.append(f"Unsupported algorithms: {', '.join(unknown)}. Allowed: {', '.join(ALLOWED_ALGORITHMS)}.")
    return errors


def required_scopes_errors(required: Any) -> list[str]:
    if not isinstance(required, dict):
        return ["Required scopes is an object: method family -> list of scopes."]
    errors: list[str] = []
    for family, scopes in required.items():
        if family not in METHOD_FAMILIES:
            errors.append(f"Unknown method family {family!r}. Families: {', '.join(METHOD_FAMILIES)}.")
        elif not isinstance(scopes, list) or not all(
            isinstance(s, str) and s and not any(ch.isspace() for ch in s) for s in scopes
        ):
            errors.append(f"{family}: a list of scope names (no spaces).")
    return errors


def issuer_errors(fields: dict[str, Any], *, has_secret: bool) -> dict[str, list[str]]:
    """Every broken rule of `fields` (ISSUER_FIELDS; `tenant` a Tenant or None, `allowed_tenants` a
    list of Tenants), by field. `has_secret`: an introspection client secret is (or will be) stored."""
    errors: dict[str, list[str]] = defaultdict(list)
    errors["issuer"].extend(issuer_url_errors(fields.get("issuer")))
    if fields.get("lane") not in IssuerLane.values:
        errors["lane"].append("The lane is oidc or oauth2.")
    audience = fields.get("audience", "")
    if not isinstance(audience, str) or len(audience) > 500 or any(ch.isspace() for ch in audience):
        errors["audience"].append("The audience is a URI of at most 500 characters, or empty for the door's URL.")
    tenant, tenant_claim = fields.get("tenant"), fields.get("tenant_claim") or ""
    allowed = list(fields.get("allowed_tenants") or [])
    if (tenant is None) == (not tenant_claim):
        errors["tenant"].append(
            "Give exactly one tenant mapping: a fixed tenant, or a tenant claim naming one of the allowed tenants."
        )
    if tenant_claim and not allowed:
        errors["allowed_tenants"].append("A tenant claim needs the list of tenants it may name (allowed tenants).")
    if tenant is not None and allowed:
        errors["allowed_tenants"].append("Allowed tenants go with a tenant claim, not with a fixed tenant.")
    if not isinstance(fields.get("subject_claim"), str) or not fields.get("subject_claim"):
        errors["subject_claim"].append("The subject claim is required (usually `sub`).")
    if fields.get("default_kind") not in SubjectKindChoice.values:
        errors["default_kind"].append("The default kind is user or agent.")
    errors["algorithms"].extend(algorithms_errors(fields.get("algorithms")))
    revocation = fields.get("revocation")
    window = fields.get("revocation_window_seconds")
    if revocation not in RevocationMode.values:
        errors["revocation"].append("Revocation is exp-and-recheck or exp-only.")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        message = "The revocation window is at least 1 second."
        if revocation == RevocationMode.EXP_ONLY:
            message = "exp-only needs a window of at least 1 second: the longest token lifetime accepted."
        errors["revocation_window_seconds"].append(message)
    if revocation == RevocationMode.EXP_AND_RECHECK and bool(fields.get("introspection_client_id")) != has_secret:
        # Neither is fine when the issuer introspects without client authentication (metadata_errors).
        errors["introspection_client_id"].append(
            "exp-and-recheck re-checks tokens by RFC 7662 introspection: give the introspection client id "
            "and its secret together (or neither, when the issuer's metadata allows introspection without "
            "client authentication; or choose exp-only)."
        )
    errors["required_scopes"].extend(required_scopes_errors(fields.get("required_scopes", {})))
    return {field: messages for field, messages in errors.items() if messages}


def introspection_without_client(metadata: dict[str, Any]) -> bool:
    """Does the issuer introspect without client authentication? Its RFC 8414 metadata says so
    with `none` in `introspection_endpoint_auth_methods_supported`."""
    methods = metadata.get("introspection_endpoint_auth_methods_supported")
    return isinstance(methods, list) and "none" in methods


def metadata_errors(fields: dict[str, Any], metadata: dict[str, Any]) -> dict[str, list[str]]:
    """Rules that need the fetched metadata: exp-and-recheck needs an introspection endpoint, and
    client credentials for it unless the issuer introspects without (issuer_errors saw both or neither)."""
    if fields.get("revocation") == RevocationMode.EXP_AND_RECHECK:
        endpoint = metadata.get("introspection_endpoint")
        if not isinstance(endpoint, str) or not endpoint.startswith("https://"):
            return {
                "revocation": [
                    "The issuer's metadata has no https introspection_endpoint: exp-and-recheck "
                    "cannot re-check its tokens (choose exp-only)."
                ]
            }
        if not fields.get("introspection_client_id") and not introspection_without_client(metadata):
            return {"introspection_client_id": [
                "exp-and-recheck re-checks tokens by RFC 7662 introspection, and the issuer's metadata does "
                "not allow it without client authentication (no `none` in "
                "introspection_endpoint_auth_methods_supported): give the introspection client id and secret "
                "(or choose exp-only)."
            ]}  # fmt: skip
    return {}


def errors_message(errors: dict[str, list[str]]) -> str:
    return " ".join(f"{field}: {' '.join(messages)}" for field, messages in sorted(errors.items()))
