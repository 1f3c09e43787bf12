"""A plain step is one transaction and one event; what a deferred start costs is accounted for.

The start of a fresh plain step is not written when it begins: a step that commits first is one
``step`` row inserted committed and one ``step_committed`` event that says when it began. A step
that runs long has its start written by the heartbeat, so a person sees it running; a kill inside
a short step leaves no start, and the log's readers count it as one step redone (the upper bound)
and as one engine death inside that step (the poison pill).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import steplog
from helpers.engine import Engine, kill_group
from helpers.paths import ROOT
from steplog.verdict.judge import collect, judge

AGENTS = ROOT / "tests" / "helpers" / "agents_for_tests.py"


def events_of(db: Path, run_id: str) -> list[tuple[str, int | None, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        return [
            (kind, seq, json.loads(data))
            for kind, seq, data in conn.execute(
                "SELECT kind, seq, data FROM event WHERE run_id = ? ORDER BY id", (run_id,)
            )
        ]


def test_a_plain_step_commits_in_one_transaction_with_one_event(db: Path) -> None:
    commits: list[int] = []

    @steplog.agent
    def three(run: steplog.Run) -> int:
        conn = run._journal.conn  # the engine's own connection: count what it sends
        conn.set_trace_callback(lambda sql: commits.append(1) if sql == "COMMIT" else None)
        total = sum(run.step(f"add {i}", int, i) for i in range(3))
        conn.set_trace_callback(None)
        return total

    assert three.run("r", db=db) == 3
    assert len(commits) == 3  # one per step, nothing between them
    steps = [e for e in events_of(db, "r") if e[1] is not None]
    assert [(kind, seq) for kind, seq, _ in steps] == [("step_committed", s) for s in (1, 2, 3)]
    first = steps[0][2]
    assert (first["name"], first["kind"]) == ("add 0", "call")
    with sqlite3.connect(db) as conn:
        started_at, finished_at, status = conn.execute(
            "SELECT started_at, finished_at, status FROM step WHERE run_id = 'r' AND seq = 1"
        ).fetchone()
    assert first["started"] == started_at <= finished_at and status == "committed"


def test_a_step_with_an_effect_writes_its_start_with_the_effect(db: Path) -> None:
    @steplog.agent
    def writer(run: steplog.Run) -> None:
        run.write_file("a.txt", "A")

    writer.run("r", db=db)
    kinds = [kind for kind, seq, _ in events_of(db, "r") if seq == 1]
    assert kinds == ["step_started", "effect_started", "effect_completed", "step_committed"]
    started = next(d for kind, seq, d in events_of(db, "r") if kind == "step_started")
    assert "started" in started  # written late, with when it began


def test_a_long_step_shows_as_running_before_it_commits(engine: Engine) -> None:
    proc = engine.start(
        "run", f"{AGENTS}:patient", "--run-id", "r", "--db", str(engine.db),
        "--param", "n=1", "--param", "pause=3",
    )  # fmt: skip
    try:
        seen_running_at = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if engine.events("step_started", 1) and not engine.events("step_committed", 1):
                seen_running_at = time.monotonic()
                break
            time.sleep(0.05)
        assert seen_running_at is not None, "the step's start never showed while it ran"
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert engine.events("step_committed", 1) == 1
    (data,) = [d for kind, _, d in events_of(engine.db, "r") if kind == "step_started"]
    assert data["name"] == "think 0" and "started" in data


DIES_ONCE = """
import os, signal
import steplog

@steplog.agent
def dies_once(run: steplog.Run, marker: str = "") -> str:
    run.step("one", int, 1)

    def two() -> int:
        if not os.path.exists(marker):  # the first engine dies inside step 2, once
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return 2

    run.step("two", two)
    run.step("three", int, 3)
    return "done"
"""


def test_a_kill_inside_a_short_step_counts_as_one_step_redone(
    engine: Engine, tmp_path: Path
) -> None:
    """The step that killed its engine left no start: the verdict says the kill landed in it,
    counts it as redone once, and the run's executions count it too."""
    agent = tmp_path / "dies_once.py"
    agent.write_text(DIES_ONCE)
    first = engine.run(
        "run", f"{agent}:dies_once", "--run-id", "r", "--db", str(engine.db),
        "--param", f"marker={tmp_path / 'died'}",
    )  # fmt: skip
    assert first.returncode == -9  # SIGKILL, inside step 2
    assert engine.events("step_started", 2) == 0  # no trace of step 2's start
    resumed = engine.run("run", f"{agent}:dies_once", "--run-id", "r", "--db", str(engine.db))
    assert resumed.returncode == 0, resumed.stderr
    status = engine.status("r")
    assert (status["steps_committed"], status["step_executions"]) == (3, 4)
    verdict = judge(collect(engine.db, "r"))
    (kill,) = verdict.kills
    assert (kill.seq, kill.phase, kill.redone) == (2, "running", 1)
    assert verdict.redone_steps == 1 and verdict.passed


def test_a_retried_step_writes_each_attempt_and_the_next_step_is_one_event_again(
    db: Path,
) -> None:
    failures = [RuntimeError("flaky")]

    def flaky() -> int:
        if failures:
            raise failures.pop()
        return 1

    @steplog.agent(retry=steplog.RetryPolicy(max_attempts=2, initial_interval=0.0))
    def retrying(run: steplog.Run) -> int:
        return run.step("flaky", flaky) + run.step("after", int, 1)

    assert retrying.run("r", db=db) == 2
    by_seq: dict[int, list[str]] = {}
    for kind, seq, _ in events_of(db, "r"):
        if seq is not None:
            by_seq.setdefault(seq, []).append(kind)
    assert by_seq[1] == ["step_started", "step_attempt_failed", "step_started", "step_committed"]
    assert by_seq[2] == ["step_committed"]
