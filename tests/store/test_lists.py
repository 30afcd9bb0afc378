"""Lists in the store (docs/decisions.md D31): a list's timeline is owner -L,
kept like a home timeline but for its filter copy (a change empties -L alone),
its owner o's own entries (never hidden by the filter, o's replies still
conditional on membership), its drop (held like a reset, then no key of -L
left) and the idle sweep of o's lists."""

from __future__ import annotations

import random
from importlib import resources

import orjson
import pytest
import redis

from fanout.model import owners
from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.keys import timeline as timeline_key
from fanout.store.ops import IDLE, OWN, group_by_timeline, unpack_pairs
from fanout.store.timelines import TimelineStore
from tests.conftest import LAYOUTS, layout_client

GEN = 1
OWNER = 7  # the list's owner (a user)
L = owners.list_id(OWNER, 3)
LO = owners.list_owner(L)  # the list's timeline owner, -L
M = 8  # a member
U = 9  # someone OWNER hides
BODY = b"{}"


def body(t: int) -> bytes:
    return b'{"id":%d,"author":"a","text":"t","created_at":"c"}' % t


@pytest.fixture
def store(redis_client: redis.Redis) -> TimelineStore:
    s = TimelineStore(redis_client, cap=5, slack=2)
    s.create_generation(GEN)
    s.ensure_active_generation()
    return s


def ids(store: TimelineStore, owner: int) -> list[int]:
    tl = store.timeline(GEN, owner)
    assert tl is not None
    return tl.ids


def owner_part(key: bytes) -> bytes:
    return key.split(b":")[-1].split(b"}")[-1]


def keys_of(client: redis.Redis, owner: int) -> list[bytes]:
    """Every key whose owner part is ``owner`` (after the generation and tag)."""
    text = str(owner).encode()
    return sorted(k for k in client.scan_iter(f"*{owner}") if owner_part(k) == text)


def strangers(client: redis.Redis) -> list[bytes]:
    """Keys naming list L other than as -L (+L, "-(-L)", ...)."""
    return [k for k in client.scan_iter(f"*{L}") if owner_part(k) != str(LO).encode()]


def test_the_lua_owner_helpers_are_owners_py_s(redis_client: redis.Redis) -> None:
    """prefixes.lua's user_of and is_list against fanout.model.owners, on home,
    mentions and list owners up to 2**53 (exact as Lua numbers)."""
    rnd = random.Random(5)
    users = [1, 2, 7, owners.MAX_USER, *(rnd.randint(1, owners.MAX_USER) for _ in range(20))]
    lists = [owners.list_id(u, n) for u in users for n in (1, 2, owners.MAX_LIST_NUMBER)]
    samples = [*users, *(-u for u in users), *(owners.list_owner(x) for x in lists)]
    assert max(abs(o) for o in samples) < 2**53
    prefixes = resources.files("fanout.store").joinpath("lua", "prefixes.lua").read_text()
    script = prefixes + (
        "local out = {}\n"
        "for i = 1, nargs() do\n"
        "  out[i] = string.format('%.0f:%s', user_of(arg(i)), tostring(is_list(arg(i))))\n"
        "end\n"
        "return out\n"
    )
    got = redis_client.eval(script, 0, *keys.SCRIPT_PREFIXES, "", *samples)
    expected = [f"{owners.user_of(o)}:{str(owners.is_list(o)).lower()}" for o in samples]
    assert [g.decode() for g in got] == expected


def test_a_list_owners_own_entries_are_exempt_from_its_filter_and_its_replies_conditional() -> None:
    """In the batch's grouping: o's own repost in -L names no one (by 0) and its
    reply carries OWN; a member's are screened as usual; home is unchanged."""
    mutations = [
        Mutation(Op.ADD, (LO, OWNER), (100,), 0, 1, reposts=((100, 50, U),), actor=OWNER),
        Mutation(Op.ADD, (LO, OWNER), (101,), 0, 2, actor=OWNER, answers=((101, U),)),
        Mutation(Op.ADD, (LO, 5), (102,), 0, 3, reposts=((102, 51, U),), actor=M),
        Mutation(Op.ADD, (LO, 5), (103,), 0, 4, actor=M, answers=((103, U),)),
    ]
    ops, _ = group_by_timeline(mutations)
    by_owner: dict[int, list] = {}
    for op in ops:
        by_owner.setdefault(op.owner, []).append(op)
    (lst,) = by_owner[LO]
    assert lst.op is Op.ADD and lst.tweets == (100, 101, 102, 103)
    assert lst.reposts == ((100, 50, 0), (102, 51, U))
    assert lst.answers == ((101, U + OWN), (103, U))
    (home,) = by_owner[OWNER]
    assert home.reposts == ((100, 50, 0),) and home.answers == ()  # o's own: no condition
    (other,) = by_owner[5]
    assert other.reposts == ((102, 51, U),) and other.answers == ((103, U),)
    # The vectorised path (plain adds reaching each owner once): the same.
    ops, _ = group_by_timeline(mutations[:1])
    assert [(op.owner, op.reposts) for op in ops] == [
        (LO, ((100, 50, 0),)),
        (OWNER, ((100, 50, 0),)),
    ]


