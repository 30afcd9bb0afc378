"""Spark settings an operator gives reach a real session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from feed.devstack import embedded
from spark.runtime.session import ROCKSDB


@pytest.mark.spark
def test_a_setting_in_pyspark_submit_args_reaches_the_session(tmp_path: Path) -> None:
    """A real session in its own process: the operator's ``--conf`` turns the UI
    on, which Starling's defaults turn off."""
    script = (
        "from spark.runtime.session import build_session\n"
        "s = build_session('local[1]', 'starling-conf-test')\n"
        "print(s.conf.get('spark.ui.enabled'), s.conf.get('spark.ui.port'), "
        "s.conf.get('spark.sql.streaming.stateStore.providerClass'))\n"
        "s.stop()\n"
    )
    port = embedded.free_port()
    env = {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.ui.enabled=true --conf spark.ui.port={port} "
        "pyspark-shell",
        "SPARK_CONF_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split()[-3:] == ["true", str(port), ROCKSDB], done.stderr[-2000:]


@pytest.mark.spark
def test_under_spark_submit_its_master_wins_over_the_one_starling_is_given(
    tmp_path: Path,
) -> None:
    """deploy/spark/submit.py's case: ``spark-submit --master`` decides where the
    session runs, and Starling's defaults follow it (one shuffle partition per core)."""
    import pyspark

    app = tmp_path / "app.py"
    app.write_text(
        "from spark.runtime.session import build_session\n"
        "s = build_session('local[2]', 'starling-submit-test')\n"
        "print('session', s.sparkContext.master, s.conf.get('spark.sql.shuffle.partitions'))\n"
        "s.stop()\n"
    )
    spark_home = Path(pyspark.__file__).parent
    done = subprocess.run(
        [
            str(spark_home / "bin" / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            str(app),
        ],
        env={**os.environ, "SPARK_HOME": str(spark_home), "SPARK_CONF_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "session local[1] 1" in done.stdout.splitlines(), done.stdout[-2000:]
