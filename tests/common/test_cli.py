"""``--json`` commands print one document on standard output, whatever the
process and its children print meanwhile, and also when stopped by a signal."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

PROGRAM = r"""
import json, subprocess, sys, time
from fanout.cli import interruptible, machine_output

with machine_output() as data, interruptible():
    print("a progress line")
    sys.stdout.write("more chatter\n")
    # A child started meanwhile (as Spark's JVM and workers are), still printing
    # after the document is out.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3); print('late child')"])
    try:
        if "--hang" in sys.argv:
            print("ready", file=sys.stderr, flush=True)
            time.sleep(60)
        json.dump({"ok": True}, data)
    except KeyboardInterrupt as exc:
        json.dump({"ok": False, "error": str(exc)}, data)
print("after the block")
time.sleep(0.5)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, timeout=30
    )


def test_stdout_holds_only_the_document() -> None:
    done = run()
    assert json.loads(done.stdout.removesuffix("after the block\n")) == {"ok": True}
    assert "a progress line" in done.stderr and "more chatter" in done.stderr
    assert "late child" in done.stderr and "late child" not in done.stdout


def test_a_command_stopped_by_sigterm_still_prints_a_whole_document() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, "--hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    while proc.stderr.readline().strip() != "ready":
        pass
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    doc = json.loads(out.removesuffix("after the block\n"))
    assert doc == {"ok": False, "error": "stopped by signal 15"}
