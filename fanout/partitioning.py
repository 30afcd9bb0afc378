"""The one partition function both changelog topics use.

A tweet is partitioned by its author and a follow by its followee: the join
key. Because both topics use this function with the same partition count,
partition ``p`` of ``tweets`` and partition ``p`` of ``follows`` hold the
same authors (co-partitioning), the property a partition-local join needs.

The hash is Kafka's own default partitioner (murmur2 of the key bytes,
made positive, modulo the partition count) applied to the join key written
as decimal ASCII, so a Java or Kafka Streams client keying records by the
join key would choose the same partitions.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    base = n4 * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(join_key: int, partitions: int) -> int:
    """Partition of a record whose join key (author / followee id) is ``join_key``."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return (murmur2(str(join_key).encode("ascii")) & 0x7FFFFFFF) % partitions
