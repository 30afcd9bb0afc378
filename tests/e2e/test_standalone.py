"""The fanout job and the rebuild on a Spark standalone cluster, submitted as
docs/deploy.md ("Running on a Spark cluster") says: a master and a worker
started from the pyspark distribution's ``spark-class``, Starling packed for
the executors by ``deploy/spark/package.py``, both applications started by
``spark-submit ... submit.py {job,rebuild}``. The worker runs with a bare
environment (no virtualenv, no Starling setting): its executors have only
what the recipe gives them. Every timeline is checked against the SQL
oracle after a random workload, and again after the rebuild."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest
import requests

from feed.devstack import embedded
from spark.runtime.session import LOG4J
from tests.support import postgres
from tests.support.oracle import Workload, check_against_oracle
from tests.support.rebuilds import corrupt, user_id
from tests.support.stack import BIN, ROOT, Stack, running_stack, stack_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
PACKAGE = ROOT / "deploy" / "spark" / "package.py"


class Clock:
    """Where the time went, phase by phase."""

    def __init__(self) -> None:
        self.started = self.mark = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases.append((phase, now - self.mark))
        self.mark = now

    def report(self) -> str:
        laps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phases)
        return f"{time.monotonic() - self.started:.0f}s: {laps}"


@dataclass
class Standalone:
    """A Spark standalone master and one worker, from the pyspark package."""

    root: Path
    port: int = field(default_factory=embedded.free_port)
    ui_port: int = field(default_factory=embedded.free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def start(self) -> None:
        java = shutil.which("java")
        assert java, "java is not on PATH"
        # Nothing of the test's environment: no virtualenv, no PYTHONPATH, no
        # Starling setting. The executors inherit this.
        env = {
            "PATH": f"{Path(java).resolve().parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.root / "local"),
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        if os.environ.get("JAVA_HOME"):
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        self.work.mkdir(parents=True)
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        deploy = "org.apache.spark.deploy"
        self._start(
            "master",
            env,
            spark_class,
            f"{deploy}.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        embedded.wait_for_port("127.0.0.1", self.port, 60, self.procs["master"])
        self._start(
            "worker",
            env,
            spark_class,
            f"{deploy}.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(embedded.free_port()),
            "--webui-port",
            str(embedded.free_port()),
            "--cores",
            "2",  # the job and a rebuild, one core each
            "--memory",
            "1g",
            "--work-dir",
            str(self.work),
            self.url,
        )

    def _start(self, name: str, env: dict[str, str], *command: str) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.procs[name] = subprocess.Popen(
            command, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT
        )

    def state(self) -> dict:
        return requests.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5).json()

    def wait_for_worker(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited; see {self.root / name}.log"
            try:
                if self.state()["aliveworkers"] == 1:
                    return
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"no worker registered in {timeout}s"
            time.sleep(0.5)

    def app(self, name: str) -> dict:
        """The (last) application named ``name`` the master knows, running or done."""
        state = self.state()
        apps = [a for a in state["activeapps"] + state["completedapps"] if a["name"] == name]
        assert apps, f"no application {name!r} on the master: {state}"
        return max(apps, key=lambda a: a["starttime"])

    def stop(self) -> None:
        for name in ("worker", "master"):  # the worker kills its executors
            proc = self.procs.pop(name, None)
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.rmtree(self.root / "local", ignore_errors=True)


def packed_interpreters(app_dir: Path) -> set[str]:
    """The interpreters (argv[0]) of the Python workers running in the
    application's executor directories."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # python -m pyspark.daemon (or pyspark.worker), not the executor's JVM
        if cwd.parent == app_dir and any(a.startswith(b"pyspark.") for a in argv):
            found.add(argv[0].decode())
    return found


