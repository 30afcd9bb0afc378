"""The REST API: one class per resource operation, no business logic.

Each view validates its input with a nested serializer, calls a use-case
from :mod:`feed.services` or a query from :mod:`feed.selectors`, and shapes
the output. Errors are raised, never built here: :mod:`feed.errors` turns
them into JSON responses.
"""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from fanout.model import events, ids
from feed import selectors, services
from feed.auth import InvalidToken, bearer_token
from feed.errors import NotFound
from feed.health import cached_check_all, public
from feed.models import Tweet, User
from feed.schema import BearerTokenScheme  # noqa: F401  (registers the auth scheme)
from feed.validation import InvalidInput, whole_number

# --- shared shapes ------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, booleans and lists instead of str()-ing them."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class ErrorSerializer(serializers.Serializer):
    error = inline_serializer(
        "ErrorDetail",
        {
            "code": serializers.CharField(),
            "message": serializers.CharField(),
            "fields": serializers.DictField(
                child=serializers.ListField(child=serializers.CharField()), required=False
            ),
        },
    )


class TweetOut(serializers.Serializer):
    id = serializers.IntegerField()
    author = serializers.CharField()
    text = serializers.CharField()
    created_at = serializers.CharField()


class SeqOut(serializers.Serializer):
    seq = serializers.IntegerField(help_text="Outbox sequence number of this write.")


