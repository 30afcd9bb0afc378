from spark.kafka_source import OffsetRange, clamp_to_log, data_loss, limit_offsets, ranges

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
