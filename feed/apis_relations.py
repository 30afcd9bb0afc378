"""The endpoints of who sees whom: blocks, mutes and their lists. One view per
operation, each calling its use-case (:mod:`feed.relations`); the shared
serializers and helpers are :mod:`feed.apis`'."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from feed import relations, selectors, services
from feed.apis import (
    SeqOut,
    UserPageOut,
    UserPageQuery,
    View,
    current_user,
    error_responses,
    query_of,
)
from feed.models import Block, Mute, User


class _RelationApi(View):
    """POST creates the relation with the user named in the path (201, or 200
    if it stood already), DELETE removes it (idempotent)."""

    permission_classes = [IsAuthenticated]

    def create(self, user: User, other: User) -> services.Written:
        raise NotImplementedError

    def remove(self, user: User, other: User) -> int:
        raise NotImplementedError

    def post(self, request: Request, username: str) -> Response:
        written = self.create(current_user(request), services.user_by_username(username))
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    def delete(self, request: Request, username: str) -> Response:
        # Always allowed, of a suspended account too.
        other = services.user_by_username(username, suspended=True)
        return Response({"seq": self.remove(current_user(request), other)})


_CREATED = {201: SeqOut, 200: SeqOut, **error_responses(400, 401, 404)}
_REMOVED = {200: SeqOut, **error_responses(401, 404)}


@extend_schema_view(
    post=extend_schema(
        request=None,
        description="Block a user: the follows between you go, both ways, and neither "
        "can follow, repost or like the other while the block stands. 200 if already.",
        responses=_CREATED,
    ),
    delete=extend_schema(
        request=None, description="Unblock; idempotent. No follow comes back.", responses=_REMOVED
    ),
)
class BlockApi(_RelationApi):
    def create(self, user: User, other: User) -> services.Written:
        return relations.block_create(blocker=user, blocked=other)

    def remove(self, user: User, other: User) -> int:
        return relations.block_delete(blocker=user, blocked=other)


@extend_schema_view(
    post=extend_schema(
        request=None,
        description="Mute a user (private: nothing tells them): their entries, and reposts "
        "of their tweets, leave your home timeline; the follow stays. 200 if already.",
        responses=_CREATED,
    ),
    delete=extend_schema(request=None, description="Unmute; idempotent.", responses=_REMOVED),
)
class MuteApi(_RelationApi):
    def create(self, user: User, other: User) -> services.Written:
        return relations.mute_create(muter=user, muted=other)

    def remove(self, user: User, other: User) -> int:
        return relations.mute_delete(muter=user, muted=other)


class _RelationListApi(View):
    permission_classes = [IsAuthenticated]
    model: type[Block] | type[Mute] = Block

    @extend_schema(
        parameters=[UserPageQuery], responses={200: UserPageOut, **error_responses(400, 401)}
    )
    def get(self, request: Request) -> Response:
        query = query_of(UserPageQuery, request)
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
