"""Django admin for moderators.

Moderators delete tweets and follows here, and those deletes go through the
same use-cases as the API so their tombstones reach the changelogs. Nothing
else changes rows from the admin: tweets and follows are created through the
API, users are deactivated (not deleted: their tweets and follows would go
without tombstones), and the outbox is read-only.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse

from feed import moderation, relations, services
from feed.errors import NotFound
from feed.models import (
    Block,
    Follow,
    Like,
    List,
    ListMember,
    ModerationAction,
    OutboxEvent,
    TimelineRebuild,
    Tweet,
    User,
)
from feed.outbox import DjangoOutboxStore
from feed.validation import InvalidInput, validate_username


def _clean_username(form: Any) -> str:
    """The API's rule for names (feed.validation), unique whatever the case."""
    name = form.cleaned_data["username"]
    try:
        validate_username(name)
    except InvalidInput as exc:
        raise ValidationError(exc.message) from None
    others = User.objects.filter(username__lower=name.lower())
    if form.instance.pk is not None:
        others = others.exclude(pk=form.instance.pk)
    if others.exists():
        raise ValidationError(f"username {name!r} is already taken")
    return str(name)


class UserAddForm(AdminUserCreationForm):
    class Meta(AdminUserCreationForm.Meta):
        model = User
        fields = ("username",)

    clean_username = _clean_username


