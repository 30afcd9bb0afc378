"""The endpoints of lists: a user's own timelines whose "follows" are the
list's members (feed.lists). Lists are private: every endpoint answers 404
for a list that is not the caller's. One view per resource, each calling
its use-case; the shared serializers and helpers are :mod:`feed.apis`'."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from feed import lists, selectors, services
from feed.apis import (
    SeqOut,
    StrictCharField,
    UserPageOut,
    UserPageQuery,
    View,
    WholeNumberParam,
    current_user,
    error_responses,
    name_nested_serializers,
    query_of,
)
from feed.models import List


class ListOut(serializers.Serializer):
    id = serializers.IntegerField(help_text="The list's id (below 2**53).")
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    members_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class ListPageOut(serializers.Serializer):
    lists = ListOut(many=True)
    next_cursor = serializers.IntegerField(allow_null=True)


def list_body(found: List) -> dict[str, Any]:
    return {
        "id": found.pk,
        "name": found.name,
        "description": found.description,
        "members_count": found.members_count,
        "created_at": found.created_at.isoformat().replace("+00:00", "Z"),
    }


class _ListApi(View):
    permission_classes = [IsAuthenticated]


class ListsApi(_ListApi):
    class InputSerializer(serializers.Serializer):
        name = StrictCharField(
            max_length=lists.NAME_MAX, help_text=f"1 to {lists.NAME_MAX} characters."
        )
        description = StrictCharField(
            max_length=lists.DESCRIPTION_MAX,
            required=False,
            allow_blank=True,
            default="",
            help_text=f"At most {lists.DESCRIPTION_MAX} characters.",
        )

    class OutputSerializer(ListOut):
        seq = serializers.IntegerField(help_text="Outbox sequence number of this write.")

    class QuerySerializer(serializers.Serializer):
        count = WholeNumberParam(min_value=1, max_value=200, default=50)
        cursor = WholeNumberParam(min_value=1, required=False)

    @extend_schema(
        request=InputSerializer,
        description=f"Make a list (private: only you see it). At most {lists.MAX_LISTS} "
        "lists a user (409 conflict beyond).",
        responses={201: OutputSerializer, **error_responses(400, 401, 409)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        written = lists.list_create(owner=current_user(request), **serializer.validated_data)
        return Response(
            {**list_body(written.list), "seq": written.seq}, status=status.HTTP_201_CREATED
        )

    @extend_schema(
        operation_id="v1_lists_list",
        parameters=[QuerySerializer],
        description="Your lists, newest first.",
        responses={200: ListPageOut, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        query = query_of(self.QuerySerializer, request)
        found, next_cursor = selectors.list_page(
            current_user(request), count=query["count"], cursor=query.get("cursor")
        )
        return Response({"lists": [list_body(f) for f in found], "next_cursor": next_cursor})


class ListDetailApi(_ListApi):
    class InputSerializer(serializers.Serializer):
        name = StrictCharField(max_length=lists.NAME_MAX, required=False)
        description = StrictCharField(
            max_length=lists.DESCRIPTION_MAX, required=False, allow_blank=True
        )

    @extend_schema(responses={200: ListOut, **error_responses(401, 404)})
    def get(self, request: Request, list_id: int) -> Response:
        return Response(list_body(lists.owned_list(current_user(request), list_id)))

    @extend_schema(
        request=InputSerializer,
        description="Rename a list or change its description.",
        responses={200: ListOut, **error_responses(400, 401, 404)},
    )
    def patch(self, request: Request, list_id: int) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        found = lists.list_update(
            owner=current_user(request), list_id=list_id, **serializer.validated_data
        )
        return Response(list_body(found))

    @extend_schema(
        request=None,
        description="Delete a list, its members and its timeline.",
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, list_id: int) -> Response:
        return Response({"seq": lists.list_delete(owner=current_user(request), list_id=list_id)})


class ListMembersApi(_ListApi):
    class InputSerializer(serializers.Serializer):
        username = StrictCharField(max_length=150)

    @extend_schema(
        request=InputSerializer,
        description="Add a user to the list (anyone: a user you block too, whose entries "
        f"the list then hides; yourself too); 200 if already in. At most {lists.MAX_MEMBERS} "
        "members (409 conflict beyond).",
        responses={201: SeqOut, 200: SeqOut, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, list_id: int) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        owner = current_user(request)
        found = lists.owned_list(owner, list_id)  # 404 for another's list, before the user
        member = services.user_by_username(serializer.validated_data["username"])
        written = lists.member_add(owner=owner, list_id=found.pk, member=member)
        return Response(
            {"seq": written.seq},
            status=status.HTTP_201_CREATED if written.created else status.HTTP_200_OK,
        )

    @extend_schema(
        parameters=[UserPageQuery],
        description="The list's members, newest first.",
        responses={200: UserPageOut, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, list_id: int) -> Response:
        query = query_of(UserPageQuery, request)
        found = lists.owned_list(current_user(request), list_id)
        users, next_cursor = selectors.member_page(
            found, count=query["count"], cursor=query.get("cursor")
        )
        return Response(
            {
                "users": [{"id": u.pk, "username": u.username} for u in users],
                "next_cursor": next_cursor,
            }
        )


class ListMemberApi(_ListApi):
    @extend_schema(
        request=None,
        description="Remove a user from the list; idempotent.",
        responses={200: SeqOut, **error_responses(401, 404)},
    )
    def delete(self, request: Request, list_id: int, username: str) -> Response:
        owner = current_user(request)
        found = lists.owned_list(owner, list_id)
        member = services.user_by_username(username, suspended=True)
        return Response({"seq": lists.member_remove(owner=owner, list_id=found.pk, member=member)})


name_nested_serializers(globals())
