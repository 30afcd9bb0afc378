"""Write use-cases of lists (docs/design.md "The view", docs/decisions.md D31):
a list is another timeline owner, ``-L``, whose follows are its members.

Each use-case changes its rows and appends its outbox events in one
transaction, like every write (feed.services): a membership is a
``Followed(-L, member, muted=<the owner hides the member>)``, its removal an
``Unfollowed(-L, member)``; a list has its own copy of its owner's filter
(``FiltersSet(-L, ...)``); a deleted list's timeline is dropped by a
``TimelineReset(-L, drop=True)`` after the removal of each member.

Every write of a user's lists locks the user's row first (in id order with
the member's, when there is one): the lists' numbering, the limits, a
block's or mute's re-sent memberships and a list's refill
(:func:`feed.services.timeline_reset`) are serialized by it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from fanout.model import events, owners
from feed import outbox, selectors, view_sql
from feed.errors import ApplicationError, Conflict, NotFound
from feed.models import List, ListMember, User
from feed.services import Written, lock_users

#: A user has at most this many lists at once.
MAX_LISTS = 1000
#: A list has at most this many members.
MAX_MEMBERS = 5000
NAME_MAX = 100
DESCRIPTION_MAX = 500


@dataclass(frozen=True)
class ListWrite:
    list: List
    seq: int


def _text(value: str, field: str, *, low: int, high: int, newlines: bool) -> str:
    """``value`` without surrounding spaces, checked: ``low`` to ``high``
    characters, no control characters (but line breaks where ``newlines``)."""
    value = value.strip()
    if not low <= len(value) <= high:
        what = f"{low} to {high} characters" if low else f"at most {high} characters"
        raise ApplicationError(f"the {field} must be {what}", field=field)
    allowed = {"\n"} if newlines else set()
    if any(unicodedata.category(c) == "Cc" and c not in allowed for c in value):
        raise ApplicationError(f"the {field} has a control character", field=field)
    return value


def clean_name(name: str) -> str:
    return _text(name, "name", low=1, high=NAME_MAX, newlines=False)


def clean_description(description: str) -> str:
    return _text(description, "description", low=0, high=DESCRIPTION_MAX, newlines=True)


def owned_list(owner: User, list_id: int) -> List:
    """The list ``list_id`` if ``owner`` owns it; 404 otherwise (lists are
    private: someone else's list does not exist for the caller)."""
    found = None
    if owners.is_list_id(list_id) and owners.user_of(-list_id) == owner.pk:
        found = List.objects.filter(pk=list_id, owner_id=owner.pk).first()
    if found is None:
        raise NotFound(f"no list with id {list_id}")
    return found


def hides(owner_id: int, user_id: int) -> bool:
    """Whether ``owner_id`` hides ``user_id`` (a block either way, or a mute):
    the ``muted`` flag of ``user_id``'s membership in the owner's lists."""
    if owner_id == user_id:
        return False
    return selectors.blocked_between(owner_id, user_id) or selectors.mutes(owner_id, user_id)


def membership(list_id: int, member_id: int, owner_id: int) -> events.Followed:
    """A membership's record as the tables say now."""
    return events.Followed(owners.list_owner(list_id), member_id, muted=hides(owner_id, member_id))


@transaction.atomic
def list_create(*, owner: User, name: str, description: str = "") -> ListWrite:
    """A new (empty) list of ``owner``'s, numbered after every list they ever
    made; its filter copy when the owner hides anyone. 409 past MAX_LISTS."""
    name, description = clean_name(name), clean_description(description)
    lock_users(owner.pk)
    if List.objects.filter(owner_id=owner.pk).count() >= MAX_LISTS:
        raise Conflict(f"you have {MAX_LISTS} lists already: delete one first")
    made = User.objects.filter(pk=owner.pk).values_list("lists_made", flat=True).get() + 1
    if made > owners.MAX_LIST_NUMBER:
        raise Conflict("you cannot make any more lists")
    User.objects.filter(pk=owner.pk).update(lists_made=made)
    created = List.objects.create(
        id=owners.list_id(owner.pk, made), owner=owner, name=name, description=description
    )
    hidden = tuple(sorted(selectors.hidden_from(owner.pk)))
    if not hidden:
        return ListWrite(created, outbox.high_water_seq())
    return ListWrite(
        created, outbox.append(events.FiltersSet(owners.list_owner(created.pk), hidden))
    )


@transaction.atomic
def list_update(
    *, owner: User, list_id: int, name: str | None = None, description: str | None = None
) -> List:
    """Rename a list or change its description (no event: the timeline does
    not show them)."""
    found = owned_list(owner, list_id)
    fields = []
    if name is not None:
        found.name = clean_name(name)
        fields.append("name")
    if description is not None:
        found.description = clean_description(description)
        fields.append("description")
    if fields:
        found.save(update_fields=fields)
    return found


@transaction.atomic
def list_delete(*, owner: User, list_id: int) -> int:
    """Delete a list: each member's removal, its filter's copy emptied (the
    compacted changelog then holds nothing of it for a rebuild), then the drop
    of its timeline (held by the store until every earlier write is applied);
    returns the seq."""
    lock_users(owner.pk)
    found = owned_list(owner, list_id)
    list_owner = owners.list_owner(found.pk)
    members = list(
        ListMember.objects.filter(list_id=found.pk)
        .order_by("member_id")
        .values_list("member_id", flat=True)
    )
    ListMember.objects.filter(list_id=found.pk).delete()
    found.delete()
    gone: list[events.Event] = [events.Unfollowed(list_owner, m) for m in members]
    if selectors.hidden_from(owner.pk):  # its filter's copy, superseded by an empty one
        gone.append(events.FiltersSet(list_owner, ()))
    as_of = outbox.append_many(gone) if gone else outbox.high_water_seq()
    return outbox.append(events.TimelineReset(list_owner, (), 0, as_of=as_of, drop=True))


@transaction.atomic
def member_add(*, owner: User, list_id: int, member: User) -> Written:
    """Add ``member`` (anyone: a blocked user too, whom the list then hides;
    the owner too) to the list; 200 (``created`` False) if already in.
    409 past MAX_MEMBERS. Both rows locked: a block or mute between the two
    commits before (and this reads it) or after (and re-sends this)."""
    lock_users(owner.pk, member.pk)
    found = owned_list(owner, list_id)
    if ListMember.objects.filter(list_id=found.pk, member_id=member.pk).exists():
        return Written(created=False, seq=outbox.high_water_seq())
    if found.members_count >= MAX_MEMBERS:
        raise Conflict(f"the list has {MAX_MEMBERS} members already: remove one first")
    ListMember.objects.create(list_id=found.pk, member_id=member.pk)
    List.objects.filter(pk=found.pk).update(members_count=F("members_count") + 1)
    return Written(created=True, seq=outbox.append(membership(found.pk, member.pk, owner.pk)))


@transaction.atomic
def member_remove(*, owner: User, list_id: int, member: User) -> int:
    """Remove ``member`` from the list; idempotent (the high-water seq)."""
    lock_users(owner.pk)
    found = owned_list(owner, list_id)
    deleted, _ = ListMember.objects.filter(list_id=found.pk, member_id=member.pk).delete()
    if not deleted:
        return outbox.high_water_seq()
    List.objects.filter(pk=found.pk).update(members_count=F("members_count") - 1)
    return outbox.append(events.Unfollowed(owners.list_owner(found.pk), member.pk))


def filter_events(user_id: int, hidden: tuple[int, ...], other: int) -> list[events.Event]:
    """After ``user_id``'s hidden set became ``hidden`` (a block or mute
    between them and ``other``; the caller holds both rows' locks): each of
    the user's lists' filter copy, and ``other``'s membership, re-sent with
    its new ``muted`` flag, in each of the user's lists that has them. As
    many events as the user has lists."""
    lists = list(List.objects.filter(owner_id=user_id).order_by("id").values_list("id", flat=True))
    if not lists:
        return []
    out: list[events.Event] = [events.FiltersSet(owners.list_owner(L), hidden) for L in lists]
    having = ListMember.objects.filter(Q(member_id=other) & Q(list_id__in=lists))
    muted = other in hidden
    out += [
        events.Followed(owners.list_owner(L), other, muted=muted)
        for L in sorted(having.values_list("list_id", flat=True))
    ]
    return out


def list_reset(list_owner: int, keep: int, as_of: int) -> events.TimelineReset:
    """The refill of list L's timeline (owner ``-L``): the newest ``keep``
    entries of the list's view, the replies aside included, leaving out the
    authors its reads pull (:func:`feed.services.timeline_reset`; the
    caller holds the owner's row lock and checked that the list exists)."""
    from fanout.store.timelines import store_for

    list_id = owners.list_of(list_owner)
    pulled = store_for(settings.STARLING).pulled_authors(list_owner)
    found = view_sql.list_timeline_ids(list_id, limit=keep + 1, excluded=pulled, aside=True)
    horizon = found[keep - 1] if len(found) > keep else 0
    raw = view_sql.list_timeline_entries(list_id, low=horizon, excluded=pulled)
    return events.TimelineReset(
        list_owner,
        tuple(sorted({entry for entry, _, _, _ in raw})),
        horizon,
        as_of,
        pulled,
        tuple(sorted((e, o, by) for e, o, by, _ in raw if e != o)),
        tuple(sorted((e, u) for e, _, _, u in raw if u)),
    )
