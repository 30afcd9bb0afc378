import itertools

from spark.source.offsets import OffsetRange, clamp_to_log, data_loss, limit_offsets, ranges

START = {"t": {"0": 10, "1": 0}, "f": {"0": 5}}
ENDS = {"t": {"0": 100, "1": 3}, "f": {"0": 5}}


def test_ranges_cover_only_partitions_with_new_records() -> None:
    assert ranges(START, ENDS) == [OffsetRange("t", 0, 10, 100), OffsetRange("t", 1, 0, 3)]


def test_limit_shares_the_budget_so_no_partition_starves() -> None:
    limited = limit_offsets(START, ENDS, 20)
    assert limited == {"t": {"0": 27, "1": 3}, "f": {"0": 5}}
    assert sum(limited["t"][p] - START["t"][p] for p in limited["t"]) == 20


def test_limit_larger_than_the_backlog_reads_everything() -> None:
    assert limit_offsets(START, ENDS, 10_000) == ENDS


def test_limit_counts_new_partitions_from_zero() -> None:
    assert limit_offsets({"t": {"0": 2}}, {"t": {"0": 4, "1": 9}}, 4) == {"t": {"0": 4, "1": 2}}


def test_data_loss_is_reported_per_partition() -> None:
    problems = data_loss({"t": {"0": 50, "1": 3}, "g": {"0": 1}}, {"t": {"0": 20, "1": 3}})
    assert problems == [
        "t/0: checkpoint at offset 50, log ends at 20",
        "g/0: partition no longer exists (was at offset 1)",
    ]
    assert clamp_to_log({"t": {"0": 50, "1": 3}}, {"t": {"0": 20, "1": 3}}) == {
        "t": {"0": 20, "1": 3}
    }


def test_split_ranges_cuts_evenly_and_covers_every_offset_once() -> None:
    from spark.source.offsets import split_ranges

    parts = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 500, 520), OffsetRange("f", 0, 7, 8)]
    for pieces in (0, 1, 3, 4, 10, 97, 5000):
        cut = split_ranges(parts, pieces)
        for original in parts:  # each range's pieces tile it exactly, in order
            own = [r for r in cut if (r.topic, r.partition) == (original.topic, original.partition)]
            assert own[0].start == original.start and own[-1].end == original.end
            assert all(a.end == b.start for a, b in itertools.pairwise(own))
            assert all(r.end > r.start for r in own)
        if pieces > len(parts):  # no piece longer than an even share of the 1,021 offsets
            assert max(r.end - r.start for r in cut) <= -(-1021 // pieces) < 1000
            assert len(cut) > len(parts)
        else:
            assert cut == parts