def test_a_list_keeps_its_owners_own_repost_and_reply_to_a_hidden_user(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    """-L hides U (its filter copy): o's repost of U's tweet stays, a member's
    goes; o's reply to U is aside (U not a member), never dropped, and shows
    once U is a member; a member's reply to U is dropped."""
    bodies = {t: BODY for t in range(50, 110)}
    store.apply(GEN, bodies, [Mutation(Op.FILTER, (LO,), (U,), 0, 1)])
    store.apply(
        GEN,
        {},
        [
            Mutation(Op.ADD, (LO,), (100,), 0, 2, reposts=((100, 50, U),), actor=OWNER),
            Mutation(Op.ADD, (LO,), (101,), 0, 3, reposts=((101, 51, U),), actor=M),
            Mutation(Op.ADD, (LO,), (102,), 0, 4, actor=OWNER, answers=((102, U),)),
            Mutation(Op.ADD, (LO,), (103,), 0, 5, actor=M, answers=((103, U),)),
            Mutation(Op.ADD, (LO,), (104,), 0, 6, actor=M),
        ],
    )
    assert ids(store, LO) == [104, 100]
    tag = store.shards.tag_of
    assert unpack_pairs(redis_client.get(keys.aside(GEN, LO, tag(LO))) or b"") == [(U, 102)]
    store.apply(GEN, {}, [Mutation(Op.FOLLOWED, (LO,), (), 0, 7, authors=(U,), actor=U)])
    assert ids(store, LO) == [104, 102, 100]
    assert unpack_pairs(redis_client.get(keys.shown_replies(GEN, LO, tag(LO))) or b"") == [(U, 102)]
    # o's home timeline has no filter here: nothing of this touched it.
    assert store.timeline(GEN, OWNER) is None


def test_a_lists_refill_keeps_its_owners_reply_to_a_hidden_user_aside(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    """A reset is the database's view (no screening): o's own reply to a
    hidden U comes with its answer (OWN or not) and goes aside, not away."""
    bodies = {t: BODY for t in range(90, 110)}
    store.apply(GEN, bodies, [Mutation(Op.FILTER, (LO,), (U,), 0, 1)])
    store.apply(
        GEN,
        {},
        [
            Mutation(
                Op.RESET,
                (LO,),
                (100, 101, 102),
                0,
                3,
                2,
                reposts=((100, 99, 0),),
                answers=((101, U), (102, U + OWN)),
            )
        ],
    )
    store.release_resets(GEN, 3)
    assert ids(store, LO) == [100]
    tag = store.shards.tag_of
    aside = unpack_pairs(redis_client.get(keys.aside(GEN, LO, tag(LO))) or b"")
    assert aside == [(U, 101), (U, 102)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_filter_on_a_list_empties_the_list_alone(
    request: pytest.FixtureRequest, layout: str
) -> None:
    """FILTER on -L empties and refills -L; no key of +L nor of -(-L) appears,
    and o's home timeline is untouched."""
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=5, slack=2, shards=shards)
    store.ensure_active_generation()
    store.apply(
        GEN, {t: BODY for t in (1, 2, 3)}, [Mutation(Op.ADD, (LO, OWNER), (1, 2, 3), 0, 1, actor=M)]
    )
    store.apply(GEN, {}, [Mutation(Op.FILTER, (LO,), (U,), 0, 2)])
    assert ids(store, LO) == [] and ids(store, OWNER) == [3, 2, 1]
    assert strangers(client) == []  # no "-(-L)" nor +L key
    assert store.take_refills(10) == [LO]
    assert client.get(keys.filters(GEN, LO, shards.tag_of(LO))) == U.to_bytes(8, "big")
    assert client.get(keys.filters(GEN, OWNER, shards.tag_of(OWNER))) is None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_dropped_list_waits_for_the_watermark_then_leaves_no_key(
    request: pytest.FixtureRequest, layout: str
) -> None:
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=5, slack=2, shards=shards)
    store.ensure_active_generation()
    tag = shards.tag_of(LO)
    store.apply(
        GEN,
        {t: BODY for t in range(1, 12)},
        [
            Mutation(Op.FILTER, (LO,), (99,), 0, 1),
            Mutation(Op.ADD, (LO,), (1, 2), 0, 2, reposts=((2, 1, U),), actor=M),
            Mutation(Op.ADD, (LO,), (3,), 0, 3, actor=M, answers=((3, U),)),
            Mutation(Op.PULL, (LO,), (), 0, 4, authors=(77,), actor=77),
            Mutation(Op.FOLLOWED, (LO,), (), 0, 5, authors=(M,), actor=M),
            Mutation(Op.ADD, (LO,), (4, 5), 0, 6, actor=M),
            Mutation(Op.RESET, (LO,), (6,), 0, 8, 7, (77,)),
            Mutation(Op.DROP, (LO,), (), 0, 9),
            # Later ones (reading no pulled author) go with the drop: one released
            # with it, one still waiting.
            Mutation(Op.RESET, (LO,), (7,), 0, 10, 9),
            Mutation(Op.RESET, (LO,), (8,), 0, 11, 9),
        ],
    )
    store.release_resets(GEN, 8)  # the reset, not the drop yet: its seq is 9
    assert ids(store, LO) == [6, 5, 4, 2]
    store.request_refill(LO)
    client.set(keys.regeneration(GEN, LO, tag), 1)
    before = keys_of(client, LO)
    assert {k.split(b":")[0] for k in before} == {
        b"tl",
        b"tr",
        b"tf",
        b"ta",
        b"pl",
        b"tx",
        b"starling",
    }
    assert store.pending_resets(GEN) == 3
    store.release_resets(GEN, 10)
    assert keys_of(client, LO) == [] and strangers(client) == []
    assert store.pending_resets(GEN) == 0
    assert store.take_refills(10) == []
    assert store.pulled_authors(LO) == ()


def test_the_idle_sweep_drops_lists_uncounted(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    other = owners.list_owner(owners.list_id(OWNER, 4))
    store.apply(GEN, {1: BODY}, [Mutation(Op.ADD, (OWNER, LO, other), (1,), 0, 1, actor=M)])
    store.claim_regeneration(GEN, other, window=600)  # being regenerated: stays
    assert store.drop_idle(GEN, [OWNER], lists=[LO, other]) == 1
    assert redis_client.get(timeline_key(GEN, LO)) == IDLE
    assert redis_client.get(timeline_key(GEN, OWNER)) == IDLE
    assert redis_client.get(timeline_key(GEN, other)) != IDLE
    assert redis_client.get(timeline_key(GEN, -LO)) is None  # no "-(-L)"
    assert store.drop_idle(GEN, [], lists=[LO]) == 0
    with pytest.raises(ValueError, match="not a list"):
        store.drop_idle(GEN, [], lists=[-OWNER])
    # A write to the tombstone is skipped; the read is cold.
    assert store.apply(GEN, {}, [Mutation(Op.ADD, (LO,), (1,), 0, 2, actor=M)]).skipped == 1
    assert store.read_page(LO, count=3, reader=OWNER).status == "cold"


def test_a_list_read_merges_its_pulled_members_screened_by_its_filter_but_for_its_owner(
    store: TimelineStore,
) -> None:
    """Read -L by o: the pulled members are -L's pulls; -L's filter screens the
    pulled lists, except o's own (o a pulled member of its list); the replies
    in them show only to members (tf of -L)."""
    bodies = {t: body(t) for t in range(1, 40)}
    o_list = ((20, 10, U), (21, 11, U))  # o's reposts of U's tweets
    m_list = ((30, 12, U),)  # a member's repost of U's tweet
    store.apply(
        GEN,
        bodies,
        [
            Mutation(
                Op.LIST,
                (OWNER,),
                (20, 21, 22, 23),
                reposts=o_list,
                actor=OWNER,
                answers=((22, U), (23, M)),
            ),
            Mutation(Op.LIST, (M,), (30, 31), reposts=m_list, actor=M),
            Mutation(Op.FILTER, (LO,), (U,), 0, 1),
            Mutation(Op.ADD, (LO,), (5,), 0, 2, actor=6),
            Mutation(Op.FOLLOWED, (LO,), (), 0, 3, authors=(M,), actor=M),
            Mutation(Op.PULL, (LO,), (), 0, 4, authors=(OWNER,), actor=OWNER),
            Mutation(Op.PULL, (LO,), (), 0, 5, authors=(M,), actor=M),
        ],
    )
    assert store.pulled_authors(LO) == (OWNER, M)
    page = store.read_page(LO, count=10, reader=OWNER)
    assert page.status == "ok"
    got = [t["id"] for t in orjson.loads(page.body)["tweets"]]
    # 21, 20: o's own reposts of U's tweets; 23: o's reply to member M; 22 (to U,
    # not a member) and 30 (M's repost of U's tweet) left out.
    assert got == [31, 23, 21, 20, 5]
