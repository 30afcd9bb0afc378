from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.model.partitioning import murmur2, partition_for, partitions_of


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Kafka's UtilsTest#testMurmur2 vectors.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_in_range_and_stable() -> None:
    for key in range(1, 2000):
        p = partition_for(key, 7)
        assert 0 <= p < 7
        assert p == partition_for(key, 7)


def test_sequential_user_ids_spread_over_partitions() -> None:
    counts = Counter(partition_for(user_id, 8) for user_id in range(1, 8001))
    assert len(counts) == 8
    assert max(counts.values()) < 1.2 * min(counts.values())


def test_single_partition() -> None:
    assert {partition_for(k, 1) for k in range(100)} == {0}
    with pytest.raises(ValueError):
        partition_for(1, 0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(-(10**6), 2**63 - 1), max_size=200),
    st.integers(1, 64),
)
def test_the_vectorised_partitions_are_partition_for(keys: list[int], partitions: int) -> None:
    keys += [0, 1, 9, 10, 999, 1000, 10**15, 10**16 - 1, 2**53]
    got = partitions_of(np.array(keys, dtype=np.int64), partitions)
    assert got.tolist() == [partition_for(k, partitions) for k in keys]
