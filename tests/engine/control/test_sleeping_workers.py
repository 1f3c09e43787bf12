"""Workers and the waits of issue 33: a worker holds no slot for a sleeping run or one waiting
for a message; it lets the run go and claims it again when it is due or its message is in.

One worker with one slot, so a second run can only finish while the first waits if the first
gave its slot back.
"""

from __future__ import annotations

import subprocess

import pytest

import steplog
from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS, TIME_AGENTS
from helpers.waiting import wait_until

pytestmark = pytest.mark.backends("sqlite", "postgres")


def ok(engine: Engine, *args: str) -> str:
    done = engine.run(*args, "--db", str(engine.db))
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout.strip()


def stop(worker: subprocess.Popen[str]) -> str:
    worker.terminate()
    try:
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            kill_group(worker)
    return err


@pytest.mark.slow  # 17-22 s on each backend in the whole suite (2026-12-07)
def test_one_worker_slot_serves_other_runs_while_one_sleeps_and_one_waits_for_a_message(
    engine: Engine,
) -> None:
    ok(engine, "submit", f"{TIME_AGENTS}:sleeper", "--run-id", "nap", "--param", "seconds=12")
    ok(engine, "submit", f"{TIME_AGENTS}:receiver", "--run-id", "inbox", "--param", "n=1")
    ok(engine, "submit", f"{AGENTS}:noop", "--run-id", "other", "--param", "n=3")
    worker = engine.start("worker", "--db", str(engine.db), "--concurrency", "1")
    try:
        wait_until(lambda: engine.status("other")["status"] == "succeeded", "other runs", 60)
        wait_until(lambda: "waiting_for_topic" in engine.status("inbox"), "inbox waits", 60)
        assert engine.status("inbox")["worker"] is None, "the worker let it go"
        steplog.send("inbox", "work", {"hello": 1}, db=str(engine.db))
        wait_until(lambda: engine.status("inbox")["status"] == "succeeded", "inbox woke", 60)
        wait_until(lambda: engine.status("nap")["status"] == "succeeded", "nap woke", 60)
    finally:
        err = stop(worker)
    assert engine.status("inbox")["result"] == {"got": [{"hello": 1}]}, err
    nap = engine.status("nap")["result"]
    wake = nap["before"] + 12
    late = nap["after"] - wake
    assert 0 <= late < 1.0, f"woke {late:.3f} s after its time under a worker"
    ((other_done,),) = engine.query(
        "SELECT ts FROM event WHERE run_id = 'other' AND kind = 'run_finished'"
    )
    assert other_done < wake, "the one slot ran another run while nap slept"
    claims = engine.query(
        "SELECT count(*) FROM event WHERE run_id = 'nap' AND kind = 'worker_claimed'"
    )
    assert claims == [(2,)], "claimed when queued and once more when due: no spinning"
