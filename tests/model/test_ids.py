from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fanout.model import ids


class FakeClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


T0 = ids.EPOCH_MS + 1_000_000


def test_layout_round_trips_time_and_fields() -> None:
    id_ = ids.compose(T0, node=5, sequence=9)
    assert ids.timestamp_ms(id_) == T0
    assert (id_ >> ids.SEQUENCE_BITS) & ids.MAX_NODE == 5
    assert id_ & ids.MAX_SEQUENCE == 9


def test_ids_fit_53_bits_until_2095() -> None:
    last_ms = ids.EPOCH_MS + (1 << ids.TIME_BITS) - 1
    biggest = ids.compose(last_ms, ids.MAX_NODE, ids.MAX_SEQUENCE)
    assert biggest == ids.MAX_ID == 2**53 - 1
    assert float(biggest) == biggest  # exact as a double (Redis score, JSON number)
    assert datetime.fromtimestamp(last_ms / 1000, tz=UTC).year == 2095
    with pytest.raises(ValueError):
        ids.compose(last_ms + 1, 0, 0)


def test_generator_is_strictly_increasing_within_a_millisecond() -> None:
    gen = ids.IdGenerator(node=3, clock=FakeClock(T0))
    minted = [gen.next_id() for _ in range(ids.MAX_SEQUENCE + 1)]
    assert minted == sorted(set(minted))
    assert all(ids.timestamp_ms(i) == T0 for i in minted)


def test_sequence_overflow_waits_for_the_next_millisecond() -> None:
    calls = 0

    def clock() -> int:
        nonlocal calls
        calls += 1
        return T0 if calls <= ids.MAX_SEQUENCE + 3 else T0 + 1

    gen = ids.IdGenerator(node=0, clock=clock)
    minted = [gen.next_id() for _ in range(ids.MAX_SEQUENCE + 2)]
    assert [ids.timestamp_ms(i) for i in minted[-2:]] == [T0, T0 + 1]
    assert minted == sorted(set(minted))


def test_clock_going_backwards_never_repeats_ids() -> None:
    clock = FakeClock(T0)
    gen = ids.IdGenerator(node=1, clock=clock)
    first = gen.next_id()
    clock.ms = T0 - 5_000
    second = gen.next_id()
    assert second > first


def test_ids_sort_by_time_across_nodes() -> None:
    early = ids.IdGenerator(node=31, clock=FakeClock(T0)).next_id()
    late = ids.IdGenerator(node=0, clock=FakeClock(T0 + 1)).next_id()
    assert early < late


def test_two_nodes_in_the_same_millisecond_do_not_collide() -> None:
    a = ids.IdGenerator(node=1, clock=FakeClock(T0))
    b = ids.IdGenerator(node=2, clock=FakeClock(T0))
    assert {a.next_id() for _ in range(50)}.isdisjoint({b.next_id() for _ in range(50)})


@pytest.mark.parametrize("value", [0, -1, 2**53, True, "12", 1.5])
def test_is_valid_rejects_non_ids(value: object) -> None:
    assert not ids.is_valid(value)
