"""per_process: one instance per process, a fresh one after a fork, and the
parent's never destroyed in the child (a fork before exec must not run a
Kafka client's destructor: it crashed the child)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fanout.procs import per_process


class Probe:
    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.pid = os.getpid()

    def __del__(self) -> None:
        if os.getpid() != self.pid:  # destroyed in a forked child
            self.marker.write_text("destroyed in the child")


def test_one_instance_per_process_and_argument(tmp_path: Path) -> None:
    make = per_process(lambda name: Probe(tmp_path / name))
    assert make("a") is make("a") and make("a") is not make("b")
    parent = make("a")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new instance, the parent's left alone
        child = make("a")
        os.write(write, b"new" if child is not parent and child.pid == os.getpid() else b"old")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 3) == b"new"


def test_a_fork_before_exec_destroys_nothing(tmp_path: Path) -> None:
    make = per_process(lambda: Probe(tmp_path / "marker"))
    make()
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)
    assert not (tmp_path / "marker").exists()
