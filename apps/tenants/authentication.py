"""DRF authentication: `Authorization: Bearer <api key or access token>` -> (CallerUser, Subject)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

from apps.core.errors import Forbidden
from apps.tenants.selectors import subject_from_authorization
from apps.tenants.subject import Subject


@dataclass(frozen=True, slots=True)
class CallerUser:
    """What DRF sees as `request.user`; `request.auth` is the Subject itself."""

    subject: Subject
    is_authenticated: bool = True
    is_active: bool = True


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[CallerUser, Subject] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if header is None:
            return None  # IsAuthenticated then answers 401 unauthenticated
        subject = subject_from_authorization(header, door="rest")  # an access token's audience: the REST door
        if subject.scopes is not None:  # an access token (API keys carry no scopes: no lookup)
            _rest_scopes_granted(subject)
        return CallerUser(subject=subject), subject

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="openwop"'


def _rest_scopes_granted(subject: Subject) -> None:
    """The `rest` method family's scopes (identity.md §2.5): a token lacking one its
    issuer requires is 403 `forbidden` with the scope challenge naming every scope needed."""
    from apps.oauth.challenge import insufficient_scope_challenge, oauth_door_state, scopes_missing

    state = oauth_door_state()
    missing = scopes_missing(state, subject, "rest")
    if missing:
        refused = Forbidden(
            "The access token lacks a scope this API requires.", details={"requiredScopes": list(missing)}
        )
        refused.headers["WWW-Authenticate"] = insufficient_scope_challenge(
            metadata_url=state.host_metadata_url, scopes=missing
        )
        raise refused


def request_subject(request: Request) -> Subject:
    """The caller's Subject, as ApiKeyAuthentication left it in `request.auth`.

    DRF types `request.auth` as `Token | Any`; every API view reads the Subject through here so the
    type is checked once. IsAuthenticated has already refused a request without one, so the refusal
    below is only reached by a view that opted out of it and still asked for a caller: a 401 in the
    envelope (with WWW-Authenticate), never an AttributeError and a 500.
    """
    subject = request.auth
    if not isinstance(subject, Subject):
        raise NotAuthenticated()
    return subject
