"""Whose timeline an owner id is: a user's home, a user's mentions, or a list.

Timelines are kept per *owner*, a signed 64-bit id:

* ``u`` (1 to :data:`MAX_USER`): user u's home timeline;
* ``-u``: user u's mentions timeline (docs/decisions.md D30);
* ``-L``: list L's timeline (docs/decisions.md D31), where the list's id
  ``L = (n << 32) | o`` names its owner o (the user) in its low 32 bits, n
  being o's n-th list (1 to :data:`MAX_LIST_NUMBER`).

A timeline's *user* is u for the first two and o for a list: a negative
owner's keys live in its user's shard (``fanout.store.keys.Shards``), so a
mentions timeline is screened by its user's filter, and a list is read with
its owner's token, each in one script call. A list id is below 2**53: exact
as a Lua number (the store's scripts) and as a JSON number (the API).

This module is pure. ``fanout/store/lua/prefixes.lua`` holds the same rules
for the scripts (``user_of``, ``is_list``), checked against these by the
store's tests.
"""

from __future__ import annotations

from collections.abc import Iterable

USER_BITS = 32
#: The greatest user id a timeline owner can name.
MAX_USER = (1 << USER_BITS) - 1
#: A user makes at most this many lists over its life (ids stay below 2**53).
MAX_LIST_NUMBER = (1 << (53 - USER_BITS)) - 1


def check_user(user: int) -> int:
    if not 0 < user <= MAX_USER:
        raise ValueError(f"user id {user} is outside 1..{MAX_USER}")
    return user


def list_id(user: int, number: int) -> int:
    """The id of ``user``'s ``number``-th list."""
    check_user(user)
    if not 0 < number <= MAX_LIST_NUMBER:
        raise ValueError(f"list number {number} is outside 1..{MAX_LIST_NUMBER}")
    return (number << USER_BITS) | user


def is_list_id(value: int) -> bool:
    return value > MAX_USER and value >> USER_BITS <= MAX_LIST_NUMBER and value & MAX_USER > 0


def list_owner(list_: int) -> int:
    """The timeline owner of list ``list_``."""
    if not is_list_id(list_):
        raise ValueError(f"{list_} is not a list id")
    return -list_


def list_of(owner: int) -> int:
    """The list whose timeline ``owner`` is."""
    return -owner


def mentions_owner(user: int) -> int:
    return -user


def mentions_owners(users: Iterable[int]) -> tuple[int, ...]:
    """The owners of ``users``' mentions timelines, ascending."""
    return tuple(sorted(-u for u in users))


def is_list(owner: int) -> bool:
    return owner < -MAX_USER


def is_mentions(owner: int) -> bool:
    return -MAX_USER <= owner < 0


def is_home(owner: int) -> bool:
    return owner > 0


def user_of(owner: int) -> int:
    """The user whose timeline ``owner`` is: u for u and -u, a list's owner."""
    return owner if owner > 0 else -owner & MAX_USER
