"""Bundles and their routing to the sink's partitions (spark.stream.bundles): pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.model.join import Mutation, Op
from spark.stream.bundles import Bundle, decode_bundle, encode_bundle, owner_part, split


def test_bundles_round_trip() -> None:
    bundle = Bundle(
        seq=3,
        ts=9,
        ignored=1,
        bodies={5: b'{"id":5}'},
        mutations=[
            Mutation(Op.REMOVE, (1, 2), (5,), 0, 4),
            Mutation(Op.ADD, (3,), (), 7),
            Mutation(Op.ADD, (3,), (6, 9), 6, reposts=((9, 5, 11),), actor=12, answers=((6, 4),)),
            Mutation(Op.FOLLOWED, (3,), (), 0, 8, authors=(12,), actor=12),
            Mutation(Op.PULL, (3,), (), 0, 8, authors=(12,), actor=12, quiet=True),
            Mutation(Op.FILTER, (3,), (11, 13), 0, 9),
        ],
        dead_letters=[{"topic": "t", "partition": 0, "offset": 1, "error": "x"}],
        marks={"p.tweets/0": 12},
        counts={5: (3, 1, 2), 6: (0, 0, 0)},
    )
    assert decode_bundle(encode_bundle(bundle)) == bundle


def test_the_first_bundle_carries_everything_but_the_timelines() -> None:
    out = Bundle(
        seq=8,
        ts=99,
        ignored=2,
        bodies={100: b"{}"},
        mutations=[
            Mutation(Op.LIST, (7,), (100,), 0),
            Mutation(Op.ADD, (1, 2, 3), (100,), 0, 8),
            Mutation(Op.DELETE_BODY, (), (90,)),
            Mutation(Op.REMOVE, (2,), (90,)),
        ],
        dead_letters=[{"error": "x"}],
        marks={"t/0": 4},
    )
    first, (even, odd) = split(out, 2)
    assert (first.seq, first.ts, first.ignored, first.bodies) == (8, 99, 2, {100: b"{}"})
    assert first.dead_letters == [{"error": "x"}] and first.marks == {"t/0": 4}
    assert first.mutations == [
        Mutation(Op.LIST, (7,), (100,), 0),
        Mutation(Op.DELETE_BODY, (), (90,)),
    ]
    assert even == Bundle(
        mutations=[Mutation(Op.ADD, (2,), (100,), 0, 8), Mutation(Op.REMOVE, (2,), (90,))]
    )
    assert odd == Bundle(mutations=[Mutation(Op.ADD, (1, 3), (100,), 0, 8)])


def test_one_partition_takes_every_timeline_mutation_whole() -> None:
    add = Mutation(Op.ADD, (1, 2, 3), (100,), 0, 8)
    pull = Mutation(Op.PULL, (), (), 0, 9, authors=(4,))  # an author without followers
    first, (only,) = split(Bundle(mutations=[add, pull]), 1)
    assert first.mutations == [] and only.mutations == [add, pull]


owners = st.lists(st.integers(1, 40), min_size=0, max_size=6, unique=True).map(
    lambda o: tuple(sorted(o))
)
timeline_mutations = st.builds(
    Mutation,
    st.sampled_from([Op.ADD, Op.REMOVE, Op.RESET, Op.PULL, Op.UNPULL]),
    owners,
    st.lists(st.integers(1, 99), max_size=3).map(lambda t: tuple(sorted(set(t)))),
    st.integers(0, 5),
    st.integers(0, 50),
)


@given(st.lists(timeline_mutations, max_size=12), st.integers(1, 4))
def test_every_owner_sees_its_mutations_in_order_in_its_partition_only(
    mutations: list[Mutation], parts: int
) -> None:
    """What the store's grouping relies on: per owner, the same sequence of
    mutations (owners aside) as before the split, all in the owner's partition."""

    def per_owner(ms: list[Mutation]) -> dict[int, list[tuple[object, ...]]]:
        seen: dict[int, list[tuple[object, ...]]] = {}
        for m in ms:
            for o in m.owners:
                seen.setdefault(o, []).append((m.op, m.tweets, m.horizon, m.seq))
        return seen

    _, timelines = split(Bundle(mutations=mutations), parts)
    assert len(timelines) == parts
    expected = per_owner([m for m in mutations if len(m.owners) > 0])
    got: dict[int, list[tuple[object, ...]]] = {}
    for part, bundle in enumerate(timelines):
        for owner, ops in per_owner(bundle.mutations).items():
            assert owner_part(owner, parts) == part
            got[owner] = ops
    assert got == expected
