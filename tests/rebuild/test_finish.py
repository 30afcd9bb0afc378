"""The rebuild's sample check against the database (spark.rebuild.finish), on
a real Redis: a screened view may stop short of the cap above its floor."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from fanout.store import keys
from fanout.store.ops import pack_ids, pack_timeline
from fanout.store.timelines import store_for
from spark.rebuild.finish import Conclusion, RebuildFailed
from spark.rebuild.report import Progress, Summary
from tests.conftest import make_config

#: The database's newest entries of each user's view (cap 3), newest first.
DATABASE = {1: [60, 40, 30], 2: [60, 40, 30], 3: [60, 40, 30], 4: [70, 60, 40]}


def oracle(users: Sequence[int], cap: int) -> dict[int, list[int]]:
    return {u: DATABASE[u][:cap] for u in users}


def test_a_screened_view_short_above_its_floor_is_compared_there(
    redis_url: str, redis_client
) -> None:
    config = make_config("unused:9092", redis_url, timeline_size=3)
    store = store_for(config)
    generation = store.new_generation(state="building")
    store.write_timelines(
        generation,
        [
            (1, pack_timeline(50, [60])),  # short above 50: its filter left 40 out
            (2, pack_timeline(50, [60])),  # short, and nothing screens it
            (3, pack_timeline(0, [30, 40, 60])),
            (4, pack_timeline(50, [60, 70])),  # a pulled author read without its reposts
        ],
    )
    store.write_filters(generation, [(1, [9]), (3, [9])])
    redis_client.sadd(keys.pulls(generation, 4), "-8")
    assert store.screened(generation, [1, 2, 3, 4]) == {1, 3, 4}

    def conclusion() -> Conclusion:
        progress = Progress(store, out=io.StringIO())
        return Conclusion(config, store, progress, Summary(), oracle=oracle)

    conclusion().check_sample(generation, [1, 3, 4])
    with pytest.raises(RebuildFailed, match="1 of 4 sampled timelines differ"):
        conclusion().check_sample(generation, [1, 2, 3, 4])
    assert redis_client.get(keys.filters(generation, 1)) == pack_ids([9])
    redis_client.delete(keys.filters(generation, 1))  # nothing screens it now
    with pytest.raises(RebuildFailed, match="1 of 1 sampled"):
        conclusion().check_sample(generation, [1])


def test_a_view_short_above_its_floor_for_replies_is_compared_there(
    redis_url: str, redis_client
) -> None:
    """docs/decisions.md D29: a timeline that keeps replies aside (the cap
    counts them) may show fewer than the cap above its horizon, and so may a
    view whose pulled lists hold replies to users its reader does not follow;
    a reader of a list without replies may not."""
    config = make_config("unused:9092", redis_url, timeline_size=3)
    store = store_for(config)
    generation = store.new_generation(state="building")
    store.write_timelines(
        generation,
        [
            (1, pack_timeline(50, [60])),  # 2 replies aside: 55, 58
            (2, pack_timeline(50, [60])),  # reads 8's list, which holds replies
            (3, pack_timeline(50, [60])),  # reads 9's list, which holds none
            (8, pack_timeline(0, [])),
            (9, pack_timeline(0, [])),
        ],
    )
    store.write_replies(generation, [(1, [(7, 58), (7, 55)], []), (2, [], [(7, 57)])])
    store.write_list_answers(generation, [(8, [(45, 7)]), (9, [])])
    store.write_pulls(generation, [(2, [8], ()), (3, [9], ())])
    assert redis_client.get(keys.aside(generation, 1)) == pack_ids([7, 55, 7, 58])
    assert redis_client.get(keys.shown_replies(generation, 2)) == pack_ids([7, 57])
    assert redis_client.get(keys.list_answers(generation, 8)) == pack_ids([45, 7])
    assert redis_client.get(keys.list_answers(generation, 9)) is None
    assert store.with_replies(generation, [1, 2, 3]) == {1, 2}

    def conclusion() -> Conclusion:
        progress = Progress(store, out=io.StringIO())
        return Conclusion(config, store, progress, Summary(), oracle=oracle)

    conclusion().check_sample(generation, [1, 2])
    with pytest.raises(RebuildFailed, match="1 of 3 sampled"):
        conclusion().check_sample(generation, [1, 2, 3])
