"""Starling's Spark settings are defaults: what an operator gives Spark wins."""

from __future__ import annotations

import sys
from pathlib import Path

from spark.runtime import jvm_archive
from spark.runtime.session import TUNING, given_settings, session_settings
from spark.runtime.worker_daemon import installed_zips


def test_spark_defaults_conf_and_submit_args_are_given_settings(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# a comment\nspark.ui.enabled   true\n\nspark.ui.port 4050\n"
    )
    env = {
        "SPARK_CONF_DIR": str(tmp_path),
        "PYSPARK_SUBMIT_ARGS": "--conf spark.cores.max=2 -c spark.sql.shuffle.partitions=8 "
        "--name x pyspark-shell",
    }
    assert given_settings(env) == {
        "spark.ui.enabled",
        "spark.ui.port",
        "spark.cores.max",
        "spark.sql.shuffle.partitions",
    }
    assert given_settings({"SPARK_HOME": str(tmp_path / "nowhere")}) == set()


def test_given_settings_are_not_overridden_and_the_callers_are() -> None:
    settings = session_settings(
        "local[2]",
        {"spark.sql.session.timeZone": "UTC"},
        {"spark.ui.enabled", "spark.sql.shuffle.partitions"},
    )
    assert "spark.ui.enabled" not in settings and "spark.sql.shuffle.partitions" not in settings
    assert (
        settings["spark.sql.streaming.stateStore.providerClass"]
        == TUNING["spark.sql.streaming.stateStore.providerClass"]
    )
    assert session_settings("local[2]", {}, set())["spark.sql.shuffle.partitions"] == "2"
    # The caller's own settings (the tests', say) always apply.
    assert (
        session_settings("local[2]", {"spark.ui.enabled": "false"}, {"spark.ui.enabled"})[
            "spark.ui.enabled"
        ]
        == "false"
    )


def test_local_workers_start_from_the_daemon_that_skips_sparks_zip() -> None:
    assert session_settings("local[2]", {}, set())["spark.python.daemon.module"] == (
        "spark.runtime.worker_daemon"
    )
    # A cluster's executors keep Spark's own daemon: they may not have Starling.
    assert "spark.python.daemon.module" not in session_settings("spark://m:7077", {}, set())
    # An operator's choice wins, as for every default.
    given = session_settings("local[2]", {}, {"spark.python.daemon.module"})
    assert "spark.python.daemon.module" not in given


def test_only_zips_inside_the_installed_pyspark_are_moved(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "pyspark"
    own = package / "python" / "lib"
    own.mkdir(parents=True)
    other = tmp_path / "opt" / "spark" / "python" / "lib"
    path = [
        str(own / "pyspark.zip"),
        str(own / "py4j-0.10.9.9-src.zip"),
        str(other / "pyspark.zip"),  # another Spark's: maybe another version
        str(tmp_path / "site-packages"),
    ]
    assert installed_zips(path, package.resolve()) == path[:2]
    assert installed_zips(path, None) == []


def test_the_jvm_starts_from_the_class_archive_when_there_is_one(
    tmp_path: Path, monkeypatch
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(jvm_archive.ENV, str(archive))
    options = session_settings("local[2]", {}, set())["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in options and "log4j2.configurationFile" in options
    archive.write_bytes(b"an archive")  # the JVM checks it, and ignores one that does not fit
    options = session_settings("local[2]", {}, set())["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={archive}" in options and "log4j2.configurationFile" in options
    # An operator's Java options replace Starling's, the archive included.
    given = session_settings("local[2]", {}, {"spark.driver.extraJavaOptions"})
    assert "spark.driver.extraJavaOptions" not in given


def test_the_class_archive_lives_beside_the_environment_unless_told_otherwise() -> None:
    assert jvm_archive.archive_path({}) == Path(sys.prefix) / "starling-spark.jsa"
    assert jvm_archive.archive_path({jvm_archive.ENV: "/x/y.jsa"}) == Path("/x/y.jsa")
    assert jvm_archive.archive_path({jvm_archive.ENV: ""}) is None  # turned off
    assert jvm_archive.java_options({jvm_archive.ENV: ""}) == ""
