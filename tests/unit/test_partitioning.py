from collections import Counter

import pytest

from fanout.partitioning import murmur2, partition_for


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
