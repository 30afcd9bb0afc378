"""One application error type and the one place errors become responses.

Every error body has the same shape::

    {"error": {"code": "not_found", "message": "no user named 'bob'", "fields": {...}}}

``message`` names the problem in a sentence; ``fields`` (validation errors
only) maps each bad field to its messages.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

log = logging.getLogger(__name__)


class ApplicationError(Exception):
    """An expected failure of a use-case, carrying its HTTP status."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(ApplicationError):
    status_code, code = status.HTTP_404_NOT_FOUND, "not_found"


class Forbidden(ApplicationError):
    status_code, code = status.HTTP_403_FORBIDDEN, "forbidden"


class Blocked(Forbidden):
    """Refused because a block stands between the two users, either way."""

    code = "blocked"


class Conflict(ApplicationError):
    status_code, code = status.HTTP_409_CONFLICT, "conflict"


class ServiceUnavailable(ApplicationError):
    status_code, code = status.HTTP_503_SERVICE_UNAVAILABLE, "unavailable"


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested ValidationError detail as ``{"field.sub": [messages]}``."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = key if key != "non_field_errors" else ""
            out.update(_flatten(value, f"{prefix}.{name}" if prefix and name else prefix or name))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix: [str(item) for item in detail]}
        out = {}
        for i, item in enumerate(detail):
            out.update(_flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: [str(detail)]}


def _summary(fields: dict[str, list[str]]) -> str:
    parts = [f"{name}: {msgs[0]}" if name else msgs[0] for name, msgs in fields.items() if msgs]
    return "; ".join(parts) or "invalid request"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        fields = {exc.field: [exc.message]} if exc.field else None
        message = _summary(fields) if fields else exc.message
        return Response(error_body(exc.code, message, fields), status=exc.status_code)
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        return Response(
            error_body("invalid", _summary(fields), fields), status=status.HTTP_400_BAD_REQUEST
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or "permission denied")
    elif isinstance(exc, DatabaseError):
        log.exception("database error")
        return Response(
            error_body("database_unavailable", "the database is unavailable; try again shortly"),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    detail = exc.detail
    message = str(detail) if not isinstance(detail, dict | list) else _summary(_flatten(detail))
    code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
    response.data = error_body(str(code), message)
    return response


# --- Django-level handlers (URLs outside DRF views) -------------------------


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("server_error", "internal server error"), status=500)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    message = str(exception) if exception else "bad request"
    return JsonResponse(error_body("bad_request", message), status=400)