class UserRef(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


def tweet_out(tweet: Tweet) -> dict[str, Any]:
    return events.tweet_fields(tweet.id, tweet.author.username, tweet.text)


class View(APIView):
    """An API view that answers an unsupported method with 405 before it
    authenticates (DRF authenticates first, so a bad token got 401)."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            self.http_method_not_allowed(request, *args, **kwargs)
        super().initial(request, *args, **kwargs)


def error_responses(*codes: int) -> dict[int, type[serializers.Serializer]]:
    return {code: ErrorSerializer for code in codes}


def _query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class WholeNumberParam(serializers.IntegerField):
    """A numeric query parameter, read as the timeline's are
    (:func:`feed.validation.whole_number`: ASCII digits within bounds)."""

    def to_internal_value(self, data: Any) -> int:
        try:
            return whole_number(
                self.field_name or "value",
                str(data),
                low=self.min_value if self.min_value is not None else 0,
                high=self.max_value if self.max_value is not None else MAX_PARAM,
            )
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None


#: The largest number any query parameter takes (a JSON-safe integer).
MAX_PARAM = 2**63 - 1


def _id_param(help_text: str) -> serializers.IntegerField:
    return WholeNumberParam(min_value=1, max_value=ids.MAX_ID, required=False, help_text=help_text)


def current_user(request: Request) -> User:
    """The authenticated user (views that call this require IsAuthenticated)."""
    user = request.user
    if not isinstance(user, User):
        raise exceptions.NotAuthenticated()
    return user


# --- tweets -------------------------------------------------------------------


class TweetCreateApi(View):
    permission_classes = [IsAuthenticated]

    class InputSerializer(serializers.Serializer):
        text = StrictCharField(
            allow_blank=True, trim_whitespace=False, help_text="1-280 characters (after NFC)."
        )

    class OutputSerializer(TweetOut):
        seq = serializers.IntegerField()

    @extend_schema(
        request=InputSerializer, responses={201: OutputSerializer, **error_responses(400, 401)}
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        written = services.tweet_create(
            author=current_user(request), text=data.validated_data["text"]
        )
        return Response(
            {**tweet_out(written.tweet), "seq": written.seq}, status=status.HTTP_201_CREATED
        )


class TweetDetailApi(View):
    def get_permissions(self) -> list[Any]:
        return [IsAuthenticated()] if self.request.method == "DELETE" else [AllowAny()]

    @extend_schema(responses={200: TweetOut, **error_responses(404)})
    def get(self, request: Request, tweet_id: int) -> Response:
        tweet = (
            Tweet.objects.select_related("author")
            .filter(id=tweet_id, author__is_active=True)  # a suspended author's: gone
            .first()
            if ids.is_valid(tweet_id)
            else None
        )
        if tweet is None:
            raise NotFound(f"no tweet with id {tweet_id}")
        return Response(tweet_out(tweet))

    @extend_schema(responses={204: None, **error_responses(401, 403, 404)})
    def delete(self, request: Request, tweet_id: int) -> Response:
        seq = services.tweet_delete(tweet_id=tweet_id, actor=current_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT, headers={"X-Starling-Seq": str(seq)})


# --- users and follows --------------------------------------------------------


class FollowApi(View):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None, responses={200: SeqOut, 201: SeqOut, **error_responses(400, 401, 404)}
    )
    def post(self, request: Request, username: str) -> Response:
        followee = services.user_by_username(username)
        written = services.follow_create(follower=current_user(request), followee=followee)
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(request=None, responses={200: SeqOut, **error_responses(401, 404)})
    def delete(self, request: Request, username: str) -> Response:
        # Unfollowing is always allowed, a suspended account too.
        followee = services.user_by_username(username, suspended=True)
        return Response(
            {"seq": services.follow_delete(follower=current_user(request), followee=followee)}
        )


class UserDetailApi(View):
    permission_classes = [AllowAny]

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        username = serializers.CharField()
        joined_at = serializers.DateTimeField()
        followers_count = serializers.IntegerField()
        following_count = serializers.IntegerField()
        tweets_count = serializers.IntegerField()

    @extend_schema(responses={200: OutputSerializer, **error_responses(404)})
    def get(self, request: Request, username: str) -> Response:
        p = selectors.profile(services.user_by_username(username))
        return Response(
            self.OutputSerializer(
                {
                    "id": p.user.pk,
                    "username": p.user.username,
                    "joined_at": p.user.date_joined,
                    "followers_count": p.followers_count,
                    "following_count": p.following_count,
                    "tweets_count": p.tweets_count,
                }
            ).data
        )


class UserTweetsApi(View):
    permission_classes = [AllowAny]

    class QuerySerializer(serializers.Serializer):
        count = WholeNumberParam(min_value=1, max_value=200, default=20)
        max_id = _id_param("Newest id to return (inclusive).")
        since_id = _id_param("Return only ids above this.")

    class OutputSerializer(serializers.Serializer):
        tweets = TweetOut(many=True)
        next_max_id = serializers.IntegerField(allow_null=True)

    @extend_schema(
        parameters=[QuerySerializer], responses={200: OutputSerializer, **error_responses(400, 404)}
    )
    def get(self, request: Request, username: str) -> Response:
        query = _query(self.QuerySerializer, request)
        user = services.user_by_username(username)
        tweets = selectors.user_tweets(
            user, count=query["count"], max_id=query.get("max_id"), since_id=query.get("since_id")
        )
        next_max_id = tweets[-1].id - 1 if len(tweets) == query["count"] else None
        return Response({"tweets": [tweet_out(t) for t in tweets], "next_max_id": next_max_id})


class _FollowListApi(View):
    permission_classes = [AllowAny]
    direction = ""

    class QuerySerializer(serializers.Serializer):
        count = WholeNumberParam(min_value=1, max_value=200, default=50)
        cursor = WholeNumberParam(min_value=1, required=False)

    class OutputSerializer(serializers.Serializer):
        users = UserRef(many=True)
        next_cursor = serializers.IntegerField(allow_null=True)

    @extend_schema(
        parameters=[QuerySerializer], responses={200: OutputSerializer, **error_responses(400, 404)}
    )
    def get(self, request: Request, username: str) -> Response:
        query = _query(self.QuerySerializer, request)
        user = services.user_by_username(username)
        page, next_cursor = selectors.follow_page(
            user, direction=self.direction, count=query["count"], cursor=query.get("cursor")
        )
        users = [{"id": u.pk, "username": u.username} for _, u in page]
        return Response({"users": users, "next_cursor": next_cursor})


class UserFollowersApi(_FollowListApi):
    direction = "followers"


class UserFollowingApi(_FollowListApi):
    direction = "following"


# --- operations ---------------------------------------------------------------


class HealthApi(View):
    permission_classes = [AllowAny]
    authentication_classes: list[type] = []

    @extend_schema(
        responses={
            200: inline_serializer("Health", {"status": serializers.CharField()}),
            503: inline_serializer("HealthDown", {"status": serializers.CharField()}),
        }
    )
    def get(self, request: Request) -> Response:
        """Up or not for anyone; the checks' detail for operators: a client on
        this machine (by the address rule of the rate limits, so not a client
        behind a trusted proxy) or one with ``STARLING_METRICS_TOKEN``."""
        report = cached_check_all()
        body = report if self._operator(request) else public(report)
        return Response(body, status=200 if report["status"] == "ok" else 503)

    @staticmethod
    def _operator(request: Request) -> bool:
        token = settings.STARLING_METRICS_TOKEN
        try:
            given = bearer_token(request.META.get("HTTP_AUTHORIZATION", ""))
        except InvalidToken:
            given = None
        if token and given and hmac.compare_digest(given.encode(), token.encode()):
            return True
        address = BaseThrottle().get_ident(request)
        return address in {"127.0.0.1", "::1"}


def name_nested_serializers(namespace: dict[str, Any]) -> None:
    """Unique OpenAPI component names for the nested serializers of a module's
    views (``TweetCreateApi.InputSerializer`` → ``TweetCreateInput``): the
    nested classes all share a few names, which would collide in the schema."""
    for view in list(namespace.values()):
        if not (isinstance(view, type) and issubclass(view, APIView)):
            continue
        for attr in ("InputSerializer", "OutputSerializer", "QuerySerializer"):
            inner = view.__dict__.get(attr)
            if inner is not None:
                name = view.__name__.removesuffix("Api") + attr.removesuffix("Serializer")
                extend_schema_serializer(component_name=name)(inner)


name_nested_serializers(globals())
