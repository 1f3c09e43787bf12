"""Leases and fencing: one engine works a run at a time, and a zombie writes nothing."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from helpers.waiting import wait_until

pytestmark = pytest.mark.backends("sqlite", "postgres")


def witness_run(
    engine: Engine,
    run_id: str,
    tmp_path: Path,
    *,
    n: int,
    pause: float,
    extra: tuple[str, ...] = (),
) -> list[str]:
    return [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"n={n}",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        f"pause={pause}",
        *extra,
    ]


@pytest.mark.slow  # 25 s on each backend in the whole suite (2026-12-07)
def test_two_engines_started_together_one_works_the_other_exits_75(
    engine: Engine, tmp_path: Path
) -> None:
    """Half the trials race on a log that does not exist yet (both create it), half on one that
    does."""
    for trial in range(10):
        if trial % 2 == 0:
            engine = Engine(db=tmp_path / f"fresh{trial}" / "steplog.db", env=engine.env)
        args = witness_run(engine, f"race{trial}", tmp_path, n=6, pause=0.1)
        a, b = engine.start(*args), engine.start(*args)
        results = sorted(
            [(a.wait(timeout=60), a.stderr.read()), (b.wait(timeout=60), b.stderr.read())]
        )  # type: ignore[union-attr]
        for p in (a, b):
            p.stdout.close()  # type: ignore[union-attr]
            p.stderr.close()  # type: ignore[union-attr]
        assert [code for code, _ in results] == [0, 75], results
        assert "is being worked on by pid" in results[1][1]
        assert results[1][1].count("\n") == 1  # one clear line
        status = engine.status(f"race{trial}")
        assert status["incarnations"] == 1  # the loser never took the lease
        assert engine.query(
            "SELECT DISTINCT incarnation FROM event WHERE run_id = ? AND incarnation > 0",
            f"race{trial}",
        ) == [(1,)]


def test_a_live_engine_is_not_taken_over_and_nothing_is_written(
    engine: Engine, tmp_path: Path
) -> None:
    args = witness_run(engine, "live", tmp_path, n=100, pause=0.05)
    first = engine.start(*args)
    try:
        wait_until(lambda: engine.events("step_committed") > 0, what="first commit")
        before = engine.query("SELECT max(id) FROM event")[0][0]
        second = engine.run(*args)
        assert second.returncode == 75, second.stderr
        rows = engine.query(
            "SELECT incarnation FROM event WHERE id > ? AND incarnation != 1", before
        )
        assert rows == []
    finally:
        kill_group(first)


def pg_run_rows_free(url: str) -> bool:
    """Can every run row be locked now? Each write of an engine locks its run row first."""
    import psycopg

    with psycopg.connect(url) as conn:
        every = conn.execute("SELECT count(*) FROM run").fetchone()
        lockable = conn.execute(
            "SELECT count(*) FROM (SELECT id FROM run FOR UPDATE SKIP LOCKED) AS free"
        ).fetchone()
        conn.rollback()
    return every == lockable


def freeze_outside_a_write(engine: Engine, proc: subprocess.Popen[str]) -> None:
    """SIGSTOP the engine at a moment none of its threads is inside a write (its lease heartbeat
    writes too): a process stopped inside a transaction would block B's takeover, which is not
    the case under test."""
    for _ in range(50):
        os.killpg(proc.pid, signal.SIGSTOP)
        if isinstance(engine.db, str):  # PostgreSQL: a write holds its run row (steplog.log.pg)
            if pg_run_rows_free(engine.db):
                return
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
            continue
        probe = sqlite3.connect(engine.db, timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError("the engine held the write lock every time it was frozen")


def test_a_zombie_finds_itself_fenced_and_writes_nothing(engine: Engine, tmp_path: Path) -> None:
    """Stop engine A mid-step, let its lease expire, let B finish the run, then continue A."""
    args = witness_run(engine, "zombie", tmp_path, n=8, pause=0.3, extra=("--lease-seconds", "1"))
    a = engine.start(*args)
    try:
        # Freeze A while it sleeps inside a step body (not inside a write transaction).
        wait_until(lambda: engine.events("step_committed", seq=5) == 1, what="step 6")
        freeze_outside_a_write(engine, a)
        wait_until(
            lambda: engine.query("SELECT lease_expires FROM run")[0][0] < time.time(),
            what="lease expiry",
        )
        b = engine.run(*args)
        assert b.returncode == 0, b.stderr
        takeover = engine.query(
            "SELECT id, data FROM event WHERE kind = 'lease_acquired' AND incarnation = 2"
        )
        assert "let its lease expire" in takeover[0][1]
        last_before_continue = engine.query("SELECT max(id) FROM event")[0][0]

        os.killpg(a.pid, signal.SIGCONT)
        assert a.wait(timeout=30) == 75
        assert "took it over" in a.stderr.read()  # type: ignore[union-attr]
        # Not a single write of A's was accepted after B took over.
        assert engine.query(
            "SELECT count(*) FROM event WHERE incarnation = 1 AND id > ?", takeover[0][0]
        ) == [(0,)]
        assert engine.query("SELECT max(id) FROM event")[0][0] == last_before_continue
        assert engine.status("zombie")["status"] == "succeeded"
    finally:
        kill_group(a)


def test_sigterm_stops_cleanly_and_releases_the_lease_for_an_immediate_resume(
    engine: Engine, tmp_path: Path
) -> None:
    args = witness_run(engine, "term", tmp_path, n=40, pause=0.05)
    proc = engine.start(*args)
    wait_until(lambda: engine.events("step_committed") > 3, what="some commits")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    assert "stopped by a signal; run the same command to resume" in proc.stderr.read()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    assert engine.query("SELECT lease_pid, status FROM run") == [(None, "running")]
    assert engine.query("SELECT count(*) FROM event WHERE kind = 'lease_released'") == [(1,)]
    assert engine.run(*args).returncode == 0


@pytest.mark.slow  # 21-26 s on each backend in the whole suite (2026-12-07)
def test_sigterm_at_random_moments_always_stops_cleanly(engine: Engine, tmp_path: Path) -> None:
    """A storm of SIGTERMs: each engine stops with exit 130 (or, before it installed its handler,
    the default -15), never a traceback or a half-written log, and the run finishes once."""
    rng = random.Random(15)
    witness = tmp_path / "w.db"
    args = [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "term",
        "--db",
        str(engine.db),
        "--param",
        "n=150",
        "--param",
        f"witness={witness}",
        "--param",
        "pause=0.01",
    ]
    codes = []
    for _ in range(15):
        proc = engine.start(*args)
        try:
            proc.wait(timeout=rng.uniform(0.1, 0.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        err = proc.stderr.read()  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
        assert "Traceback" not in err, err
        codes.append(proc.returncode)
        if proc.returncode == 0:
            break
    assert set(codes) <= {130, -15, 0}, codes
    final = engine.run(*args)
    assert final.returncode == 0, final.stderr
    conn = sqlite3.connect(witness)
    applied = conn.execute("SELECT i FROM applied ORDER BY i").fetchall()
    conn.close()
    assert [i for (i,) in applied] == list(range(150))


def test_process_start_times_read_from_proc_are_psutils() -> None:
    """A lease records its holder's start time to tell a dead holder from a reused pid; the engine
    reads it from /proc without importing psutil, and must agree with psutil (which wrote the
    leases of older logs) for a live process, and call a zombie and a reaped one dead."""
    import psutil

    from steplog.log import lease

    assert lease._proc_start(os.getpid()) == psutil.Process().create_time()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert lease._proc_start(child.pid) == psutil.Process(child.pid).create_time()
        assert lease.process_alive(child.pid)
        child.kill()
        wait_until(
            lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, what="a zombie"
        )
        assert not lease.process_alive(child.pid)  # killed, not yet reaped: dead
    finally:
        child.wait()
    assert not lease.process_alive(child.pid)


def test_without_proc_the_boot_identity_and_process_start_times_come_from_psutil(
    tmp_path: Path,
) -> None:
    """The path macOS and Windows take (no /proc), run here: the boot identity is the boot time,
    the same on every call, and a live process's start time is read through psutil."""
    import os

    import psutil

    from steplog.log.lease import _proc_start, boot_id, process_alive

    fallback = boot_id(tmp_path / "no-such-proc" / "boot_id")
    assert fallback == f"boot@{psutil.boot_time():.0f}" == boot_id(tmp_path / "elsewhere")
    assert _proc_start(os.getpid()) == psutil.Process(os.getpid()).create_time()
    assert process_alive(os.getpid()) and not process_alive(2**22 + 7)


