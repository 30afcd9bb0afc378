"""The embedded default: the whole stack on a SQLite file, as ``make run``
runs it. The rest of the suite runs on PostgreSQL; this keeps the database
``make run`` uses covered end to end."""

from __future__ import annotations

import random

import pytest

from tests.faults.test_faults import assert_locked_database_refuses_writes_and_serves_reads
from tests.support.oracle import Workload, check_against_oracle
from tests.support.stack import Stack

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def test_on_sqlite_a_random_workload_matches_the_sql_join(sqlite_stack: Stack) -> None:
    assert not sqlite_stack.on_postgres
    work = Workload(sqlite_stack, random.Random(2027), prefix="sq", suspensions=0.02)
    work.register(60)
    work.run(800)
    assert min(work.counts.values()) > 20
    sqlite_stack.wait_for_seq(work.max_seq)
    stats = check_against_oracle(sqlite_stack, sorted(work.users))
    assert stats["timelines"] == len(work.users) == 61  # and the moderator
    assert work.moderated.get("suspend", 0) > 0
    print(f"\nSQLite oracle check: {stats}, writes {work.counts}, {work.moderated}")


def test_on_sqlite_a_locked_database_refuses_writes_and_serves_reads(sqlite_stack: Stack) -> None:
    assert_locked_database_refuses_writes_and_serves_reads(sqlite_stack)
