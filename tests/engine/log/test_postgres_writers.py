"""Many writers on one PostgreSQL log: side by side, and no reader misses a thing.

On SQLite one write transaction runs at a time. On PostgreSQL writers of different runs commit
side by side (``steplog.log.pg``): each locks the rows of its own run, workers claim with ``FOR
UPDATE SKIP LOCKED``, and an engine's claim and run control hold their run's own lock
(``test_postgres_run_locks``). Ids then commit out of order, and the readers stop at the
settled horizon (``logread.settled_upto``) so a bookmark never passes an event yet to commit.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import checkout_env
from helpers.paths import AGENTS
from steplog.log.db import RUN_WRITE, open_log, open_readonly
from steplog.log.location import PgUrl
from steplog.log.logread import EventTail, settled_upto

pytestmark = pytest.mark.backends("postgres")

INSERT_EVENT = (
    "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, 1, 1, 'note', '{}') "
    "RETURNING id"
)


def writer(db: PgUrl) -> Any:
    conn = open_log(db)
    conn.execute(
        "SET lock_timeout = '5s'"
    )  # a wait that should not happen fails the test instead of hanging it
    return conn


def test_writers_of_two_runs_commit_side_by_side_and_a_reader_waits_for_the_lower_id(
    db: PgUrl,
) -> None:
    a, b = writer(db), writer(db)
    reader = open_readonly(db)
    tail = EventTail()
    try:
        a.execute(RUN_WRITE)
        low = a.execute(INSERT_EVENT, ("r",)).fetchone()[0]
        b.execute(RUN_WRITE)  # not blocked by a's open transaction
        high = b.execute(INSERT_EVENT, ("r",)).fetchone()[0]
        b.execute("COMMIT")
        assert high > low
        # b's event is committed, but a's lower id may still commit: reading b's now would move
        # the bookmark past a's for good.
        assert reader.execute("SELECT count(*) FROM event").fetchone()[0] == 1
        assert tail.read(reader) == [] and tail.bookmark == 0
        assert settled_upto(reader) == low - 1
        a.execute("COMMIT")
        assert [e.id for e in tail.read(reader)] == [low, high]
        assert settled_upto(reader) == high
    finally:
        for conn in (a, b, reader):
            conn.close()


def test_a_rolled_back_transaction_holds_readers_back_only_while_it_is_open(db: PgUrl) -> None:
    a, b = writer(db), writer(db)
    reader = open_readonly(db)
    try:
        a.execute(RUN_WRITE)
        a.execute(INSERT_EVENT, ("r",))
        b.execute(RUN_WRITE)
        high = b.execute(INSERT_EVENT, ("r",)).fetchone()[0]
        b.execute("COMMIT")
        assert EventTail().read(reader) == []
        a.execute("ROLLBACK")
        assert [e.id for e in EventTail().read(reader)] == [high]
    finally:
        for conn in (a, b, reader):
            conn.close()


def test_a_claim_skips_a_run_whose_row_another_transaction_holds_instead_of_waiting(
    db: PgUrl,
) -> None:
    from steplog.control.queue import claim_next_run, submit
    from steplog.runtime.agent import resolve

    noop = resolve(f"{AGENTS}:noop")
    for rid in ("first", "second"):
        submit(noop, run_id=rid, db=db, params={"n": 1})
    holder, claimer = writer(db), writer(db)
    try:
        holder.execute(RUN_WRITE)
        holder.execute(
            "SELECT id FROM run WHERE id = 'first' FOR UPDATE"
        )  # another worker mid-claim
        job = claim_next_run(claimer)
        assert job is not None and job.run_id == "second"
        holder.execute("ROLLBACK")
        job = claim_next_run(claimer)
        assert job is not None and job.run_id == "first"
        assert claim_next_run(claimer, skip={"first", "second"}) is None
    finally:
        holder.close()
        claimer.close()


def test_an_engine_waits_for_a_takeover_holding_its_row_and_is_then_fenced(db: PgUrl) -> None:
    from steplog.errors import Fenced
    from steplog.log.journal import Journal, Usage

    conn = writer(db)
    conn.execute(
        "INSERT INTO run (id, agent, params, workdir, created_at, updated_at, status, incarnation)"
        " VALUES ('r', 'a', '{}', '/tmp', 1, 1, 'running', 1)"
    )
    journal = Journal(writer(db), "r", 1, Usage(), lease_seconds=30)
    takeover = writer(db)
    try:
        takeover.execute("BEGIN IMMEDIATE")
        takeover.execute("SELECT id FROM run WHERE id = 'r' FOR UPDATE")
        committed_at: list[float] = []

        def commit_later() -> None:
            time.sleep(0.3)
            takeover.execute("UPDATE run SET incarnation = 2 WHERE id = 'r'")
            committed_at.append(
                time.monotonic()
            )  # just before: the server may wake the engine first
            takeover.execute("COMMIT")

        thread = threading.Thread(target=commit_later)
        thread.start()
        with pytest.raises(Fenced):
            journal.begin_attempt(1, "s", "call", attempt=1, recoveries=0, fresh=True, durable=True)
        fenced_at = time.monotonic()
        thread.join(10)
        # The fence waited for the takeover's commit (not only for its row lock), then saw it.
        assert committed_at and fenced_at >= committed_at[0]
        assert conn.execute("SELECT count(*) FROM step").fetchone()[0] == 0
    finally:
        for c in (conn, journal.conn, takeover):
            c.close()


def test_a_tail_through_three_engines_writing_at_once_sees_every_event_once_in_id_order(
    db: PgUrl, tmp_path: Path
) -> None:
    open_log(db).close()
    engines = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steplog",
                "run",
                f"{AGENTS}:noop",
                "--param",
                "n=150",
                "--run-id",
                f"r{i}",
                "--db",
                str(db),
                "--workdir",
                str(tmp_path / f"w{i}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=checkout_env(),
        )
        for i in range(3)
    ]
    reader = open_readonly(db)
    tail = EventTail()
    seen: list[int] = []
    try:
        while any(p.poll() is None for p in engines):
            seen += [e.id for e in tail.read(reader)]
        for p in engines:
            assert p.wait() == 0, p.stderr.read() if p.stderr else ""
        seen += [e.id for e in tail.read(reader)]
        every = [r[0] for r in reader.execute("SELECT id FROM event ORDER BY id").fetchall()]
        assert seen == every
        per_run = reader.execute(
            "SELECT run_id, count(*) FROM event WHERE kind = 'step_committed' GROUP BY run_id"
            " ORDER BY run_id"
        ).fetchall()
        assert [tuple(r) for r in per_run] == [("r0", 150), ("r1", 150), ("r2", 150)]
    finally:
        reader.close()
        for p in engines:
            if p.poll() is None:
                p.kill()


def test_export_reads_a_run_on_postgresql_as_on_sqlite(db: PgUrl, tmp_path: Path) -> None:
    """One snapshot (REPEATABLE READ), rows in primary-key order: the same lines as from a file."""
    import json

    def export(log: str) -> list[dict[str, Any]]:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "steplog",
                "run",
                f"{AGENTS}:noop",
                "--param",
                "n=3",
                "--run-id",
                "x",
                "--db",
                log,
                "--workdir",
                str(tmp_path / "w"),
            ],
            capture_output=True,
            text=True,
            env=checkout_env(),
        )
        assert run.returncode == 0, run.stderr
        done = subprocess.run(
            [sys.executable, "-m", "steplog", "export", "x", "--db", log],
            capture_output=True,
            text=True,
            env=checkout_env(),
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def shape(lines: list[dict[str, Any]]) -> list[Any]:
        return [
            (line.get("table"), sorted(line["row"]), line["row"].get("seq"))
            if "row" in line
            else sorted(line)
            for line in lines
        ]

    on_pg, on_file = export(str(db)), export(str(tmp_path / "s.db"))
    assert shape(on_pg) == shape(on_file)
    assert (
        on_pg[-1] == on_file[-1] == {"end": "x", "rows": on_file[-1]["rows"]}
        and on_file[-1]["rows"]["step"] == 3
    )


def test_without_secrets_moves_a_urls_password_from_the_command_line_to_pgpassword() -> None:
    from steplog.control.procs import without_secrets

    argv, env = without_secrets(
        ["steplog", "run", "--db", "postgresql://me:p%40ss@db.example:5433/log"], {"A": "1"}
    )
    assert argv == ["steplog", "run", "--db", "postgresql://me@db.example:5433/log"]
    assert env == {"A": "1", "PGPASSWORD": "p@ss"}
    plain = ["steplog", "run", "--db", "postgresql://me@db/log"]
    assert without_secrets(plain, None) == (plain, None)
    two = ["--db", "postgresql://a:x@h/d", "postgresql://b:y@h/d"]
    assert without_secrets(two, {}) == (two, {})  # one variable cannot hold both: left alone


def test_a_password_in_the_url_never_reaches_an_engines_command_line(
    db: PgUrl, tmp_path: Path
) -> None:
    """A worker given ``--db postgresql://user:PASSWORD@…`` starts its engines with the URL
    without it (every user can read a command line) and the password in ``PGPASSWORD``."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    import psutil

    from steplog.control.queue import submit
    from steplog.runtime.agent import resolve

    submit(
        resolve(f"{AGENTS}:witness"),
        run_id="w",
        db=db,
        params={"n": 3, "pause": 0.5, "witness": str(tmp_path / "w.db")},
    )
    parts = urlsplit(str(db))
    secret = (
        f"{parts.scheme}://{parts.username}:s3cret-word@{parts.hostname}:{parts.port}{parts.path}"
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "steplog", "worker", "--db", secret, "--drain", "--poll", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=checkout_env(),
    )
    try:
        deadline = time.monotonic() + 30
        engines: list[Any] = []
        while not engines:
            assert time.monotonic() < deadline and worker.poll() is None, (
                worker.stderr.read() if worker.stderr else ""
            )
            engines = [p for p in psutil.Process(worker.pid).children() if "run" in p.cmdline()]
            time.sleep(0.02)
        cmdline = engines[0].cmdline()
        assert "s3cret-word" not in " ".join(cmdline)
        assert (
            urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))
            in cmdline
        )
        if os.access(f"/proc/{engines[0].pid}/environ", os.R_OK):
            assert engines[0].environ().get("PGPASSWORD") == "s3cret-word"
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()


@pytest.mark.backends("sqlite", "postgres")
def test_nul_characters_in_a_name_a_result_and_a_failure_are_recorded_and_replayed(
    engine: Any, tmp_path: Path
) -> None:
    """PostgreSQL's text cannot hold NUL: names and messages keep it as U+FFFD there (SQLite as
    it is), results keep it in their JSON; the failure is recorded, and a retry replays the
    NUL-named step instead of calling the log non-deterministic."""
    fixed = tmp_path / "fixed"
    db = str(engine.db)
    first = engine.run(
        "run", f"{AGENTS}:nul_text", "--run-id", "z", "--db", db, "--param", f"fixed_when={fixed}"
    )
    assert first.returncode == 4, first.stderr
    reason = engine.status("z")["reason"]
    assert "byte;" in reason and ("\x00" in reason or "\ufffd" in reason)
    fixed.touch()
    done = engine.run("retry", "z", "--db", db)
    assert done.returncode == 0, done.stderr
    assert engine.status("z")["result"] == "x\x00yok"
    assert engine.query("SELECT attempts FROM step WHERE run_id = 'z' AND seq = 1") == [
        (1,)
    ]  # replayed, not redone
