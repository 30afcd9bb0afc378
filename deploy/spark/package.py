"""Pack Starling for the executors of a Spark cluster that does not have it.

    python deploy/spark/package.py [--output build/spark] [--python PYTHON]

Builds a fresh virtual environment holding Starling and the packages its
executors import, at the versions of ``requirements.lock``, packs it with
venv-pack into ``<output>/starling-env.tar.gz`` and copies the entry file
``submit.py`` beside it. ``spark-submit --archives
starling-env.tar.gz#environment --conf spark.pyspark.python=./environment/bin/python``
unpacks it in every executor's working directory and runs its Python
workers with it (docs/deploy.md, "Running on a Spark cluster").

Left out on purpose: pyspark and py4j (the cluster's Spark gives every Python
worker its own ``pyspark.zip`` and py4j, which is why the cluster must run the
driver's Spark version), and what only the driver runs (Django, Celery, the
web server). venv-pack does not copy the interpreter: the environment's
``bin/python`` links to the base Python 3.11 it was built from (``--python``),
which must exist at the same path on every worker. (venv-pack 0.2.0's own
``--python-prefix`` relinks it to a wrong name for Python 3.10 and later, so
it is not offered: build with the workers' interpreter path instead.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "starling-env.tar.gz"
ENTRY = Path(__file__).with_name("submit.py")

#: What the executors import besides Starling (spark/, fanout/): the Kafka
#: source's client, the Redis sink's, the stored forms, Arrow batches (and the
#: rebuild's NumPy views of them), and the protobuf messages of
#: transformWithState's state server. Pinned by the lock.
EXECUTOR_REQUIREMENTS = (
    "confluent-kafka",
    "redis[hiredis]",
    "orjson",
    "pyarrow",
    "numpy",
    "pandas",
    "protobuf",
)

#: The modules an executor's Python worker loads; imported once as a check.
EXECUTOR_MODULES = (
    "spark.source.kafka_io",
    "spark.source.datasource",
    "spark.stream.operator",
    "spark.stream.sink",
    "spark.rebuild.tasks",
    "fanout.store.timelines",
    "pyspark.sql.streaming.stateful_processor_api_client",
)

#: What pip builds Starling's wheel from (pyproject.toml's packages).
SOURCES = ("pyproject.toml", "README.md", "feed", "fanout", "spark", "load_tests")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="deploy/spark/package.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--output", type=Path, default=ROOT / "build" / "spark", help="directory (build/spark)"
    )
    p.add_argument(
        "--python",
        default=getattr(sys, "_base_executable", sys.executable),
        help="the Python 3.11 the environment links to, at the path it has on the workers "
        "(default: the base interpreter of this one)",
    )
    p.add_argument(
        "--compress-level", type=int, default=1, help="gzip level (default 1: fast, ~10%% larger)"
    )
    return p.parse_args(argv)


def _run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    subprocess.run([str(c) for c in command], check=True, env=env)  # noqa: S603 - our own


def spark_python_path() -> str:
    """The PYTHONPATH Spark gives a Python worker: its pyspark.zip and py4j."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return os.pathsep.join(str(p) for p in sorted(lib.glob("*.zip")))


def build(args: argparse.Namespace) -> Path:
    output: Path = args.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    env = output / "environment"
    shutil.rmtree(env, ignore_errors=True)
    timings: dict[str, float] = {}
    started = time.monotonic()
    _run(
        args.python,
        "-c",
        "import sys; assert sys.version_info[:2] == (3, 11), 'not Python 3.11: ' + sys.version",
    )
    _run(args.python, "-m", "venv", "--without-pip", env)
    pip = (sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install")
    quiet = {**os.environ, "PYTHONWARNINGS": "ignore"}  # setuptools' deprecation notices
    lock = ROOT / "requirements.lock"
    _run(*pip, "--quiet", "-c", lock, *EXECUTOR_REQUIREMENTS, env=quiet)
    # Starling from a copy of its sources: an in-tree build would leave build/lib
    # behind, whose stale modules a later package would ship.
    with tempfile.TemporaryDirectory(prefix="starling-src-") as tmp:
        for name in SOURCES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(
                    source, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(source, Path(tmp) / name)
        _run(*pip, "--quiet", "--no-deps", tmp, env=quiet)
    timings["install"] = time.monotonic() - started

    mark = time.monotonic()
    check = {**os.environ, "PYTHONPATH": spark_python_path(), "PYTHONNOUSERSITE": "1"}
    check.pop("VIRTUAL_ENV", None)
    _run(
        env / "bin" / "python",
        "-P",  # not the current directory: the environment's Starling only
        "-c",
        "import importlib\n"
        f"for name in {EXECUTOR_MODULES!r}: importlib.import_module(name)\n"
        "import spark\n"
        f"assert spark.__file__.startswith({str(env)!r}), spark.__file__\n",
        env=check,
    )
    timings["check"] = time.monotonic() - mark

    import venv_pack

    mark = time.monotonic()
    archive = output / ARCHIVE
    venv_pack.pack(
        prefix=str(env),
        output=str(archive),
        force=True,
        compress_level=args.compress_level,
    )
    archive.chmod(0o644)
    shutil.copy2(ENTRY, output / ENTRY.name)
    timings["pack"] = time.monotonic() - mark
    interpreter = os.path.realpath(env / "bin" / "python")
    print(
        f"{output}: {ARCHIVE} ({archive.stat().st_size / 2**20:.0f} MiB), {env.name}/ (the "
        f"same, unpacked: run spark-submit here) and {ENTRY.name}\n"
        f"  took {time.monotonic() - started:.1f}s "
        f"({', '.join(f'{k} {v:.1f}s' for k, v in timings.items())})\n"
        f"  the workers need {interpreter} and Spark {_spark_version()}"
    )
    return archive


def _spark_version() -> str:
    import pyspark

    return pyspark.__version__


def main(argv: list[str] | None = None) -> int:
    build(_parse(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
