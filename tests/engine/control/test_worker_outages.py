"""Workers that outlive their log going away for a while, as real processes: a real PostgreSQL
server restarted and stopped under them (a throwaway cluster of these tests' own on a TCP port of
127.0.0.1, never the shared server), and a SQLite file locked past its busy timeout. A log that
is gone (a dropped database) or comes back as something else (a damaged file) still ends the
worker with exit 2."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, checkout_env, kill_group
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from helpers.witness import applied

WITNESS = f"{AGENTS}:witness"
TICKETS = 3


class Restartable:
    """A PostgreSQL server of this test's own, reached by TCP as a remote one would be."""

    def __init__(self, server: Any, admin: str) -> None:
        self.server, self.admin = server, admin

    def create(self, name: str) -> str:
        import psycopg

        from helpers.postgres_server import with_database

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return with_database(self.admin, name)

    def restart(self) -> None:
        self.server.restart("fast")

    def down(self) -> None:
        self.server.down("fast")

    def up(self) -> None:
        self.server.up()


@pytest.fixture
def own_server() -> Iterator[Restartable]:
    from helpers.postgres_server import NoServer, Throwaway

    try:
        server = Throwaway(tcp=True)
        admin = server.start()
    except NoServer as exc:
        if os.environ.get("CI"):
            pytest.fail(
                f"these tests restart a PostgreSQL server of their own and cannot start one: {exc}"
            )
        pytest.skip(f"no PostgreSQL server of our own to restart: {exc}")
    try:
        yield Restartable(server, admin)
    finally:
        server.stop()


def engine_on(db: Any, tmp_path: Path) -> Engine:
    # Default workdirs of a PostgreSQL log go to XDG_DATA_HOME.
    return Engine(db=db, env=checkout_env(XDG_DATA_HOME=str(tmp_path / "xdg")))


