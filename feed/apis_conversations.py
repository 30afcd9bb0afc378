"""The endpoint of conversations: a tweet's thread (:mod:`feed.conversations`).
The shared serializers and helpers are :mod:`feed.apis`'."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from feed import conversations
from feed.apis import (
    TweetOut,
    UserPageQuery,
    View,
    error_responses,
    name_nested_serializers,
    query_of,
    reader,
    refuse_blocked_reader,
)


class DeletedOut(serializers.Serializer):
    """An ancestor deleted, or whose author is suspended."""

    id = serializers.IntegerField()
    deleted = serializers.BooleanField()


class BlockedOut(serializers.Serializer):
    """An ancestor whose author blocks you."""

    id = serializers.IntegerField()
    blocked = serializers.BooleanField()


class ThreadApi(View):
    permission_classes = [AllowAny]

    class QuerySerializer(UserPageQuery):
        """A page of replies: how many, and the ``next_cursor`` of the previous page."""

    class OutputSerializer(serializers.Serializer):
        ancestors = PolymorphicProxySerializer(
            component_name="Ancestor",
            serializers=[TweetOut, DeletedOut, BlockedOut],
            resource_type_field_name=None,
            many=True,
            help_text=f"The posts above, from the root down (the nearest "
            f"{conversations.MAX_ANCESTORS}).",
        )
        tweet = TweetOut()
        replies = TweetOut(many=True, help_text="Its direct replies, oldest first.")
        next_cursor = serializers.IntegerField(allow_null=True)

    @extend_schema(
        parameters=[QuerySerializer],
        description="A tweet's thread: the posts it answers, up to the root, and a page of "
        "its direct replies, oldest first, leaving out those of users you block, who block "
        "you or whom you mute. A repost's id gives its original's thread.",
        responses={200: OutputSerializer, **error_responses(400, 403, 404)},
    )
    def get(self, request: Request, tweet_id: int) -> Response:
        query = query_of(self.QuerySerializer, request)
        focus, author = conversations.thread_focus(tweet_id)
        refuse_blocked_reader(request, author)
        return Response(
            conversations.thread(
                focus, reader(request), count=query["count"], cursor=query.get("cursor")
            )
        )


name_nested_serializers(globals())
