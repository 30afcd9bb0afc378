"""The endpoints of who sees whom: blocks, mutes and their lists. One view per
operation, each calling its use-case (:mod:`feed.relations`); the shared
serializers and helpers are :mod:`feed.apis`'."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from feed import relations, selectors, services
from feed.apis import (
    SeqOut,
    UserRef,
    View,
    WholeNumberParam,
    current_user,
    error_responses,
    query_of,
)
from feed.models import Block, Mute


class BlockApi(View):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None,
        description="Block a user: the follows between you go, both ways, and neither "
        "can follow, repost or like the other while the block stands. 200 if already.",
        responses={201: SeqOut, 200: SeqOut, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, username: str) -> Response:
        written = relations.block_create(
            blocker=current_user(request), blocked=services.user_by_username(username)
        )
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=None,
        description="Unblock; idempotent. No follow comes back.",
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, username: str) -> Response:
        blocked = services.user_by_username(username, suspended=True)
        return Response(
            {"seq": relations.block_delete(blocker=current_user(request), blocked=blocked)}
        )


class MuteApi(View):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None,
        description="Mute a user (private: nothing tells them): their entries, and reposts "
        "of their tweets, leave your home timeline; the follow stays. 200 if already.",
        responses={201: SeqOut, 200: SeqOut, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, username: str) -> Response:
        written = relations.mute_create(
            muter=current_user(request), muted=services.user_by_username(username)
        )
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=None,
        description="Unmute; idempotent.",
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, username: str) -> Response:
        muted = services.user_by_username(username, suspended=True)
        return Response({"seq": relations.mute_delete(muter=current_user(request), muted=muted)})


class _RelationListApi(View):
    permission_classes = [IsAuthenticated]
    model: type[Block] | type[Mute] = Block

    class QuerySerializer(serializers.Serializer):
        count = WholeNumberParam(min_value=1, max_value=200, default=50)
        cursor = WholeNumberParam(min_value=1, required=False)

    class OutputSerializer(serializers.Serializer):
        users = UserRef(many=True)
        next_cursor = serializers.IntegerField(allow_null=True)

    @extend_schema(
        parameters=[QuerySerializer], responses={200: OutputSerializer, **error_responses(400, 401)}
    )
    def get(self, request: Request) -> Response:
        query = query_of(self.QuerySerializer, request)
        users, next_cursor = selectors.relation_page(
            self.model, current_user(request), count=query["count"], cursor=query.get("cursor")
        )
        return Response(
            {
                "users": [{"id": u.pk, "username": u.username} for u in users],
                "next_cursor": next_cursor,
            }
        )


class BlockListApi(_RelationListApi):
    """The users you block, newest block first."""

    model = Block


class MuteListApi(_RelationListApi):
    """The users you mute, newest mute first."""

    model = Mute
