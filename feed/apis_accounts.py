"""The account endpoints: registration, sign-in, token revocation, password
change, and the moderators' suspension of an account. One view per
operation, each calling its use-case (:mod:`feed.services`); the shared
serializers and helpers are :mod:`feed.apis`'."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, password_validation
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from feed import moderation, services
from feed.apis import (
    SeqOut,
    StrictCharField,
    View,
    current_user,
    error_responses,
    name_nested_serializers,
)
from feed.auth import issue_token
from feed.errors import ApplicationError
from feed.models import User
from feed.ratelimit import LoginIPThrottle, LoginUserThrottle


def _password_min_length() -> int:
    """The minimum length Django's password validators enforce (0 if none does)."""
    lengths = [
        getattr(v, "min_length", 0)
        for v in password_validation.get_default_password_validators()
        if isinstance(v, password_validation.MinimumLengthValidator)
    ]
    return max(lengths, default=0)


class RegisterApi(View):
    permission_classes = [AllowAny]
    throttle_classes = [LoginIPThrottle]
    authentication_classes: list[type] = []

    class InputSerializer(serializers.Serializer):
        username = StrictCharField(max_length=150)
        #: The rules the schema can state (length, not all digits) are stated: a
        #: client can follow them; Django's other validators (common passwords,
        #: likeness to the username) still refuse some passwords with a 400.
        password = StrictCharField(
            min_length=_password_min_length(),
            max_length=128,
            trim_whitespace=False,
            validators=[RegexValidator(r"\D", message="the password cannot be entirely numeric")],
        )

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        username = serializers.CharField()
        token = serializers.CharField()

    @extend_schema(
        request=InputSerializer, responses={201: OutputSerializer, **error_responses(400, 409)}
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = services.user_register(**data.validated_data)
        return Response(
            {"id": user.pk, "username": user.username, "token": issue_token(user)},
            status=status.HTTP_201_CREATED,
        )


class InvalidCredentials(ApplicationError):
    status_code = status.HTTP_401_UNAUTHORIZED
    code = "invalid_credentials"


class TokenApi(View):
    permission_classes = [AllowAny]
    throttle_classes = [LoginIPThrottle, LoginUserThrottle]
    authentication_classes: list[type] = []

    class InputSerializer(serializers.Serializer):
        username = StrictCharField(max_length=150)
        password = StrictCharField(max_length=128, trim_whitespace=False)

    class OutputSerializer(serializers.Serializer):
        token = serializers.CharField()

    @extend_schema(
        request=InputSerializer, responses={200: OutputSerializer, **error_responses(400, 401)}
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(request, **data.validated_data)
        if user is None:
            raise InvalidCredentials("wrong username or password")
        services.user_seen(user_id=user.pk)  # a sign-in: the user is active
        return Response({"token": issue_token(user)})


class RevokeApi(View):
    """``POST /api/v1/auth/revoke``: every token of the caller stops working,
    this one included (also on the timeline read path, through Redis)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={204: None, **error_responses(401)})
    def post(self, request: Request) -> Response:
        user = request.user
        assert isinstance(user, User)
        services.tokens_revoke(user=user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PasswordChangeApi(View):
    """``POST /api/v1/auth/password``: a new password for the caller. Every
    token issued before stops working (this one too, reads included): sign
    in again for a new one."""

    permission_classes = [IsAuthenticated]

    class InputSerializer(serializers.Serializer):
        old_password = StrictCharField(max_length=128, trim_whitespace=False)
        new_password = StrictCharField(max_length=128, trim_whitespace=False)

    @extend_schema(request=InputSerializer, responses={204: None, **error_responses(400, 401)})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.password_change(user=current_user(request), **data.validated_data)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CanSuspend(IsAuthenticated):
    """The admin's check: the ``suspend_user`` permission (not ``is_staff``)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return super().has_permission(request, view) and request.user.has_perm("feed.suspend_user")


class SuspensionApi(View):
    """``/api/v1/users/{u}/suspension``: moderators (the ``suspend_user``
    permission, as in the admin) suspend a user (POST) or reinstate them
    (DELETE); both are recorded with who, when and why."""

    permission_classes = [CanSuspend]

    class InputSerializer(serializers.Serializer):
        reason = StrictCharField(max_length=1000, allow_blank=True, required=False, default="")

    @extend_schema(
        request=InputSerializer,
        responses={200: SeqOut, 201: SeqOut, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request, username: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        written = moderation.user_suspend(
            user=services.user_by_username(username, suspended=True),
            moderator=current_user(request),
            reason=data.validated_data["reason"],
        )
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(request=None, responses={200: SeqOut, **error_responses(401, 403, 404)})
    def delete(self, request: Request, username: str) -> Response:
        written = moderation.user_reinstate(
            user=services.user_by_username(username, suspended=True),
            moderator=current_user(request),
        )
        return Response({"seq": written.seq})


name_nested_serializers(globals())
