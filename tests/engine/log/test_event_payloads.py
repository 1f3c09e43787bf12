"""Every event the engine logs has the payload its kind's type says
(``steplog.log.events.PAYLOADS``).

The engine is driven, as real processes, through every kind of event there is: a run killed
mid-effect and resumed, a model decision, a failed attempt, a wait answered by a signal, a
cancel asked of a live engine, a stop that releases the lease, a budget raised on a run that gave
up, a retry, a fork, the queue and a worker, a prune, a message received, a sleep. Then each
logged payload is checked against its type: no required key missing, no key the type does not
document.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from helpers.engine import Engine
from helpers.paths import AGENTS, TIME_AGENTS
from steplog.log.events import PAYLOADS, EventKind, payload_problem


def test_every_kind_of_event_has_a_payload_type() -> None:
    assert set(PAYLOADS) == set(EventKind)


def wait_for_commit(engine: Engine, run_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not engine.query(
        "SELECT 1 FROM event WHERE run_id = ? AND kind = 'step_committed'", run_id
    ):
        assert time.monotonic() < deadline, f"run {run_id} committed no step"
        time.sleep(0.05)


def test_every_payload_the_engine_logs_matches_its_kinds_type(
    engine: Engine, tmp_path: Path
) -> None:
    db, w = str(engine.db), tmp_path / "w.db"

    def ok(*args: str, code: int = 0) -> None:
        done = engine.run(*args, "--db", db)
        assert done.returncode == code, (args, done.stderr)

    # Killed mid-effect by a crash point, then resumed: lease takeover, effects, decisions, commits.
    crashed = engine.run(
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "crashed",
        "--db",
        db,
        "--param",
        "n=3",
        "--param",
        f"witness={w}",
        env={"STEPLOG_CRASH_AT": "after_effect_started@3"},
    )
    assert crashed.returncode == 86, crashed.stderr
    ok(
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "crashed",
        "--param",
        "n=3",
        "--param",
        f"witness={w}",
    )

    # Failed attempts (the run gives up on its retries); a run out of steps, its budget raised
    # again.
    ok("run", "flaky", "--run-id", "flaky", code=3)
    ok("run", f"{AGENTS}:noop", "--run-id", "short", "--param", "n=10", "--max-steps", "3", code=3)
    ok("run", f"{AGENTS}:noop", "--run-id", "short", "--param", "n=10", "--max-steps", "20")

    # A failing run retried after its cause is fixed; then forked, queued.
    fixed = tmp_path / "fixed"
    ok(
        "run",
        f"{AGENTS}:fixable",
        "--run-id",
        "fix",
        "--param",
        f"witness={w}",
        "--param",
        f"fixed_when={fixed}",
        code=4,
    )
    fixed.touch()
    ok("retry", "fix")
    ok("fork", "fix", "--at-step", "2", "--run-id", "forked", "--no-start")

    # A wait answered by a signal.
    ok(
        "run",
        f"{AGENTS}:approval",
        "--run-id",
        "wait",
        "--param",
        f"witness={w}",
        "--exit-when-waiting",
        code=6,
    )
    ok("signal", "wait", "approve", "--data", json.dumps({"approved": True}), "--key", "k1")
    ok("run", f"{AGENTS}:approval", "--run-id", "wait", "--param", f"witness={w}")

    # Messages, a sleep and events (issue 33): a recv waiting, answered by a message.
    ok("run", f"{TIME_AGENTS}:receiver", "--run-id", "inbox", "--param", "n=1",
       "--exit-when-waiting", code=6)  # fmt: skip
    ok("send", "inbox", "work", "--data", "1", "--key", "m1")
    ok("run", f"{TIME_AGENTS}:receiver", "--run-id", "inbox")
    ok("run", f"{TIME_AGENTS}:async_sleeper", "--run-id", "nap", "--param", "seconds=0.1")

    # Code changed under a run: refused (another step), then resumed by another version that fits.
    changing = tmp_path / "changing.py"
    source = "import steplog\n\n@steplog.agent\ndef a(run):\n    run.step({!r}, int, 1)\n"
    source += "    run.step('two', int, 2)\n"
    changing.write_text(source.format("one"))
    crashed = engine.run(
        "run",
        f"{changing}:a",
        "--run-id",
        "changed",
        "--db",
        db,
        env={"STEPLOG_CRASH_AT": "after_step_record@1"},
    )
    assert crashed.returncode == 86, crashed.stderr
    changing.write_text(source.format("the other one"))
    ok("run", f"{changing}:a", "--run-id", "changed", code=6)
    changing.write_text(source.format("one") + "# a comment: another version that fits\n")
    ok("run", f"{changing}:a", "--run-id", "changed")

    # A cancel asked of a live engine, and a stop (SIGTERM) that releases the lease.
    for run_id, how in (("cancelled", "cancel"), ("stopped", "sigterm")):
        proc = engine.start(
            "run",
            f"{AGENTS}:witness",
            "--run-id",
            run_id,
            "--db",
            db,
            "--param",
            "n=50",
            "--param",
            f"witness={w}",
            "--param",
            "pause=0.05",
        )
        try:
            wait_for_commit(engine, run_id)
            if how == "cancel":
                ok("cancel", run_id, "--reason", "enough")
            else:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()

    # The queue: a run submitted, worked by a worker; then a prune.
    ok("submit", f"{AGENTS}:noop", "--run-id", "queued", "--param", "n=2")
    ok("worker", "--drain", "--poll", "0.05")
    ok("prune", "queued")

    rows = engine.query("SELECT kind, data FROM event ORDER BY id")
    problems = [p for kind, data in rows if (p := payload_problem(kind, json.loads(data or "{}")))]
    assert problems == []
    assert {kind for kind, _ in rows} == set(
        EventKind
    )  # every kind was exercised, so every type was checked