def children(pid: int, marker: bytes) -> list[int]:
    """The processes started by ``pid`` whose command line has ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            argv = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and marker in argv:
            found.append(int(proc.name))
    return found


def assert_ran_from_the_package(cluster: Standalone, app_id: str) -> list[Path]:
    """Each executor of the application unpacked the archive in its directory,
    and that environment holds Starling (the worker has none)."""
    executors = [d for d in (cluster.work / app_id).iterdir() if d.is_dir()]
    assert executors, f"no executor ran for {app_id}"
    for executor in executors:
        environment = executor / "environment"
        assert (environment / "bin" / "python").exists(), f"{executor}: archive not unpacked"
        site = environment / "lib" / "python3.11" / "site-packages"
        assert (site / "spark" / "stream" / "job.py").is_file() and (site / "fanout").is_dir()
    return executors


@dataclass
class Cluster:
    stack: Stack
    standalone: Standalone
    submit: list[str]
    package: Path
    clock: Clock


@pytest.fixture(scope="module")
def cluster(
    kafka_bootstrap: str,
    redis_url: str,
    postgres_server: postgres.Postgres | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    clock = Clock()
    root = tmp_path_factory.mktemp("standalone")
    standalone = Standalone(root)
    package = root / "package"
    try:
        standalone.start()  # starts while the package is built
        subprocess.run(
            [str(BIN / "python"), str(PACKAGE), "--output", str(package)], cwd=ROOT, check=True
        )
        clock.lap("package")
        standalone.wait_for_worker()
        clock.lap("cluster")
        # The recipe of docs/deploy.md, with this machine's paths and small sizes.
        submit = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master",
            standalone.url,
            "--archives",
            f"{package / 'starling-env.tar.gz'}#environment",
            "--conf",
            "spark.pyspark.python=./environment/bin/python",
            "--conf",
            f"spark.pyspark.driver.python={BIN / 'python'}",
            "--conf",
            "spark.cores.max=1",
            "--conf",
            "spark.executor.memory=512m",
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{LOG4J}",
            str(package / "submit.py"),
        ]
        logs = root / "stack"
        logs.mkdir()
        url = stack_database(postgres_server, logs, "standalone")
        spark_env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        with running_stack(
            kafka_bootstrap,
            redis_url,
            logs,
            url,
            redis_db=6,
            submit=submit,
            submit_dir=package,
            extra_env=spark_env,
        ) as stack:
            clock.lap("stack")
            yield Cluster(stack, standalone, submit, package, clock)
    finally:
        mark = time.monotonic()
        standalone.stop()
        print(f"\nstandalone cluster stopped in {time.monotonic() - mark:.1f}s")


def test_the_job_and_the_rebuild_run_on_a_standalone_cluster_from_the_package(
    cluster: Cluster,
) -> None:
    stack, standalone, clock = cluster.stack, cluster.standalone, cluster.clock
    work = Workload(stack, random.Random(4040), prefix="sa")
    work.register(40)
    work.run(400)
    clock.lap("workload")
    stats = check_against_oracle(stack, sorted(work.users))  # waits for the job first
    assert stats["timelines"] == 40 and stats["at_the_cap"] > 0
    clock.lap("job caught up, oracle")

    job = standalone.app("starling-fanout")
    assert job["state"] == "RUNNING" and job["cores"] == 1, job
    executors = assert_ran_from_the_package(standalone, job["id"])
    running = set().union(*(packed_interpreters(e.parent) for e in executors))
    assert running == {"./environment/bin/python"}, running  # the packed one, nothing else

    # Damage a few timelines the way a fanout bug would; the rebuild repairs them.
    generation = stack.store.active_generation()
    bogus = next(iter(work.live))
    for name in sorted(work.users)[:5]:
        corrupt(stack, user_id(stack, name), bogus)
    rebuild = subprocess.run(
        # Not --json: spark-submit merges the driver's standard error into its
        # standard output, so progress and the document would share one stream.
        [*cluster.submit, "rebuild", "--wait", "240"],
        cwd=cluster.package,
        # An operator's settings: tests.support.settings is not importable from there.
        env={**stack.env, "DJANGO_SETTINGS_MODULE": "feed.settings"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert rebuild.returncode == 0, rebuild.stdout[-4000:] + rebuild.stderr[-4000:]
    assert "(active)" in rebuild.stdout, rebuild.stdout[-4000:]  # switched to
    took = re.search(r"^  took +([\d.]+)s$", rebuild.stdout, re.MULTILINE)
    assert took, rebuild.stdout[-4000:]
    clock.lap("rebuild")
    assert stack.store.active_generation() not in (None, generation)
    after = check_against_oracle(stack, sorted(work.users))
    assert after["timelines"] == 40
    app = standalone.app("starling-rebuild")
    assert app["state"] == "FINISHED", app
    assert_ran_from_the_package(standalone, app["id"])

    # The job goes on in the rebuilt generation, on the cluster.
    work.run(60)
    check_against_oracle(stack, sorted(work.users))
    assert stack.procs["fanout"].poll() is None
    clock.lap("after the rebuild, oracle")

    # Stopped as docs/deploy.md says: SIGTERM to the driver's Python process
    # stops it after the current micro-batch, and spark-submit exits with it.
    submitted = stack.procs["fanout"]
    (driver,) = children(submitted.pid, b"submit.py")
    os.kill(driver, signal.SIGTERM)
    assert submitted.wait(120) == 0
    clock.lap("stop")
    print(f"\nstandalone: {stats}; rebuild {took[1]}s; took {clock.report()}")
