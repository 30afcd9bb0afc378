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
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from fanout.model import ids
from feed import relations, selectors, services
from feed.auth import InvalidToken, bearer_token
from feed.errors import Blocked, NotFound
from feed.health import cached_check_all, public
from feed.models import User
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


class OriginalRef(serializers.Serializer):
    id = serializers.IntegerField()
    author = serializers.CharField()
    created_at = serializers.CharField()


class CountsOut(serializers.Serializer):
    likes = serializers.IntegerField()
    reposts = serializers.IntegerField()
    replies = serializers.IntegerField(
        help_text="Live direct replies by active users where the database counts (a page "
        "served while Redis is unreachable); 0 in the counts kept in Redis."
    )


class ReplyRef(serializers.Serializer):
    id = serializers.IntegerField(help_text="The post answered (it may be deleted since).")
    author = serializers.CharField(
        help_text="Its author's name as written: when the reply was written (a rename leaves it)."
    )


class TweetOut(serializers.Serializer):
    """A tweet wherever it appears: for a repost,
    ``id``, ``author`` and ``created_at`` are the repost's, ``text``,
    ``in_reply_to`` and ``mentions`` are the original's and ``repost_of``
    names the original; ``counts`` are the original's."""

    id = serializers.IntegerField(help_text="The entry's id (a timeline cursor).")
    author = serializers.CharField()
    text = serializers.CharField()
    in_reply_to = ReplyRef(allow_null=True, help_text="The post it answers; null if none.")
    mentions = serializers.ListField(
        child=serializers.CharField(),
        help_text="The names of the users it mentions, as written (a rename leaves them), "
        "in its text's order.",
    )
    created_at = serializers.CharField()
    repost_of = OriginalRef(allow_null=True, help_text="The original, for a repost; else null.")
    counts = CountsOut()


class SeqOut(serializers.Serializer):
    seq = serializers.IntegerField(help_text="Outbox sequence number of this write.")


class UserRef(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


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


def query_of(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
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


def reader(request: Request) -> User | None:
    """The authenticated user, or ``None`` for an anonymous request."""
    user = request.user
    return user if isinstance(user, User) else None


def refuse_blocked_reader(request: Request, author_id: int) -> None:
    """403 ``blocked`` for a reader whom ``author_id`` blocks (reading that
    author's tweets); a user timeline is otherwise not filtered by blocks."""
    user = reader(request)
    if user is not None and user.pk != author_id and selectors.blocks(author_id, user.pk):
        raise Blocked("this account blocks you")


def current_user(request: Request) -> User:
    """The authenticated user (views that call this require IsAuthenticated)."""
    user = request.user
    if not isinstance(user, User):
        raise exceptions.NotAuthenticated()
    return user


# --- tweets -------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "format": "int64", "minimum": 1, "maximum": ids.MAX_ID},
            {"type": "string", "pattern": "^[0-9]{1,20}$"},
        ]
    }
)
class IdField(serializers.Field):
    """A tweet id in a request body: a JSON number, or a string of its digits."""

    default_error_messages = {
        "invalid": "must be a tweet id: a whole number from 1 to {max}, as a number or a string"
    }

    def to_internal_value(self, data: Any) -> int:
        value: Any = data
        if isinstance(data, str):
            try:
                value = whole_number(self.field_name or "id", data, low=1, high=ids.MAX_ID)
            except InvalidInput:
                value = None
        if isinstance(value, bool) or not isinstance(value, int) or not ids.is_valid(value):
            self.fail("invalid", max=ids.MAX_ID)
        return int(value)

    def to_representation(self, value: int) -> int:
        return value


