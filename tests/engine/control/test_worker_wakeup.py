"""An idle worker on PostgreSQL is woken by the log (``LISTEN``/``NOTIFY``), not only by its poll.

A submitted, retried or handed-back run is announced on ``pgschema.QUEUE_CHANNEL`` when its
transaction commits, and a worker listening there claims it at once. These tests give the worker a
30 s poll, so a claim within seconds can only come from the announcement; and they cut the
listening connection to show the poll still carries the worker, and that it listens again.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from steplog.log.pgschema import QUEUE_CHANNEL

pytestmark = pytest.mark.backends("postgres")

WITNESS = f"{AGENTS}:witness"
LISTENING = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = "
    f"'LISTEN {QUEUE_CHANNEL}'"
)


def submit(engine: Engine, *args: str) -> str:
    done = engine.run("submit", *args, "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def claimed(engine: Engine, run_id: str) -> bool:
    return bool(
        engine.query("SELECT 1 FROM event WHERE run_id = ? AND kind = 'worker_claimed'", run_id)
    )


def start_worker(engine: Engine, poll: str) -> subprocess.Popen[str]:
    worker = engine.start("worker", "--db", str(engine.db), "--poll", poll)
    wait_until(lambda: bool(engine.query(LISTENING)), "the worker listens", timeout=60)
    return worker


def stop(worker: subprocess.Popen[str]) -> str:
    worker.terminate()
    try:
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert worker.returncode == 0, err
    return err


def test_an_idle_worker_claims_a_submitted_run_when_told_not_at_its_poll(
    engine: Engine, tmp_path: Path
) -> None:
    first = submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
    worker = start_worker(engine, "30")
    try:
        wait_until(lambda: claimed(engine, first), "the first run is claimed")
        time.sleep(0.5)  # idle now, 30 s from its next poll
        rid = submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
        wait_until(lambda: claimed(engine, rid), "the new run is claimed", timeout=10)
        wait_until(lambda: engine.status(rid)["status"] == "succeeded", "the run succeeded")
    finally:
        err = stop(worker)
    assert "2 claimed, 2 succeeded" in err


def test_a_worker_whose_listening_connection_is_cut_polls_meanwhile_and_listens_again(
    engine: Engine, tmp_path: Path
) -> None:
    submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
    worker = start_worker(engine, "0.5")
    try:
        (pid,) = engine.query(LISTENING)[0]
        engine.query("SELECT pg_terminate_backend(?)", pid)
        rid = submit(engine, WITNESS, "--param", "n=1", "--param", f"witness={tmp_path / 'w.db'}")
        wait_until(lambda: claimed(engine, rid), "the run is claimed by the poll", timeout=30)
        wait_until(
            lambda: [r[0] for r in engine.query(LISTENING)] not in ([], [pid]),
            "the worker listens again",
            timeout=30,
        )
    finally:
        err = stop(worker)
    assert "2 claimed" in err and "lost the log" not in err
