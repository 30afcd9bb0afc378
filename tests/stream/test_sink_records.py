"""How the sink sizes a micro-batch (its path: shuffled by owner or not) from
the checkpoint's offset log."""

from __future__ import annotations

import json
from pathlib import Path

from fanout.config import StarlingConfig
from spark.stream.sink import FanoutSink


def planned(checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    """The offset log's entry of ``batch``, as Spark writes it."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offsets)}\n")


def test_a_micro_batch_reads_the_records_between_its_offsets_and_the_last(tmp_path: Path) -> None:
    sink = FanoutSink(StarlingConfig(), 1, tmp_path, routes=(0,))
    planned(tmp_path, 4, {"t": {"0": 100, "1": 50}, "f": {"0": 7}})
    planned(tmp_path, 5, {"t": {"0": 130, "1": 50}, "f": {"0": 9, "1": 4}})
    assert sink._records(5, {"t": {"0": 130, "1": 50}, "f": {"0": 9, "1": 4}}) == 30 + 2 + 4
    assert sink._records(0, {"t": {"0": 10}}) is None  # no batch before: the whole log
    assert sink._records(7, {"t": {"0": 10}}) is None  # the previous entry is gone
    assert sink._records(5, None) is None
