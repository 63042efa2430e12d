"""DRF authentication: `Authorization: Bearer <key>` -> (CallerUser, Subject)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
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
        subject = subject_from_authorization(header)
        return CallerUser(subject=subject), subject

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="openwop"'