class Worker:
    """A ``steplog worker`` process whose stderr (its engines' too) goes to a file."""

    def __init__(self, engine: Engine, err: Path, *args: str) -> None:
        self.err = err
        with open(err, "wb") as sink:
            self.proc = subprocess.Popen(
                engine.argv("worker", "--db", str(engine.db), "--poll", "0.05", *args),
                stdout=subprocess.DEVNULL,
                stderr=sink,
                env=engine.env,
                start_new_session=True,
            )

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def lines(self, text: str) -> list[str]:
        return [line for line in self.stderr.splitlines() if text in line]

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM; its exit code."""
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def ensure_gone(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)  # type: ignore[arg-type]


def submit(engine: Engine, *args: str) -> str:
    done = engine.run("submit", *args, "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def statuses(engine: Engine, ids: list[str]) -> dict[str, int]:
    try:
        rows = engine.query(
            f"SELECT status FROM run WHERE id IN ({', '.join('?' for _ in ids)})", *ids
        )
    except sqlite3.Error:  # the server restarting right now (PgOperationalError is one too)
        return {}
    out: dict[str, int] = {}
    for (status,) in rows:
        out[status] = out.get(status, 0) + 1
    return out


def succeeded(engine: Engine, ids: list[str]) -> int:
    return statuses(engine, ids).get("succeeded", 0)


def no_traceback(worker: Worker) -> None:
    assert "Traceback" not in worker.stderr, worker.stderr


# -- PostgreSQL: the server restarted, and stopped ------------------------------------------


@pytest.mark.slow
def test_three_workers_outlive_two_server_restarts_and_send_every_message_once(
    own_server: Restartable, tmp_path: Path
) -> None:
    """Three workers, twenty queued demo runs, the server restarted twice (``pg_ctl restart -m
    fast``) while they work: every run succeeds once, the outbox's ledger holds each message once,
    and every worker is still there, having said once per outage that it lost the log and once
    that it is back (no traceback)."""
    from steplog.log.location import PgUrl
    from steplog.log.pg import connect
    from steplog.outbox import start_outbox
    from steplog.verdict.evidence import completed_post_keys

    db = PgUrl(own_server.create("outage_log"))
    engine = engine_on(db, tmp_path)
    with start_outbox(tmp_path / "outbox.db") as outbox:
        ids = [
            submit(
                engine,
                "demo",
                "--param",
                f"tickets={TICKETS}",
                "--outbox",
                outbox.url,
                "--pace",
                "0.05",
                "--sync",
                "normal",
            )
            for _ in range(20)
        ]
        workers = [
            Worker(engine, tmp_path / f"worker-{i}.err", "--concurrency", "2") for i in range(3)
        ]
        try:
            for restart in (1, 2):
                # Mid-work: runs in flight (steps committed, not finished) and runs still queued.
                wait_until(lambda: in_flight(engine, ids) >= 3, timeout=120)
                assert succeeded(engine, ids) < 20
                own_server.restart()
                wait_until(
                    lambda restart=restart: all(
                        len(w.lines("the log is back")) >= restart or w.proc.poll() is not None
                        for w in workers
                    ),
                    timeout=60,
                )
                assert all(w.proc.poll() is None for w in workers), [w.stderr for w in workers]
            wait_until(lambda: succeeded(engine, ids) == 20, timeout=240)
            alive = [w.proc.poll() for w in workers]
            codes = [w.stop() for w in workers]
        finally:
            for w in workers:
                w.ensure_gone()
        ledger = outbox.ledger()
    assert alive == [None, None, None], [w.stderr for w in workers]
    assert codes == [0, 0, 0], [w.stderr for w in workers]
    for w in workers:
        no_traceback(w)
        lost = w.lines("lost the log at ")
        assert len(lost) == 2, w.stderr  # one line per outage, however many tries it took
        assert all(
            f"lost the log at {db} (" in line and line.endswith("; reconnecting…") for line in lost
        ), lost
        assert len(w.lines("the log is back after ")) == 2, w.stderr
    # The restarts cut runs short (3 or more each): their engines exited, later ones resumed them.
    assert sum(len(w.lines("engine lost the log (exit")) for w in workers) >= 4
    assert len([rid for rid, n in engine.query("SELECT id, incarnation FROM run") if n > 1]) >= 3
    # Each run finished once; every message its log completed was delivered once, and no other.
    finished = engine.query(
        "SELECT run_id, count(*) FROM event WHERE kind = 'run_finished' GROUP BY run_id"
    )
    assert sorted(finished) == sorted((rid, 1) for rid in ids)
    conn = connect(db)
    try:
        completed = {key for rid in ids for key in completed_post_keys(conn, rid)}
    finally:
        conn.close()
    keys = [d.key for d in ledger.deliveries]
    assert len(keys) == len(set(keys)) == 20 * (TICKETS + 1)  # a reply per ticket and a digest
    assert set(keys) == completed
    assert all(not ledger.for_run(rid).duplicates() for rid in ids)


def in_flight(engine: Engine, ids: list[str]) -> int:
    """Runs an engine works on now: it is alive and has committed a step of its own."""
    from steplog.log.lease import process_alive

    try:
        rows = engine.query(
            f"SELECT lease_pid FROM run WHERE id IN ({', '.join('?' for _ in ids)})"
            " AND status = 'running' AND EXISTS (SELECT 1 FROM step WHERE step.run_id = run.id"
            " AND step.incarnation = run.incarnation AND step.status = 'committed')",
            *ids,
        )
    except sqlite3.Error:
        return 0
    return sum(1 for (pid,) in rows if pid and process_alive(pid))


@pytest.mark.slow
def test_a_worker_stopped_while_the_server_is_down_exits_0_promptly_and_its_run_resumes_once(
    own_server: Restartable, tmp_path: Path
) -> None:
    """SIGTERM while the server is down, the worker's waits between tries grown long: it exits 0
    within seconds, having said once that it lost the log; its run, cut short by the outage, is
    finished by another worker once the server is back, every effect applied once."""
    from steplog.log.location import PgUrl

    db = PgUrl(own_server.create("down_log"))
    engine = engine_on(db, tmp_path)
    witness = tmp_path / "w.db"
    rid = submit(
        engine, WITNESS, "--param", "n=60", "--param", "pause=0.05", "--param", f"witness={witness}"
    )
    worker = Worker(engine, tmp_path / "worker.err")
    try:
        wait_until(lambda: len(applied(witness)) >= 3)
        own_server.down()
        wait_until(lambda: bool(worker.lines("lost the log at ")), timeout=60)
        time.sleep(6)  # tries at ~0.5, 1, 2, 4 s: the next one is seconds away
        assert worker.proc.poll() is None, worker.stderr
        asked = time.monotonic()
        code = worker.stop()
        took = time.monotonic() - asked
    finally:
        worker.ensure_gone()
    assert code == 0, worker.stderr
    assert took < 5, f"{took:.1f} s from SIGTERM to exit"
    no_traceback(worker)
    assert len(worker.lines("lost the log at ")) == 1 and not worker.lines("the log is back")
    last = worker.stderr.splitlines()[-1]
    assert "stopped by SIGTERM; 1 claimed" in last and "1 engine lost the log" in last, (
        worker.stderr
    )
    own_server.up()
    done = engine.run("worker", "--db", str(db), "--drain", "--poll", "0.05", timeout=180)
    assert done.returncode == 0 and "1 claimed, 1 succeeded" in done.stderr, done.stderr
    s = engine.status(rid)
    assert s["status"] == "succeeded" and s["incarnations"] == 2
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)) == 60


@pytest.mark.slow  # 23 s in the whole suite (2026-12-07)
def test_a_database_dropped_under_a_worker_ends_it_with_exit_2_not_a_wait(
    postgres_server: Any, tmp_path: Path
) -> None:
    """Waiting is for a server that is away, not for a log that is gone: the worker's database
    is dropped (its session ended with it), and on reconnecting the worker says in one line that
    the database does not exist and exits 2."""
    import psycopg

    from steplog.log.location import PgUrl

    db = PgUrl(postgres_server.create())
    engine = engine_on(db, tmp_path)
    submit(
        engine,
        WITNESS,
        "--param",
        "n=1",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--run-id",
        "first",
    )
    worker = Worker(engine, tmp_path / "worker.err")
    try:
        wait_until(
            lambda: bool(worker.lines("run first succeeded")) or worker.proc.poll() is not None
        )
        with psycopg.connect(postgres_server.admin, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{db.dbname}" WITH (FORCE)')
        code = worker.proc.wait(timeout=60)
    finally:
        worker.ensure_gone()
    assert code == 2, worker.stderr
    no_traceback(worker)
    assert len(worker.lines("lost the log at ")) == 1, worker.stderr
    last = worker.stderr.splitlines()[-1]
    assert last.startswith(f"steplog: cannot connect to {db}") and "does not exist" in last, (
        worker.stderr
    )


# -- SQLite: a file locked past its busy timeout, a file damaged meanwhile -------------------


@pytest.mark.slow
def test_a_worker_waits_out_a_sqlite_log_locked_past_its_busy_timeout(tmp_path: Path) -> None:
    """Another process holds the file's write lock longer than the 10 s busy timeout: the worker
    says it lost the log, waits, and runs the queue once the lock is gone."""
    db = tmp_path / "steplog.db"
    engine = engine_on(db, tmp_path)
    witness = tmp_path / "w.db"
    ids = [
        submit(engine, WITNESS, "--param", "n=3", "--param", f"witness={witness}") for _ in range(2)
    ]
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    worker = Worker(engine, tmp_path / "worker.err")
    try:
        wait_until(
            lambda: bool(worker.lines("lost the log at ")) or worker.proc.poll() is not None,
            timeout=60,
        )
        assert worker.proc.poll() is None, worker.stderr
        [lost] = worker.lines("lost the log at ")
        assert re.fullmatch(
            rf"steplog worker \S+: lost the log at {re.escape(str(db))} \(database is locked\); "
            "reconnecting…",
            lost,
        ), lost
        holder.execute("ROLLBACK")
        holder.close()
        wait_until(lambda: succeeded(engine, ids) == 2, timeout=120)
        code = worker.stop()
    finally:
        worker.ensure_gone()
    assert code == 0, worker.stderr
    no_traceback(worker)
    assert (
        len(worker.lines("lost the log at ")) == 1
        and len(worker.lines("the log is back after ")) == 1
    )
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)) == 6


@pytest.mark.slow
def test_a_sqlite_log_damaged_while_a_worker_waited_for_it_ends_the_worker_with_exit_2(
    tmp_path: Path,
) -> None:
    """Waiting is for a log that is away, not for one that is wrong: the file is damaged while
    the worker waits out a lock, and on reopening it the worker refuses it in one line (exit 2)
    and writes nothing to it."""
    db = tmp_path / "steplog.db"
    engine = engine_on(db, tmp_path)
    submit(engine, WITNESS, "--param", "n=3", "--param", f"witness={tmp_path / 'w.db'}")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    worker = Worker(engine, tmp_path / "worker.err")
    try:
        wait_until(
            lambda: bool(worker.lines("lost the log at ")) or worker.proc.poll() is not None,
            timeout=60,
        )
        assert worker.proc.poll() is None, worker.stderr
        with open(db, "r+b") as f:
            f.write(b"this is no longer a database" * 4)
        damaged = db.read_bytes()
        code = worker.proc.wait(timeout=60)
        assert db.read_bytes() == damaged
    finally:
        worker.ensure_gone()
        holder.close()
    assert code == 2, worker.stderr
    no_traceback(worker)
    last = worker.stderr.splitlines()[-1]
    assert last.startswith(f"steplog: {db} is not a SQLite database"), worker.stderr
