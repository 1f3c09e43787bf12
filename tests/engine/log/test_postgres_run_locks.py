"""On PostgreSQL no lock is wider than one run, except a migration's.

An engine's claim, ``steplog submit`` and run control (cancel, signal, retry, fork) each hold
their run's own lock and then its row (``db.run_locked``); an engine's step writes and a worker's
claim lock the run row alone (``steplog.log.pg``). So whatever holds one run, for however long,
leaves every other run's claims and steps alone, and two transactions on one run still take turns.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers.paths import AGENTS
from steplog.log.db import RUN_WRITE, open_log, run_locked
from steplog.log.location import PgUrl

pytestmark = pytest.mark.backends("postgres")

HELD_FOR = 5.0
"""How long the first run is held."""

WELL_UNDER = 2.5
"""The second run's claims and steps take a fraction of a second; had they waited for the held
run, they would take ``HELD_FOR`` at least."""

STEPS = 20


def writer(db: PgUrl) -> Any:
    conn = open_log(db)
    conn.execute("SET lock_timeout = '10s'")  # a wait that should not happen fails, not hangs
    return conn


def hold_row_with_psycopg(db: PgUrl, run_id: str, locked: threading.Event, seconds: float) -> None:
    """Another program's transaction on the run row, as plain psycopg writes it."""
    with psycopg.connect(str(db)) as conn:  # not autocommit: the SELECT opens a transaction
        conn.execute("SELECT id FROM run WHERE id = %s FOR UPDATE", (run_id,))
        locked.set()
        time.sleep(seconds)
        conn.rollback()


def hold_run_control(db: PgUrl, run_id: str, locked: threading.Event, seconds: float) -> None:
    """What a cancel, signal, retry or fork of the run holds while it decides, kept open."""
    from steplog.log.runs import run_to_change

    conn = writer(db)
    try:
        with run_locked(conn, run_id):
            assert run_to_change(conn, run_id) is not None
            locked.set()
            time.sleep(seconds)
    finally:
        conn.close()


@pytest.mark.parametrize("hold", [hold_row_with_psycopg, hold_run_control], ids=["row", "control"])
def test_a_run_held_for_5_s_never_delays_another_runs_claims_or_its_steps(
    db: PgUrl, tmp_path: Path, hold: Any
) -> None:
    from steplog.control.queue import claim_next_run, submit
    from steplog.log.runstatus import RunStatus
    from steplog.runtime.agent import resolve
    from steplog.runtime.engine import execute

    noop = resolve(f"{AGENTS}:noop")
    for rid in ("held", "free"):  # "held" is the older: a worker looks at it first
        submit(noop, run_id=rid, db=db, params={"n": STEPS}, workdir=tmp_path / rid)
    locked, released = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            hold(db, "held", locked, HELD_FOR)
        finally:
            released.set()

    thread = threading.Thread(target=holder)
    thread.start()
    claimer = writer(db)
    try:
        assert locked.wait(30)
        started = time.monotonic()
        job = claim_next_run(claimer)  # the worker's claim
        assert job is not None and job.run_id == "free"
        outcome = execute(noop, run_id="free", db=db)  # the engine's claim, then its steps
        took = time.monotonic() - started
        assert not released.is_set()  # all of it while "held" was held
        assert outcome.status == RunStatus.SUCCEEDED and outcome.result == STEPS
        assert took < WELL_UNDER
    finally:
        thread.join(HELD_FOR + 30)
        claimer.close()
    reader = writer(db)
    try:
        rows = reader.execute("SELECT id, status FROM run ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [("free", "succeeded"), ("held", "queued")]
    finally:
        reader.close()


def test_run_locks_make_two_transactions_on_one_run_take_turns_and_on_two_runs_not(
    db: PgUrl,
) -> None:
    a, b = writer(db), writer(db)
    try:
        with run_locked(a, "x"):
            b.execute("SET lock_timeout = '300ms'")
            with pytest.raises(sqlite3.OperationalError, match="lock timeout"):
                with run_locked(b, "x"):
                    pass
            with run_locked(b, "y"):  # another run's: side by side
                pass
            b.execute(RUN_WRITE)  # a step write, which locks only its own row, neither
            b.execute("COMMIT")
    finally:
        a.close()
        b.close()


def test_a_migrations_lock_is_the_one_that_covers_the_database(db: PgUrl) -> None:
    """``BEGIN IMMEDIATE`` untagged (``pgschema.migrate``): every other migration waits for it;
    no run's transaction does."""
    a, b = writer(db), writer(db)
    try:
        a.execute("BEGIN IMMEDIATE")
        b.execute("SET lock_timeout = '300ms'")
        with pytest.raises(sqlite3.OperationalError, match="lock timeout"):
            b.execute("BEGIN IMMEDIATE")
        b.execute("ROLLBACK")
        with run_locked(b, "x"):
            pass
        b.execute(RUN_WRITE)
        b.execute("COMMIT")
        a.execute("COMMIT")
    finally:
        a.close()
        b.close()


def test_an_engine_claiming_a_run_id_while_it_is_submitted_waits_and_then_takes_that_run(
    db: PgUrl, tmp_path: Path
) -> None:
    """A row cannot be locked before it exists; the run's lock can. Without it the claim would
    find no row, insert its own and fail on the primary key (or make the submit fail)."""
    from steplog.log.claim import Claimed, Request, claim, create_run
    from steplog.log.launch import Launch
    from steplog.runtime.agent import resolve

    noop = resolve(f"{AGENTS}:noop")

    def request() -> Request:
        return Request(
            agent=noop,
            spec=noop.default_spec(),
            run_id="x",
            db_path=db,
            workdir=tmp_path / "x",
            outbox=None,
            params={},
            limits={},
            model=None,
            lease_seconds=15,
        )

    submitter, engine = writer(db), writer(db)
    inserted = threading.Event()
    failures: list[BaseException] = []

    def submit_slowly() -> None:
        try:
            with run_locked(submitter, "x"):
                create_run(submitter, request(), time.time(), launch=Launch())
                inserted.set()
                time.sleep(0.5)  # the engine's claim comes in meanwhile
        except BaseException as exc:
            failures.append(exc)
            inserted.set()

    thread = threading.Thread(target=submit_slowly)
    thread.start()
    try:
        assert inserted.wait(30)
        claimed = claim(engine, request())
        thread.join(30)
        assert failures == []
        assert isinstance(claimed, Claimed) and claimed.incarnation == 1
        created = engine.execute(
            "SELECT data FROM event WHERE kind = 'run_created' AND run_id = 'x'"
        ).fetchall()
        assert len(created) == 1 and json.loads(created[0][0])["queued"]  # the submit's
        assert engine.execute("SELECT status FROM run WHERE id = 'x'").fetchone()[0] == "running"
    finally:
        thread.join(30)
        submitter.close()
        engine.close()
