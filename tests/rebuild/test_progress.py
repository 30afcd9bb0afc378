"""The rebuild's progress lines, from real Spark jobs' tasks."""

from __future__ import annotations

import io
import re
import time

import pytest

from spark.rebuild.report import Progress

pytestmark = pytest.mark.spark


def slow(batches):  # each of 8 tasks takes ~0.4 s: ~1.6 s on 2 cores
    for batch in batches:
        time.sleep(0.4)
        yield batch


def test_long_stages_report_a_growing_share_and_the_time_left(spark) -> None:
    out = io.StringIO()
    progress = Progress(None, out)
    progress.watch(spark, every=0.3)
    try:
        progress.stage("reading", records=8000)
        df = spark.range(0, 8, numPartitions=8).mapInPandas(slow, "id long").cache()
        assert df.count() == 8  # the first Spark stage reads: counted in records
        progress.done("read")
        progress.stage("joining")  # a new job whose input is cached: its scan is skipped
        assert df.repartition(8).mapInPandas(slow, "id long").count() == 8
        progress.done("joined")
    finally:
        progress.close()
    text = out.getvalue()
    reading = text[: text.index("joining ...")].splitlines()
    joining = text[text.index("joining ...") :].splitlines()

    # While the scan runs: "NN%: about X of 8,000 records read"; after it, "all
    # 8,000 records read; Spark stage ...", the share of what runs next.
    reads = [line for line in reading if "records read" in line and "all 8,000" not in line]
    assert reads, reading
    assert any(re.search(r"about [\d,]+ of 8,000 records read, about \d+s left", r) for r in reads)
    shares = [int(m.group(1)) for line in reads if (m := re.search(r"(\d+)%", line))]
    assert shares == sorted(shares), reads  # never goes back

    stages = [line for line in joining if "Spark stage" in line]
    assert stages, joining
    assert all(re.search(r"Spark stage [\d, ]+: +\d+% of \d+ tasks", line) for line in stages)
    assert not any("records" in line for line in joining)
    after_scan = [line for line in reading if "all 8,000 records read; Spark stage" in line]
    assert all(re.search(r"Spark stage [\d, ]+: +\d+% of \d+ tasks", line) for line in after_scan)
