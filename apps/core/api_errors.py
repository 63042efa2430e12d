"""The one DRF exception handler: every REST error becomes `{error, message, details?}`."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DataError
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response

from apps.core.challenges import challenge_401
from apps.core.errors import (
    Forbidden,
    InternalError,
    NotFound,
    OpenWopError,
    Overloaded,
    Unauthenticated,
    ValidationFailed,
)
from apps.core.overload import OVERLOAD_RETRY_AFTER_SECONDS, is_overload

logger = logging.getLogger(__name__)


def _translate(exc: Exception) -> OpenWopError:
    if isinstance(exc, OpenWopError):
        return exc
    if isinstance(exc, drf.ValidationError | drf.ParseError):
        detail = exc.detail
        details: dict[str, Any] = {"fields": detail} if isinstance(detail, dict) else {"errors": detail}
        message = "The request body is not valid JSON." if isinstance(exc, drf.ParseError) else None
        return ValidationFailed(message, details=details)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return Unauthenticated()
    if isinstance(exc, drf.PermissionDenied | PermissionDenied):
        return Forbidden()
    if isinstance(exc, drf.NotFound | Http404):
        return NotFound()
    if isinstance(exc, drf.MethodNotAllowed):
        return ValidationFailed(str(exc.detail), status=405)
    if isinstance(exc, drf.UnsupportedMediaType):
        err = OpenWopError(str(exc.detail))
        err.code = "unsupported_media_type"
        return err
    if isinstance(exc, drf.NotAcceptable):
        return ValidationFailed(str(exc.detail), status=406)
    if isinstance(exc, drf.Throttled):
        err = OpenWopError("Too many requests.")
        err.code = "rate_limited"
        # DRF sets `wait` in Throttled.__init__; djangorestframework-stubs does not declare it.
        wait: float | None = exc.wait  # type: ignore[attr-defined]
        if wait is not None:
            err.headers["Retry-After"] = str(int(wait) + 1)
        return err
    if is_overload(exc):  # saturated, not broken: 503 + Retry-After (apps/core/overload.py)
        return Overloaded(retry_after=OVERLOAD_RETRY_AFTER_SECONDS)
    if isinstance(exc, DataError):
        return data_error_refusal(exc)
    logger.exception("Unhandled error in a REST view")
    return InternalError()


def envelope_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    error = _translate(exc)
    response = Response(error.envelope(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    if error.status == 401:  # identity.md §2.5: the OAuth challenge, when the host has a lane
        request = context.get("request")
        challenge_401(response, presented=request is not None and bool(request.META.get("HTTP_AUTHORIZATION")))
    return response


# What the database refused as a value (a NUL, a string past its column, a number out of range)
# that no parse step caught first (apps/core/caller_input.py): the caller's input, so a 400.
DATA_ERROR_MESSAGE = "The request holds a value the host cannot store."


def data_error_refusal(exc: DataError) -> ValidationFailed:
    """Every door's mapping of a DataError: a refusal of the request, never an internal error.
    Logged without the database's message, which may quote the caller's value."""
    logger.warning("a request value was refused by the database (%s)", type(exc.__cause__ or exc).__name__)
    return ValidationFailed(DATA_ERROR_MESSAGE)
