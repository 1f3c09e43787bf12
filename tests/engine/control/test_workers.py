"""The queue and its workers, as real processes on real SQLite files: ``steplog submit`` and
``steplog worker``, SIGTERM and SIGKILL of whole workers, and the worker storm (on a file, and
on PostgreSQL)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from helpers.logs import takeover_reasons
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from helpers.witness import applied
from steplog.log.lease import process_alive

WITNESS = f"{AGENTS}:witness"
APPROVAL = f"{AGENTS}:approval"
FIXABLE = f"{AGENTS}:fixable"


def submit(engine: Engine, *args: str) -> str:
    done = engine.run("submit", *args, "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def drain(engine: Engine, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = engine.run(
        "worker", "--db", str(engine.db), "--drain", "--poll", "0.05", *args, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done


def claims(engine: Engine, run_id: str) -> int:
    return len(
        engine.query("SELECT 1 FROM event WHERE run_id = ? AND kind = 'worker_claimed'", run_id)
    )


def status_of(engine: Engine, run_id: str) -> str:
    try:
        rows = engine.query("SELECT status FROM run WHERE id = ?", run_id)
    except Exception:
        return ""
    return str(rows[0][0]) if rows else ""


# -- submit ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("nosuch_agent",),
        ("demo",),  # demo needs --outbox
        ("demo", "--outbox", "ftp://x"),
        (WITNESS, "--max-seconds", "nan"),
        (WITNESS, "--max-cost", "inf"),
        (WITNESS, "--max-steps", "-1"),
        (WITNESS, "--pace", "nan"),
        (WITNESS, "--lease-seconds", "0"),
        (WITNESS, "--param", "nosuch=1"),
        (WITNESS, "--param", "malformed"),
        (WITNESS, "--run-id", "bad id!"),
    ],
)
def test_submit_refuses_what_run_refuses_and_writes_nothing(
    engine: Engine, args: tuple[str, ...]
) -> None:
    done = engine.run("submit", *args, "--db", str(engine.db))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("steplog: ") and done.stderr.count("\n") == 1, done.stderr
    assert not engine.db.exists()


def test_submit_records_a_queued_run_with_its_options_and_refuses_a_taken_id(
    engine: Engine, tmp_path: Path
) -> None:
    rid = submit(
        engine,
        WITNESS,
        "--run-id",
        "q1",
        "--param",
        "n=2",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--pace",
        "0.01",
        "--max-steps",
        "50",
        "--sync",
        "normal",
    )
    assert rid == "q1"
    s = engine.status("q1")
    assert (s["status"], s["incarnations"], s["engine"], s["worker"]) == ("queued", 0, "none", None)
    assert s["budget"]["steps"]["limit"] == 50 and s["params"]["n"] == 2
    launch = json.loads(engine.query("SELECT launch FROM run WHERE id = 'q1'")[0][0])
    assert launch == {"pace": 0.01, "base_url": None, "sync": "normal", "lease_seconds": None}
    before = engine.db.read_bytes()
    again = engine.run("submit", WITNESS, "--run-id", "q1", "--db", str(engine.db))
    assert again.returncode == 2 and "exists already" in again.stderr
    assert engine.db.read_bytes() == before


# -- a worker --------------------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")
def test_a_worker_runs_queued_runs_to_completion_and_says_who_ran_them(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "w.db"
    ids = [
        submit(engine, WITNESS, "--param", "n=3", "--param", f"witness={witness}") for _ in range(3)
    ]
    done = drain(engine)
    assert "drained; 3 claimed, 3 succeeded" in done.stderr
    for rid in ids:
        s = engine.status(rid)
        assert s["status"] == "succeeded" and s["incarnations"] == 1
        assert s["worker"]["host"] == os.uname().nodename and isinstance(s["worker"]["pid"], int)
    got = applied(witness)
    assert len({k for k, _ in got}) == len(got) == 9
    assert all(sorted(i for k, i in got if k.startswith(f"{rid}:")) == [0, 1, 2] for rid in ids)
    listed = engine.run("runs", "--db", str(engine.db))
    assert listed.stdout.count("worker ") == 3


@pytest.mark.backends("sqlite", "postgres")
def test_concurrency_runs_that_many_engines_at_once_and_no_more(
    engine: Engine, tmp_path: Path
) -> None:
    for _ in range(4):
        submit(
            engine,
            WITNESS,
            "--param",
            "n=2",
            "--param",
            "pause=0.4",
            "--param",
            f"witness={tmp_path / 'w.db'}",
        )
    drain(engine, "--concurrency", "2")
    spans = engine.query(
        "SELECT min(ts), max(ts) FROM event WHERE kind IN ('lease_acquired', 'run_finished')"
        " GROUP BY run_id"
    )
    points = sorted(
        [(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda p: (p[0], p[1])
    )
    most = now = 0
    for _, d in points:
        now += d
        most = max(most, now)
    assert most == 2  # two at a time, not one after another, and never three


def test_sigterm_stops_claiming_hands_runs_back_at_a_step_boundary_and_exits_0(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "w.db"
    rid = submit(
        engine, WITNESS, "--param", "n=40", "--param", "pause=0.1", "--param", f"witness={witness}"
    )
    later = submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={witness}")
    worker = engine.start("worker", "--db", str(engine.db), "--poll", "0.05")
    try:
        wait_until(lambda: len(applied(witness)) >= 3)
        os.kill(worker.pid, signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert worker.returncode == 0, err
    assert "stopped by SIGTERM" in err and "stopped at a safe point" in err
    s = engine.status(rid)
    assert (s["status"], s["engine"], s["worker"]) == ("running", "none", None), s
    assert engine.query(
        "SELECT count(*) FROM event WHERE run_id = ? AND kind = 'lease_released'", rid
    ) == [(1,)]
    assert engine.status(later)["status"] == "queued" and claims(engine, later) == 0
    done = drain(engine)
    assert "2 claimed, 2 succeeded" in done.stderr
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)) == 41


def test_retry_and_fork_no_start_leave_runs_queued_for_workers(
    engine: Engine, tmp_path: Path
) -> None:
    witness, fixed = tmp_path / "w.db", tmp_path / "fixed"
    db = str(engine.db)
    failed = engine.run(
        "run",
        FIXABLE,
        "--run-id",
        "f",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        f"fixed_when={fixed}",
    )
    assert failed.returncode == 4
    fixed.touch()
    assert engine.run("retry", "f", "--db", db, "--no-start", "--pace", "0.01").returncode == 0
    made = engine.run("fork", "f", "--at-step", "3", "--run-id", "f2", "--db", db, "--no-start")
    assert made.returncode == 0, made.stderr
    assert engine.status("f")["status"] == "queued" and engine.status("f2")["status"] == "queued"
    assert json.loads(engine.query("SELECT launch FROM run WHERE id = 'f'")[0][0])["pace"] == 0.01
    # A fork given no engine options is started as its parent would be.
    assert json.loads(engine.query("SELECT launch FROM run WHERE id = 'f2'")[0][0])["pace"] == 0.01
    done = drain(engine)
    assert "2 claimed, 2 succeeded" in done.stderr
    assert engine.status("f")["status"] == engine.status("f2")["status"] == "succeeded"


def test_a_waiting_run_is_not_spun_on_and_is_picked_up_once_signalled(
    engine: Engine, tmp_path: Path
) -> None:
    rid = submit(engine, APPROVAL, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
    worker = engine.start("worker", "--db", str(engine.db), "--poll", "0.05")
    try:
        wait_until(
            lambda: (
                status_of(engine, rid) == "waiting"
                and bool(engine.query("SELECT 1 FROM event WHERE kind = 'worker_released'"))
            )
        )
        time.sleep(1.0)
        assert claims(engine, rid) == 1
        assert (
            engine.run(
                "signal", rid, "approve", "--db", str(engine.db), "--data", '{"approved": true}'
            ).returncode
            == 0
        )
        wait_until(lambda: status_of(engine, rid) == "succeeded")
        assert claims(engine, rid) == 2
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert engine.status(rid)["result"] == {"approved": True, "sent": 2, "note": None}


def test_a_run_that_ended_or_keeps_crashing_is_not_retried_forever(
    engine: Engine, tmp_path: Path
) -> None:
    failing = submit(
        engine,
        FIXABLE,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        f"fixed_when={tmp_path / 'never'}",
    )
    agent_file = tmp_path / "gone.py"
    shutil.copy(AGENTS, agent_file)
    crashing = submit(engine, f"{agent_file}:noop", "--param", "n=1")
    agent_file.unlink()  # its engine now exits 2 (unknown agent) every time
    done = drain(engine)
    assert engine.status(failing)["status"] == "failed" and claims(engine, failing) == 1
    assert engine.status(crashing)["status"] == "queued" and claims(engine, crashing) == 3
    assert f"left alone: {crashing}" in done.stderr


def test_agents_filter_claims_only_those_agents(engine: Engine, tmp_path: Path) -> None:
    mine = submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
    other = submit(engine, f"{AGENTS}:noop", "--param", "n=1")
    drain(engine, "--agents", WITNESS)
    assert (
        engine.status(mine)["status"] == "succeeded" and engine.status(other)["status"] == "queued"
    )
    bad = engine.run("worker", "--db", str(engine.db), "--agents", "nosuch_agent")
    assert bad.returncode == 2


def test_run_prefix_claims_only_runs_whose_id_starts_with_it(engine: Engine) -> None:
    theirs = submit(
        engine, f"{AGENTS}:noop", "--run-id", "theirs-1", "--param", "n=1"
    )  # older: first in line
    mine = [
        submit(engine, f"{AGENTS}:noop", "--run-id", f"mine-{i}", "--param", "n=1")
        for i in range(2)
    ]
    done = drain(engine, "--run-prefix", "mine-")
    assert "runs mine-*" in done.stderr and "2 claimed, 2 succeeded" in done.stderr, done.stderr
    assert [engine.status(r)["status"] for r in mine] == ["succeeded", "succeeded"]
    assert engine.status(theirs)["status"] == "queued" and claims(engine, theirs) == 0


@pytest.mark.backends("sqlite", "postgres")
def test_a_sigkilled_worker_takes_its_engines_with_it_and_another_takes_over_at_once(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "w.db"
    rid = submit(
        engine, WITNESS, "--param", "n=30", "--param", "pause=0.05", "--param", f"witness={witness}"
    )
    worker = engine.start("worker", "--db", str(engine.db), "--poll", "0.05")
    try:
        wait_until(lambda: len(applied(witness)) >= 2)
        engine_pid = engine.query("SELECT lease_pid FROM run WHERE id = ?", rid)[0][0]
        assert engine_pid and process_alive(engine_pid)
        kill_group(worker)  # the worker's group only: its engine is in a session of its own
    finally:
        if worker.poll() is None:
            kill_group(worker)
    wait_until(lambda: not process_alive(engine_pid), "the engine died with its worker")
    assert engine.status(rid)["status"] == "running"
    drain(engine)
    assert engine.status(rid)["status"] == "succeeded"
    taken = engine.query(
        "SELECT ts, data FROM event WHERE run_id = ? AND kind = 'lease_acquired' ORDER BY id", rid
    )
    assert len(taken) == 2 and json.loads(taken[1][1])["previous_pid"] == engine_pid
    claimed = engine.query(
        "SELECT data FROM event WHERE run_id = ? AND kind = 'worker_claimed' ORDER BY id", rid
    )
    assert "is dead" in json.loads(claimed[1][0])["takeover"]
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)) == 30


# -- the storm -------------------------------------------------------------------------------


@pytest.mark.slow
def test_worker_storm_three_workers_thirty_demo_runs_every_message_once(tmp_path: Path) -> None:
    """3 workers, 30 queued demo runs, workers SIGKILLed at random and restarted: all runs
    succeed and the outbox's ledger holds every message exactly once."""
    from steplog.killtest.workers import worker_storm

    # Kills 0.2-0.6 s apart: all 12 fit in the ~8 s the runs take here, and the storm stops killing
    # once every run ended (a quick machine may end it before the last kills).
    result = worker_storm(
        tmp_path / "storm",
        runs=30,
        workers=3,
        concurrency=2,
        kills=12,
        seed=12,
        params={"tickets": 3},
        pace=0.02,
        time_limit=240,
        gap=(0.2, 0.6),
    )
    print(result.summary())
    assert result.passed, result.summary()
    assert result.statuses == {"succeeded": 30}
    assert result.deliveries == 30 * 4  # three replies and a digest per run
    assert result.worker_kills >= 8 and result.kills_landed >= 6 and result.engines_killed >= 6
    assert result.takeovers >= 1 and not result.orphans
    # Taken over at once (a free slot away) because its engine was dead, never because the 15 s
    # lease of a dead engine ran out.
    reasons = takeover_reasons(tmp_path / "storm" / "steplog.db")
    assert result.takeover_seconds and reasons, result.summary()
    assert not [r for r in reasons if "let its lease expire" in r], reasons


