"""DRF authentication: `Authorization: Bearer <api key or access token>` -> (CallerUser, Subject)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

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
        return CallerUser(subject=subject), subject

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="openwop"'


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
