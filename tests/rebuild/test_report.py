"""The rebuild's progress lines (spark.rebuild.report.estimate)."""

from spark.rebuild.report import estimate


def test_progress_counts_records_and_projects_the_time_left() -> None:
    assert estimate(0, 0, 5.0) is None  # no Spark job yet: nothing to say
    assert estimate(0, 30, 5.0) == "  0% of 30 tasks, time left unknown yet"
    assert estimate(10, 40, 20.0) == " 25% of 40 tasks, about 60s left"
    line = estimate(15, 30, 12.0, records=3_000_000)
    assert line == " 50%: about 1,500,000 of 3,000,000 records read, about 12s left"
    assert estimate(30, 30, 9.0, records=10) == "100%: about 10 of 10 records read, about 0s left"


def test_a_counted_read_says_how_many_records_exactly() -> None:
    line = estimate(1_200_000, 3_000_000, 8.0, counted=True)
    assert line == " 40%: 1,200,000 of 3,000,000 records read, about 12s left"
    assert estimate(0, 3_000_000, 2.0, counted=True) == (
        "  0%: 0 of 3,000,000 records read, time left unknown yet"
    )


def test_a_failure_is_reported_by_its_first_line_a_jvm_error_by_its_java_one() -> None:
    from spark.rebuild.finish import reason_of

    assert reason_of(RuntimeError("no room\nmore detail")) == "no room"
    assert reason_of(KeyboardInterrupt()) == "KeyboardInterrupt"
    jvm = RuntimeError(
        "An error occurred while calling o349.parquet.\n"
        ": java.io.IOException: Mkdirs failed to create /x/gen-3/state\n"
        "\tat org.apache.hadoop.fs.ChecksumFileSystem.create(ChecksumFileSystem.java:1)\n"
    )
    assert reason_of(jvm) == (
        "An error occurred while calling o349.parquet. "
        "java.io.IOException: Mkdirs failed to create /x/gen-3/state"
    )
    task = RuntimeError(  # PySpark's PythonException, as str() gives it
        "An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n"
        '  File "/x/spark/rebuild_tasks.py", line 97, in join\n'
        '    owners = batch.column("owner").to_numpy()\n'
        "pyarrow.lib.ArrowInvalid: Needed to copy 1 chunks with 22 nulls\n"
        "second line of the message"
    )
    assert reason_of(task) == (
        "An exception was thrown from the Python worker: "
        "pyarrow.lib.ArrowInvalid: Needed to copy 1 chunks with 22 nulls"
    )
    bare = RuntimeError("An exception was thrown from the Python worker:\nno traceback")
    assert reason_of(bare) == "An exception was thrown from the Python worker:"