class UserEditForm(UserChangeForm):
    class Meta(UserChangeForm.Meta):
        model = User

    clean_username = _clean_username


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    form = UserEditForm
    add_form = UserAddForm
    list_display = (
        "id",
        "username",
        "is_active",
        "is_staff",
        "date_joined",
        "last_active",
        "blocked_by",
    )
    list_filter = ("is_active", "is_staff")
    readonly_fields = ("last_active",)
    fieldsets = (
        *(DjangoUserAdmin.fieldsets or ()),
        ("Tokens", {"fields": ("tokens_valid_after",)}),
        # A read or a sign-in, once a day: idle users' timelines are dropped (STARLING_ACTIVE_DAYS).
        ("Activity", {"fields": ("last_active",)}),
    )

    actions = ["suspend_users", "reinstate_users", "revoke_tokens"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        # Counted per row shown (a subquery on the blocked user's index), not
        # by grouping the whole table.
        blockers = (
            Block.objects.filter(blocked=OuterRef("pk"))
            .order_by()
            .values("blocked")
            .annotate(n=Count("*"))
            .values("n")
        )
        return (
            super().get_queryset(request).annotate(blocked_by_count=Coalesce(Subquery(blockers), 0))
        )

    @admin.display(description="blocked by", ordering="blocked_by_count")
    def blocked_by(self, obj: Any) -> int:
        """How many users block this one: a user blocked by many is a signal."""
        return int(obj.blocked_by_count)

    def save_model(self, request: HttpRequest, obj: User, form: Any, change: bool) -> None:
        """Each change through its use-case, so the changelogs, the timelines
        and the read path (which checks Redis) agree: a new user is registered
        (the self edge), a new name reaches every cached copy, "Active"
        unticked is a suspension and ticked again a reinstatement, a moved
        ``tokens_valid_after`` a revocation."""
        if not change:  # the add form: the registration's use-case (name, self edge)
            services.user_add(user=obj)
            return
        changed = set(form.changed_data)
        active, name = obj.is_active, obj.username
        if "is_active" in changed:
            obj.is_active = not active  # the use-case below makes the change
        if "username" in changed:
            obj.username = form.initial["username"]  # user_rename below, everywhere
        super().save_model(request, obj, form, change)
        if "username" in changed:
            services.user_rename(user=obj, username=name)
        moderator: User = request.user  # type: ignore[assignment]
        if "is_active" in changed:
            if active:
                moderation.user_reinstate(user=obj, moderator=moderator, reason="admin")
            else:
                moderation.user_suspend(user=obj, moderator=moderator, reason="admin")
            obj.refresh_from_db()
        elif "tokens_valid_after" in changed and obj.tokens_valid_after:
            services.tokens_revoke(user=obj, at=obj.tokens_valid_after)

    def has_suspend_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("feed.suspend_user")

    @admin.action(description="Suspend the selected users", permissions=["suspend"])
    def suspend_users(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        self._moderate(request, queryset, moderation.user_suspend, "suspended")

    @admin.action(description="Reinstate the selected users", permissions=["suspend"])
    def reinstate_users(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        self._moderate(request, queryset, moderation.user_reinstate, "reinstated")

    def _moderate(
        self, request: HttpRequest, queryset: QuerySet[User], action: Any, done: str
    ) -> None:
        moderator: User = request.user  # type: ignore[assignment]
        changed = sum(
            action(user=u, moderator=moderator, reason="admin action").created for u in queryset
        )
        self.message_user(request, f"{done} {changed} user(s)")

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        """The admin's password form: a changed password also ends the user's
        sessions, as the API's change does (every token issued before)."""
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            user = self.get_object(request, unquote(id))
            if user is not None:
                services.tokens_revoke(user=user)
        return response

    @admin.action(description="Revoke the selected users' tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            services.tokens_revoke(user=user)
        self.message_user(request, f"revoked the tokens of {queryset.count()} user(s)")


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the use-cases write: shown, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class _DeleteThroughServiceAdmin(_ReadOnlyAdmin):
    """Read-only, except deletes (for those with the model's delete
    permission), which call a use-case per row."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def delete_row(self, request: HttpRequest, obj: Any) -> None:
        raise NotImplementedError

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete_row(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_row(request, obj)


class TweetKindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("post", "Posts"), ("repost", "Reposts")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "post":
            return queryset.filter(repost_of__isnull=True)
        if self.value() == "repost":
            return queryset.filter(repost_of__isnull=False)
        return queryset


@admin.register(Tweet)
class TweetAdmin(_DeleteThroughServiceAdmin):
    """Posts and reposts (a repost shows its original); deleting an original
    deletes its reposts and likes (the use-case's cascade, with tombstones),
    deleting a repost undoes it."""

    list_display = ("id", "author", "kind", "shown_text", "repost_of", "created_at")
    list_select_related = ("author", "repost_of", "repost_of__author")
    list_filter = (TweetKindFilter,)
    search_fields = ("text", "author__username")
    ordering = ("-id",)
    show_full_result_count = False
    raw_id_fields = ("repost_of",)

    @admin.display(description="kind")
    def kind(self, obj: Tweet) -> str:
        return "repost" if obj.repost_of_id else "post"

    @admin.display(description="text")
    def shown_text(self, obj: Tweet) -> str:
        if obj.repost_of is not None:
            return f"(repost of {obj.repost_of.author.username}) {obj.repost_of.text}"
        return obj.text

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """An original's reposts and likes are not in the way: the use-case
        deletes them with it (Django would list them as protected, and likes
        as needing a permission no one has: they are read-only here)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed = perms_needed - {Like._meta.verbose_name}
        return [*deleted, *protected], counts, perms_needed, []

    def delete_row(self, request: HttpRequest, obj: Tweet) -> None:
        # NotFound: a repost deleted with its original, selected with it.
        with contextlib.suppress(NotFound):
            services.tweet_delete(tweet_id=obj.id, actor=request.user)  # type: ignore[arg-type]


@admin.register(Like)
class LikeAdmin(_ReadOnlyAdmin):
    """Who likes what (read-only: likes change through the API's use-cases)."""

    list_display = ("id", "user", "tweet", "created_at")
    list_select_related = ("user", "tweet", "tweet__author")
    search_fields = ("user__username",)
    raw_id_fields = ("user", "tweet")
    ordering = ("-id",)
    show_full_result_count = False


@admin.register(Block)
class BlockAdmin(_ReadOnlyAdmin):
    """Who blocks whom (read-only: blocks change through the API's use-cases).
    Search by the blocked user's name to see who blocks them."""

    list_display = ("id", "blocker", "blocked", "created_at")
    list_select_related = ("blocker", "blocked")
    search_fields = ("blocked__username", "blocker__username")
    raw_id_fields = ("blocker", "blocked")
    ordering = ("-id",)
    show_full_result_count = False


@admin.register(List)
class ListAdmin(_ReadOnlyAdmin):
    """Users' lists (read-only: lists change through the API's use-cases;
    private to their owners, visible to moderators here)."""

    list_display = ("id", "owner", "name", "members_count", "created_at")
    list_select_related = ("owner",)
    search_fields = ("owner__username", "name")
    raw_id_fields = ("owner",)
    ordering = ("-id",)
    show_full_result_count = False


@admin.register(ListMember)
class ListMemberAdmin(_ReadOnlyAdmin):
    """Who is in which list (read-only)."""

    list_display = ("id", "list", "member", "created_at")
    list_select_related = ("list", "member")
    search_fields = ("member__username", "list__owner__username")
    raw_id_fields = ("list", "member")
    ordering = ("-id",)
    show_full_result_count = False


@admin.register(Follow)
class FollowAdmin(_DeleteThroughServiceAdmin):
    list_display = ("id", "follower", "followee", "created_at")
    list_select_related = ("follower", "followee")
    search_fields = ("follower__username", "followee__username")
    ordering = ("-id",)
    show_full_result_count = False

    def delete_row(self, request: HttpRequest, obj: Follow) -> None:
        relations.follow_delete(
            follower=obj.follower,
            followee=obj.followee,
            moderator=request.user,  # type: ignore[arg-type]
        )


class PublishedFilter(admin.SimpleListFilter):
    title = "published"
    parameter_name = "published"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Not yet (backlog)"), ("yes", "Published")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(published_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(published_at__isnull=False)
        return queryset


@admin.register(OutboxEvent)
class OutboxEventAdmin(_ReadOnlyAdmin):
    list_display = ("id", "topic", "key", "kind", "join_key", "created_at", "published_at")
    list_filter = (PublishedFilter, "topic")
    search_fields = ("key",)
    ordering = ("-id",)
    show_full_result_count = False

    @admin.display(description="kind")
    def kind(self, obj: OutboxEvent) -> str:
        return "tombstone" if obj.value is None else "upsert"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        backlog = DjangoOutboxStore().backlog()
        context = {
            **(extra_context or {}),
            "title": f"Outbox: {backlog} events waiting for the relay",
        }
        return super().changelist_view(request, extra_context=context)


@admin.register(TimelineRebuild)
class TimelineRebuildAdmin(admin.ModelAdmin):
    """Start a rebuild ("Add") and see the state of the last ones. The rebuild
    runs as a Celery task (``manage.py rebuild_timelines`` in a subprocess)."""

    list_display = (
        "id",
        "requested_at",
        "requested_by",
        "dry_run",
        "status",
        "stage",
        "finished_at",
    )
    readonly_fields = (
        "requested_by",
        "requested_at",
        "status",
        "stage",
        "detail",
        "summary",
        "error",
        "finished_at",
    )
    fields = ("dry_run", *readonly_fields)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: TimelineRebuild, form: Any, change: bool
    ) -> None:
        from feed.tasks import rebuild_timelines

        obj.requested_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
        transaction.on_commit(lambda: rebuild_timelines.delay(obj.pk))


@admin.register(ModerationAction)
class ModerationActionAdmin(_ReadOnlyAdmin):
    """Who did what to whom, when and why (read-only: the use-cases write it)."""

    list_display = ("created_at", "moderator", "kind", "subject", "tweet_id", "reason")
    list_filter = ("kind",)
    list_select_related = ("moderator", "subject")
    search_fields = ("moderator__username", "subject__username", "reason")
    ordering = ("-id",)
