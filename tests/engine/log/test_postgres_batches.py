"""An engine's writes on PostgreSQL are sent in batches (``db.RUN_WRITE_BATCHED``).

A fenced write's statements are bound on the client and sent together: ``BEGIN``, the marker and
the fence in one round trip, the step's rows and the ``COMMIT`` in another. These tests hold that
the values come back as a plain statement stores them, that an error anywhere in a batch leaves
nothing of its transaction, and that a plain step is two round trips.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import steplog
from helpers.logs import query_log
from steplog.log.location import PgUrl

pytestmark = pytest.mark.backends("postgres")

VALUES: list[Any] = [
    "plain",
    "it's 'quoted'",
    "back\\slash \\' and \\n",
    "a ? and a %s and a %% and -- a comment",
    "unicode: żółw 🐢 \u2028",
    "new\nline\ttab",
    "",
    0,
    -1,
    2**62,
    -(2**62),
    0.1,
    -2.5,
    1e-300,
    -1e300,
    float("inf"),
    float("-inf"),
    None,
]


def _table(conn: Any) -> None:
    conn.execute(
        "CREATE TABLE scratch (k BIGINT PRIMARY KEY, t TEXT, i BIGINT, f DOUBLE PRECISION)"
    )


def test_values_written_in_a_batch_read_back_as_a_plain_statement_stores_them(db: PgUrl) -> None:
    from steplog.log.db import RUN_WRITE, RUN_WRITE_BATCHED
    from steplog.log.pg import connect

    conn = connect(db)
    try:
        _table(conn)
        for begin, base in ((RUN_WRITE_BATCHED, 0), (RUN_WRITE, 1000)):
            conn.execute(begin)
            for k, v in enumerate(VALUES):
                column = "t" if isinstance(v, str) else "i" if isinstance(v, int) else "f"
                conn.execute(f"INSERT INTO scratch (k, {column}) VALUES (?, ?)", (base + k, v))
            conn.execute("COMMIT")
        # the batches' statements seen thrice were prepared: the later values went by EXECUTE
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] >= 3
    finally:
        conn.close()
    batched = query_log(db, "SELECT t, i, f FROM scratch WHERE k < 1000 ORDER BY k")
    plain = query_log(db, "SELECT t, i, f FROM scratch WHERE k >= 1000 ORDER BY k")
    assert batched == plain
    assert [next((x for x in row if x is not None), None) for row in batched] == VALUES


def test_a_nul_character_is_stored_as_its_stand_in_in_a_batch_too(db: PgUrl) -> None:
    from steplog.log.db import RUN_WRITE_BATCHED
    from steplog.log.pg import NUL_STAND_IN, connect

    conn = connect(db)
    try:
        _table(conn)
        conn.execute(RUN_WRITE_BATCHED)
        conn.execute("INSERT INTO scratch (k, t) VALUES (?, ?)", (1, "a\x00b"))
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert query_log(db, "SELECT t FROM scratch") == [(f"a{NUL_STAND_IN}b",)]


def test_an_error_anywhere_in_a_batch_leaves_nothing_of_its_transaction(db: PgUrl) -> None:
    from steplog.log.db import RUN_WRITE_BATCHED, rollback
    from steplog.log.pg import connect

    conn = connect(db)
    try:
        _table(conn)
        conn.execute("INSERT INTO scratch (k) VALUES (1)")
        conn.execute(RUN_WRITE_BATCHED)
        conn.execute("INSERT INTO scratch (k) VALUES (?)", (2,))
        conn.execute("INSERT INTO scratch (k) VALUES (?)", (1,))  # taken: the batch fails...
        conn.execute("INSERT INTO scratch (k) VALUES (?)", (3,))
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("COMMIT")  # ...when it is sent, with its COMMIT
        assert conn.in_transaction
        rollback(conn)
        assert not conn.in_transaction
        assert query_log(db, "SELECT k FROM scratch ORDER BY k") == [(1,)]
        # and the connection goes on: a read inside a batch sends what is queued before it
        conn.execute(RUN_WRITE_BATCHED)
        conn.execute("INSERT INTO scratch (k) VALUES (?)", (4,))
        assert conn.execute("SELECT count(*) FROM scratch").fetchone()[0] == 2
        conn.execute("ROLLBACK")  # begun on the server: rolled back there
        # a result is read before the next statement is queued; read after, it is refused
        conn.execute(RUN_WRITE_BATCHED)
        early = conn.execute("SELECT count(*) FROM scratch")
        assert conn.execute("SELECT 41 + 1").fetchone()[0] == 42
        with pytest.raises(sqlite3.DatabaseError, match="read it before queuing the next one"):
            early.fetchall()
        conn.execute("ROLLBACK")
        assert query_log(db, "SELECT k FROM scratch ORDER BY k") == [(1,)]
        conn.execute(RUN_WRITE_BATCHED)
        conn.execute("INSERT INTO scratch (k) VALUES (?)", (5,))
        conn.execute("ROLLBACK")  # nothing sent yet: nothing to roll back there
        assert not conn.in_transaction
    finally:
        conn.close()
    assert query_log(db, "SELECT k FROM scratch ORDER BY k") == [(1,)]


def test_a_statement_whose_prepare_fails_is_sent_unprepared_from_then_on(db: PgUrl) -> None:
    """A batched statement is prepared the third time it is queued; one the server cannot
    prepare (a parameter whose type it cannot infer) fails that once, never again."""
    from steplog.log.db import RUN_WRITE_BATCHED, rollback
    from steplog.log.pg import PREPARE_AFTER, connect

    conn = connect(db)
    try:
        for i in range(1, PREPARE_AFTER + 3):
            conn.execute(RUN_WRITE_BATCHED)
            cur = conn.execute("SELECT ? IS NULL", (f"x{i}",))
            if i == PREPARE_AFTER:
                with pytest.raises(sqlite3.DatabaseError, match="data type of parameter"):
                    cur.fetchall()
                rollback(conn)
                continue
            assert cur.fetchall() == [(False,)]
            conn.execute("COMMIT")
    finally:
        conn.close()


@steplog.agent(budget=steplog.Budget(max_steps=1000, max_retries=None, max_recoveries=None))
def _noop(run: steplog.Run, n: int = 10) -> int:
    for i in range(n):
        run.step("noop", int, i)
    return n


def test_a_plain_step_is_two_round_trips_to_the_server(
    db: PgUrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted on the engine's own connection (``PgConnection.round_trips``): 10 steps more are
    20 round trips more."""
    from steplog.log import pg
    from steplog.log.db import location, open_log
    from steplog.runtime.engine import execute

    open_log(location(db)).close()  # the schema made: each run below opens the log alike
    opened: list[pg.PgConnection] = []
    real = pg.open_log

    def kept(url: str) -> pg.PgConnection:
        opened.append(real(url))
        return opened[-1]

    monkeypatch.setattr(pg, "open_log", kept)
    trips: dict[int, int] = {}
    for n in (10, 20):
        opened.clear()
        execute(_noop, run_id=f"r{n}", db=location(db), params={"n": n})
        trips[n] = sum(c.round_trips for c in opened)
    assert trips[20] - trips[10] == 20