def write_log(db: object, sql: str, *args: object) -> None:
    """One committed write to a log file or a PostgreSQL log (what a person's SQL would do)."""
    if isinstance(db, str):
        from steplog.log.pg import connect

        pconn = connect(db)  # type: ignore[arg-type]
        try:
            pconn.execute(sql, args)  # autocommit
        finally:
            pconn.close()
        return
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)  # type: ignore[arg-type]
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


def test_a_wall_clock_stepped_back_does_not_stretch_a_frozen_holders_lease_on_its_own_host(
    engine: Engine, tmp_path: Path
) -> None:
    """Hardening #12: engine A is frozen (SIGSTOP) with a 1 s lease; then the wall clock is stepped
    back an hour, which to the log reads as A's lease expiring an hour from now. On A's own host
    the boot clock decides: B takes over about a second later, not an hour later."""
    args = witness_run(engine, "stepped", tmp_path, n=8, pause=0.3, extra=("--lease-seconds", "1"))
    a = engine.start(*args)
    try:
        wait_until(
            lambda: engine.events("step_committed", seq=5) == 1,
            what="step 6 (a compute step: no witness lock held)",
        )
        freeze_outside_a_write(engine, a)
        # What a wall clock set back by an hour leaves in the log: A's expiry lies an hour ahead.
        write_log(
            engine.db, "UPDATE run SET lease_expires = ? WHERE id = 'stepped'", time.time() + 3600
        )
        from steplog.log.lease import boot_clock

        wait_until(
            lambda: engine.query("SELECT lease_expires_boot FROM run")[0][0] < boot_clock(),
            what="boot expiry",
        )
        b = engine.run(*args, timeout=60)
        assert b.returncode == 0, b.stderr  # not 75: "held until an hour from now"
        takeover = engine.query(
            "SELECT data FROM event WHERE kind = 'lease_acquired' AND incarnation = 2"
        )
        assert "let its lease expire" in takeover[0][0]
        os.killpg(a.pid, signal.SIGCONT)
        assert a.wait(timeout=30) == 75  # A, thawed, finds itself fenced
    finally:
        if a.poll() is None:
            kill_group(a)


def test_a_holder_on_another_host_is_judged_by_the_wall_clock_only() -> None:
    """Another host's boot clock means nothing here: its lease is read in wall-clock time."""
    from steplog.log import lease

    now = time.time()
    far = lease.boot_clock() + 3600
    assert (
        lease.vacancy(
            pid=1,
            host="elsewhere",
            boot="b",
            proc_start=0.0,
            expires=now - 1,
            now=now,
            expires_boot=far,
        )
        is not None
    )
    assert (
        lease.vacancy(
            pid=1,
            host="elsewhere",
            boot="b",
            proc_start=0.0,
            expires=now + 60,
            now=now,
            expires_boot=0.0,
        )
        is None
    )
    me = lease.me()
    assert (
        lease.vacancy(
            pid=me.pid,
            host=me.host,
            boot=me.boot,
            proc_start=me.proc_start,
            expires=now + 3600,
            now=now,
            expires_boot=lease.boot_clock() - 1,
        )
        is not None
    )  # ours: the boot clock