@pytest.mark.slow
@pytest.mark.backends("postgres")
def test_worker_storm_on_postgresql_every_message_once_and_other_runs_untouched(
    engine: Engine, tmp_path: Path
) -> None:
    """The worker storm with the log on PostgreSQL, from the command line: 3 workers, 15 queued
    demo runs, whole workers SIGKILLed at random and restarted: all its runs succeed, the outbox's
    ledger holds every message once, and a run of someone else's in the same database (queued
    before the storm, so first in line) is neither claimed nor counted."""
    other = submit(engine, f"{AGENTS}:noop", "--run-id", "someone-elses", "--param", "n=1")
    done = engine.run(
        "killtest",
        "demo",
        "--workers",
        "3",
        "--runs",
        "15",
        "--kills",
        "8",
        "--seed",
        "12",
        "--param",
        "tickets=2",
        "--db",
        str(engine.db),
        "--json",
        "--keep",
        str(tmp_path / "kept"),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    print({k: v for k, v in result.items() if k != "details"})
    assert result["passed"]
    assert result["statuses"] == {"succeeded": 15}
    assert result["deliveries"] == 15 * 3  # two replies and a digest per run
    assert (
        not result["duplicate_keys"]
        and not result["stray_deliveries"]
        and not result["duplicate_bodies"]
    )
    assert (
        result["worker_kills"] >= 5
        and result["kills_landed"] >= 3
        and result["engines_killed"] >= 3
    )
    assert result["takeovers"] >= 1 and not result["orphans"]
    assert result["clean_exits"] == result["workers_stopped"] == 3
    reasons = takeover_reasons(engine.db, run_ids="storm-%")
    assert result["takeover_seconds"] and reasons, result["takeover_seconds"]
    assert not [r for r in reasons if "let its lease expire" in r], reasons
    # The storm's runs are new ones of its own in that database; its workdirs and outbox are files.
    ids = [r for (r,) in engine.query("SELECT id FROM run WHERE id <> ? ORDER BY id", other)]
    assert len(ids) == 15 and all(r.startswith("storm-") for r in ids)
    assert {p.name for p in (tmp_path / "kept" / "runs").iterdir()} == set(ids)
    assert (tmp_path / "kept" / "outbox.db").exists() and not (
        tmp_path / "kept" / "steplog.db"
    ).exists()
    assert engine.status(other)["status"] == "queued" and claims(engine, other) == 0


def test_the_docs_queue_and_workers_commands_do_what_they_say(
    engine: Engine, tmp_path: Path
) -> None:
    from helpers.docs_pages import DOCS, Reader, block_containing

    shell = block_containing(DOCS / "postgres-and-workers.md", "steplog submit demo --run-id job-1")
    _outbox, *submitted, worked, listed = Reader(tmp_path, engine.env, engine.db).shell(shell)
    assert [s.stdout for s in submitted] == ["job-1\n", "job-2\n"], [s.stderr for s in submitted]
    assert worked.returncode == 0 and "drained; 2 claimed, 2 succeeded" in worked.stderr, (
        worked.stderr
    )
    assert listed.stdout.count("succeeded") == 2 and listed.stdout.count(" worker ") == 2, (
        listed.stdout
    )


@pytest.mark.backends("sqlite", "postgres")
def test_claims_page_past_runs_others_hold_and_a_live_workers_claim_is_respected(db: Path) -> None:
    """In-process: the claim query itself (``queue.claim_next_run``)."""
    from steplog.control.queue import claim_next_run
    from steplog.control.queue import submit as submit_run
    from steplog.log.db import open_log
    from steplog.log.lease import Holder, me
    from steplog.runtime.agent import resolve

    noop = resolve(f"{AGENTS}:noop")
    ids = [submit_run(noop, run_id=f"r{i:02d}", db=db, params={"n": 1}) for i in range(40)]
    conn = open_log(db)
    try:
        job = claim_next_run(conn, skip=set(ids[:35]))
        assert job is not None and (job.run_id, job.status, job.takeover) == ("r35", "queued", None)
        # Another live worker (our parent process, on this host) claims the oldest one...
        parent = os.getppid()
        from steplog.log.lease import _proc_start

        other = Holder(
            pid=parent, host=me().host, boot=me().boot, proc_start=_proc_start(parent) or 0.0
        )
        taken = claim_next_run(conn, worker=other)
        assert taken is not None and taken.run_id == "r00"
        # ...so this worker gets the next one, and a dead worker's claim is free at once.
        assert (mine := claim_next_run(conn)) is not None and mine.run_id == "r01"
        dead = Holder(pid=2**22 + 7, host=me().host, boot=me().boot, proc_start=1.0)
        assert (gone := claim_next_run(conn, worker=dead)) is not None and gone.run_id == "r02"
        assert (
            again := claim_next_run(conn, skip={"r01", "r35"})
        ) is not None and again.run_id == "r02"
    finally:
        conn.close()


def test_killtest_workers_runs_the_worker_storm_from_the_command_line(
    engine: Engine, tmp_path: Path
) -> None:
    done = engine.run(
        "killtest",
        "demo",
        "--workers",
        "2",
        "--runs",
        "4",
        "--kills",
        "2",
        "--seed",
        "3",
        "--param",
        "tickets=1",
        "--json",
        "--keep",
        str(tmp_path / "kept"),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (
        report["passed"]
        and report["statuses"] == {"succeeded": 4}
        and report["deliveries"] == 4 * 2
    )
    assert (tmp_path / "kept" / "steplog.db").exists()
    refused = engine.run("killtest", "demo", "--workers", "2", "--sweep")
    assert refused.returncode == 2 and "--workers" in refused.stderr


def test_a_waiting_run_whose_wait_times_out_is_taken_up_without_a_signal(
    engine: Engine, tmp_path: Path
) -> None:
    rid = submit(
        engine,
        APPROVAL,
        "--param",
        "n=1",
        "--param",
        "timeout=1.5",
        "--param",
        f"witness={tmp_path / 'w.db'}",
    )
    worker = engine.start("worker", "--db", str(engine.db), "--poll", "0.05")
    try:
        wait_until(lambda: status_of(engine, rid) == "succeeded", timeout=60)
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert engine.status(rid)["result"] == {"approved": None, "sent": 1}
    assert claims(engine, rid) == 2  # once queued, once when the wait had timed out