class TweetCreateApi(View):
    permission_classes = [IsAuthenticated]

    class InputSerializer(serializers.Serializer):
        text = StrictCharField(
            allow_blank=True, trim_whitespace=False, help_text="1-280 characters (after NFC)."
        )
        in_reply_to = IdField(
            required=False,
            allow_null=True,
            help_text="The tweet this one answers (a repost's id answers its original).",
        )

    class OutputSerializer(TweetOut):
        seq = serializers.IntegerField()

    @extend_schema(
        request=InputSerializer,
        description="Post a tweet, or a reply (``in_reply_to``). ``@name`` mentions of "
        "active users are kept (the first 10). 404: the tweet answered is unknown, deleted "
        "or its author suspended; 403 ``blocked``: a block stands between you and its author.",
        responses={201: OutputSerializer, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        written = services.tweet_create(
            author=current_user(request),
            text=data.validated_data["text"],
            in_reply_to=data.validated_data.get("in_reply_to"),
        )
        tweet = written.tweet
        body = selectors.tweet_object(
            tweet.id,
            tweet.author.username,
            tweet.text,
            in_reply_to=written.in_reply_to,
            mentions=written.mentions,
        )
        return Response({**body, "seq": written.seq}, status=status.HTTP_201_CREATED)


class TweetDetailApi(View):
    def get_permissions(self) -> list[Any]:
        return [IsAuthenticated()] if self.request.method == "DELETE" else [AllowAny()]

    @extend_schema(responses={200: TweetOut, **error_responses(403, 404)})
    def get(self, request: Request, tweet_id: int) -> Response:
        tweet = selectors.tweet_detail(tweet_id)  # a suspended author's: gone
        if tweet is None:
            raise NotFound(f"no tweet with id {tweet_id}")
        refuse_blocked_reader(request, selectors.author_of(tweet_id))
        return Response(tweet)

    @extend_schema(
        description="Delete a tweet (with its reposts and likes), or undo a repost "
        "given its id. Header X-Starling-Seq: the write's seq.",
        responses={204: None, **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, tweet_id: int) -> Response:
        seq = services.tweet_delete(tweet_id=tweet_id, actor=current_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT, headers={"X-Starling-Seq": str(seq)})


class RepostApi(View):
    permission_classes = [IsAuthenticated]

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField(help_text="The repost's id (its timeline entry).")
        seq = serializers.IntegerField(help_text="Outbox sequence number of this write.")

    @extend_schema(
        request=None,
        description="Repost a tweet (a repost's id reposts its original); 200 with the "
        "same id if already reposted.",
        responses={201: OutputSerializer, 200: OutputSerializer, **error_responses(401, 403, 404)},
    )
    def post(self, request: Request, tweet_id: int) -> Response:
        written = services.repost_create(user=current_user(request), tweet_id=tweet_id)
        return Response(
            {"id": written.repost_id, "seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=None,
        description=(
            "Undo your repost of a tweet (the original's id or the repost's); idempotent "
            "(404: a tweet id that is not a number)."
        ),
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, tweet_id: int) -> Response:
        return Response(
            {"seq": services.repost_delete(user=current_user(request), tweet_id=tweet_id)}
        )


class LikeApi(View):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None,
        description="Like a tweet (a repost's id likes its original); 200 if already liked.",
        responses={201: SeqOut, 200: SeqOut, **error_responses(401, 403, 404)},
    )
    def post(self, request: Request, tweet_id: int) -> Response:
        written = services.like_create(user=current_user(request), tweet_id=tweet_id)
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=None,
        description=(
            "Undo your like of a tweet (or of a repost's original); idempotent "
            "(404: a tweet id that is not a number)."
        ),
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, tweet_id: int) -> Response:
        return Response(
            {"seq": services.like_delete(user=current_user(request), tweet_id=tweet_id)}
        )


# --- users and follows --------------------------------------------------------


class FollowApi(View):
    permission_classes = [IsAuthenticated]

    class InputSerializer(serializers.Serializer):
        reposts = serializers.BooleanField(
            required=False,
            help_text="Show their reposts in your home timeline (default true; "
            "left out: an existing follow keeps its flag).",
        )

    class FlagSerializer(serializers.Serializer):
        reposts = serializers.BooleanField()

    class FlagOut(SeqOut):
        reposts = serializers.BooleanField()

    @extend_schema(
        request=InputSerializer,
        responses={200: SeqOut, 201: SeqOut, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request, username: str) -> Response:
        data = self.InputSerializer(data=request.data or {})
        data.is_valid(raise_exception=True)
        followee = services.user_by_username(username)
        written = relations.follow_create(
            follower=current_user(request),
            followee=followee,
            reposts=data.validated_data.get("reposts"),
        )
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=FlagSerializer,
        description="Show (or not) a followee's reposts in your home timeline.",
        responses={200: FlagOut, **error_responses(400, 401, 404)},
    )
    def patch(self, request: Request, username: str) -> Response:
        data = self.FlagSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reposts = data.validated_data["reposts"]
        seq = relations.follow_reposts_set(
            follower=current_user(request),
            followee=services.user_by_username(username),
            reposts=reposts,
        )
        return Response({"seq": seq, "reposts": reposts})

    @extend_schema(request=None, responses={200: SeqOut, **error_responses(401, 404)})
    def delete(self, request: Request, username: str) -> Response:
        # Unfollowing is always allowed, a suspended account too.
        followee = services.user_by_username(username, suspended=True)
        return Response(
            {"seq": relations.follow_delete(follower=current_user(request), followee=followee)}
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
        following = inline_serializer(
            "Following",
            {"reposts": serializers.BooleanField()},
            allow_null=True,
            help_text="Whether you (the authenticated reader) follow this user, and "
            "whether their reposts show; null if not (or anonymous).",
        )

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
                    "following": selectors.following(reader(request), p.user),
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
        """The user's posts and reposts, newest first (per original only the
        newest: their repost of their own post hides the post)."""
        query = query_of(self.QuerySerializer, request)
        user = services.user_by_username(username)
        refuse_blocked_reader(request, user.pk)
        entries = selectors.user_tweets(
            user, count=query["count"], max_id=query.get("max_id"), since_id=query.get("since_id")
        )
        next_max_id = entries[-1] - 1 if len(entries) == query["count"] else None
        return Response({"tweets": selectors.tweet_objects(entries), "next_max_id": next_max_id})


class UserLikesApi(View):
    permission_classes = [AllowAny]

    class QuerySerializer(serializers.Serializer):
        count = WholeNumberParam(min_value=1, max_value=200, default=20)
        cursor = WholeNumberParam(
            min_value=1, required=False, help_text="next_cursor of the previous page."
        )

    class OutputSerializer(serializers.Serializer):
        tweets = TweetOut(many=True)
        next_cursor = serializers.IntegerField(allow_null=True)

    @extend_schema(
        parameters=[QuerySerializer], responses={200: OutputSerializer, **error_responses(400, 404)}
    )
    def get(self, request: Request, username: str) -> Response:
        """The tweets the user liked, newest like first."""
        query = query_of(self.QuerySerializer, request)
        user = services.user_by_username(username)
        tweets, next_cursor = selectors.user_likes(
            user, count=query["count"], cursor=query.get("cursor")
        )
        return Response({"tweets": tweets, "next_cursor": next_cursor})


class UserPageQuery(serializers.Serializer):
    """A page of a list of users: how many, and the cursor of a previous page."""

    count = WholeNumberParam(min_value=1, max_value=200, default=50)
    cursor = WholeNumberParam(min_value=1, required=False)


class UserPageOut(serializers.Serializer):
    users = UserRef(many=True)
    next_cursor = serializers.IntegerField(allow_null=True)


class _FollowListApi(View):
    permission_classes = [AllowAny]
    direction = ""
    QuerySerializer = UserPageQuery
    OutputSerializer = UserPageOut

    @extend_schema(
        parameters=[QuerySerializer], responses={200: OutputSerializer, **error_responses(400, 404)}
    )
    def get(self, request: Request, username: str) -> Response:
        query = query_of(self.QuerySerializer, request)
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
