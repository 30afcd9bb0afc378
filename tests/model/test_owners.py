"""Owner ids: home, mentions and list timelines never collide, and each names its user."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.model import ids, owners
from fanout.store.keys import Shards

users = st.integers(1, owners.MAX_USER)
numbers = st.integers(1, owners.MAX_LIST_NUMBER)


@given(users, numbers)
def test_a_list_names_its_user_and_is_no_other_kind(user: int, number: int) -> None:
    list_ = owners.list_id(user, number)
    owner = owners.list_owner(list_)
    assert list_ < 2**53 and owners.is_list_id(list_)
    assert owners.is_list(owner) and not owners.is_mentions(owner) and not owners.is_home(owner)
    assert owners.user_of(owner) == user and owners.list_of(owner) == list_
    assert Shards(16).of(owner) == Shards(16).of(user) == Shards(16).of(-user)


@given(users)
def test_home_and_mentions_name_their_user(user: int) -> None:
    mentions = owners.mentions_owner(user)
    assert owners.is_home(user) and owners.is_mentions(mentions)
    assert not owners.is_list(mentions) and not owners.is_list_id(user)
    assert owners.user_of(user) == owners.user_of(mentions) == user


def test_distinct_lists_are_distinct_owners() -> None:
    made = {owners.list_id(u, n) for u in (1, 2, owners.MAX_USER) for n in (1, 2, 3)}
    assert len(made) == 9
    assert max(made) <= ids.MAX_ID


@pytest.mark.parametrize(
    ("user", "number"), [(0, 1), (owners.MAX_USER + 1, 1), (1, 0), (1, owners.MAX_LIST_NUMBER + 1)]
)
def test_out_of_range_is_refused(user: int, number: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        owners.list_id(user, number)


def test_a_user_or_tweet_id_is_not_a_list_owner() -> None:
    with pytest.raises(ValueError, match="not a list"):
        owners.list_owner(12)
