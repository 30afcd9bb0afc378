"""Redis's SLOWLOG read for bench_heavy: each entry, the script a call ran
(named after its Lua file) with the commands it ran counted as part of it,
and the phases' slowest commands."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

from fanout.store.scripts import PARTS, source
from load_tests.fanout_rig import Job

#: The name of the benchmark's own connections: their commands are not measured.
BENCH_CLIENT = "bench_heavy"
_MORE_BYTES = re.compile(rb"\.\.\. \((\d+) more bytes\)$")


_MORE_ARGS = re.compile(rb"^\.\.\. \((\d+) more arguments\)$")


#: Redis keeps this many bytes of a long argument in the SLOWLOG (SLOWLOG_ENTRY_MAX_STRING).
_KEPT_BYTES = 128


@dataclass(frozen=True)
class Entry:
    """One SLOWLOG entry: a command and how long Redis spent executing it."""

    id: int
    micros: int
    args: tuple[bytes, ...]
    addr: str
    client: str
    #: A script call: the commands it ran, as Redis 7.0 logs them (just before
    #: the call, from the scripting client ``?:0``; nothing else runs meanwhile).
    inner: tuple[Entry, ...] = ()

    @property
    def ms(self) -> float:
        return self.micros / 1000

    @property
    def from_script(self) -> bool:
        """Run by a script (its time is part of the script call's)."""
        return self.addr.startswith("?")

    @property
    def name(self) -> str:
        """``GET``, ``EVALSHA apply`` ...: the command, and for a script its file."""
        if not self.args:
            return "?"
        name = self.args[0].decode(errors="replace").upper()
        if name in ("EVALSHA", "EVALSHA_RO") and len(self.args) > 1:
            return f"{name} {SCRIPTS.get(self.args[1].decode(errors='replace'), '?')}"
        if name in ("FCALL", "FCALL_RO") and len(self.args) > 1:
            return f"{name} {self.args[1].decode(errors='replace')}"
        return name

    @property
    def is_script(self) -> bool:
        return self.name.split(" ")[0] in ("EVAL", "EVAL_RO", "EVALSHA", "EVALSHA_RO", "FCALL")

    def argc(self) -> int:
        """How many arguments the command had (Redis keeps 32 at most)."""
        if self.args and (m := _MORE_ARGS.match(self.args[-1])):
            return len(self.args) - 1 + int(m.group(1))
        return len(self.args)

    def largest_arg(self) -> int:
        """The size in bytes of the longest argument kept (Redis keeps 128 bytes of
        each and says how many more there were)."""
        largest = 0
        for arg in self.args:
            m = _MORE_BYTES.search(arg)
            size = _KEPT_BYTES + int(m.group(1)) if m and len(arg) > _KEPT_BYTES else len(arg)
            largest = max(largest, size)
        return largest

    def inside(self, top: int = 3) -> str:
        """The commands a script call ran, most frequent first."""
        counts = Counter(e.name for e in self.inner)
        shown = ", ".join(f"{n:,} {name}" for name, n in counts.most_common(top))
        return f"{len(self.inner):,} commands inside ({shown})" if counts else "no commands"

    def describe(self) -> str:
        """The entry in one line."""
        text = (
            f"{self.name}: {self.ms:.2f} ms, {self.argc():,} args, largest "
            f"{self.largest_arg():,} bytes, client {self.client or '(unnamed)'} {self.addr}"
        )
        return f"{text}; {self.inside()}" if self.is_script else text


SCRIPTS = {hashlib.sha1(source(n).text.encode()).hexdigest(): n for n in PARTS}  # noqa: S324


class Slowlog:
    """Every command Redis runs, read in phases (``SLOWLOG GET -1``, then ``RESET``).

    SLOWLOG ids keep counting across a reset, and the ``GET`` is logged after
    it ran (the reset removes it): an id gap larger than that one entry is
    entries logged between a read and its reset, counted as ``lost``."""

    def __init__(self, client: redis.Redis, max_len: int) -> None:
        self.client = client
        self.client.set_response_callback("SLOWLOG GET", lambda r, **_: r)  # raw arguments
        self.client.config_set("slowlog-max-len", max_len)
        self.client.slowlog_reset()
        self.last_id = -1

    def log_slower_than(self, micros: int) -> None:
        """Log the commands that take at least ``micros`` (0: every command)."""
        self.client.config_set("slowlog-log-slower-than", micros)

    def drain(self) -> tuple[list[Entry], int]:
        """The top-level commands logged since the last drain, oldest first (a
        script call holding the commands it ran), and how many were lost."""
        raw = self.client.execute_command("SLOWLOG GET", -1)
        self.client.slowlog_reset()
        out: list[Entry] = []
        pending: list[Entry] = []
        ids: list[int] = []
        for item in reversed(raw):
            addr, name = (item[4], item[5]) if len(item) > 5 else (b"", b"")
            entry = Entry(
                int(item[0]),
                int(item[2]),
                tuple(bytes(a) for a in item[3]),
                addr.decode() if isinstance(addr, bytes) else str(addr),
                name.decode() if isinstance(name, bytes) else str(name),
            )
            ids.append(entry.id)
            if entry.from_script:
                pending.append(entry)
                continue
            if pending and entry.is_script:
                entry = dataclasses.replace(entry, inner=tuple(pending))
            pending = []
            out.append(entry)
        lost = 0
        if ids and self.last_id >= 0:
            lost = max(0, ids[0] - self.last_id - 2)
        if ids:
            self.last_id = ids[-1]
        return out, lost


@dataclass
class Phase:
    name: str
    entries: list[Entry]  # top-level commands, oldest first
    lost: int
    started: float  # wall clock
    seconds: float
    #: Only commands of at least this many microseconds were logged (0: all).
    threshold_us: int = 0

    @property
    def measured(self) -> list[Entry]:
        """What the job and the web tier sent (the benchmark's own commands left out)."""
        return [e for e in self.entries if e.client != BENCH_CLIENT]

    def slowest(self) -> Entry | None:
        return max(self.measured, key=lambda e: e.micros, default=None)

    def over(self, bound_ms: float) -> list[Entry]:
        return sorted(
            (e for e in self.measured if e.ms > bound_ms), key=lambda e: e.micros, reverse=True
        )

    def batches(self, job: Job) -> list[dict[str, Any]]:
        """The job's micro-batches that finished during the phase."""
        return [b for b in job.batches(self.started) if b["at"] <= self.started + self.seconds]
