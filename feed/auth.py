"""Bearer tokens: signed, self-contained, verifiable without the database.

A token is ``django.core.signing``'s timestamped signature of ``{"u": user_id}``
(HMAC-SHA256 with ``SECRET_KEY``). :func:`verify_token` checks signature and
age with no I/O, which is what the timeline read path needs (one Redis call,
no database). Write endpoints go further in :class:`BearerTokenAuthentication`:
they load the user, so a deactivated user or a token issued before
``User.tokens_valid_after`` (revocation) is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core import signing
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from feed.models import User

SALT = "starling.api-token.v1"


@dataclass(frozen=True)
class TokenClaims:
    user_id: int
    issued_at: datetime


class InvalidToken(Exception):
    pass


def issue_token(user: User) -> str:
    return signing.TimestampSigner(salt=SALT).sign_object({"u": user.pk})


def verify_token(token: str, *, max_age: int | None = None) -> TokenClaims:
    """Check a token's signature and age; raise :class:`InvalidToken` saying why."""
    signer = signing.TimestampSigner(salt=SALT)
    age = settings.STARLING_TOKEN_TTL if max_age is None else max_age
    try:
        payload = signer.unsign_object(token, max_age=age)
    except signing.SignatureExpired:
        raise InvalidToken("token has expired; request a new one") from None
    except (signing.BadSignature, ValueError, UnicodeDecodeError):
        raise InvalidToken("token is malformed or its signature is wrong") from None
    user_id = payload.get("u") if isinstance(payload, dict) else None
    if not isinstance(user_id, int):
        raise InvalidToken("token has no user")
    timestamp = signing.b62_decode(token.rsplit(signer.sep, 2)[-2])
    return TokenClaims(user_id=user_id, issued_at=datetime.fromtimestamp(timestamp, tz=UTC))


#: Verified tokens of the timeline read path: token -> (user id, issued at, expires at).
_verified: dict[str, tuple[int, float, float]] = {}
_VERIFIED_MAX = 50_000


def verify_token_cached(token: str) -> tuple[int, float]:
    """(user id, issued-at Unix time) of a valid token, remembering the tokens
    already checked: the hot read path then skips the HMAC (about 20 us here).
    Expiry is still checked on every call; revocation is the caller's business
    (the timeline script checks it in Redis).
    """
    now = time.time()
    hit = _verified.get(token)
    if hit is not None and now < hit[2]:
        return hit[0], hit[1]
    claims = verify_token(token)
    issued = claims.issued_at.timestamp()
    if len(_verified) >= _VERIFIED_MAX:
        _verified.clear()
    _verified[token] = (claims.user_id, issued, issued + settings.STARLING_TOKEN_TTL)
    return claims.user_id, issued


def bearer_token(header: bytes | str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token:
        raise InvalidToken("Authorization header has no token after 'Bearer'")
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[User, TokenClaims] | None:
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            token = bearer_token(header)
            if token is None:
                raise InvalidToken("Authorization header must be 'Bearer <token>'")
            claims = verify_token(token)
        except InvalidToken as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        user = User.objects.filter(pk=claims.user_id).first()
        if user is None or not user.is_active:
            raise exceptions.AuthenticationFailed("user is unknown or deactivated")
        if user.tokens_valid_after and claims.issued_at < user.tokens_valid_after.replace(
            microsecond=0
        ):
            raise exceptions.AuthenticationFailed("token has been revoked; request a new one")
        return user, claims

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="starling"'
