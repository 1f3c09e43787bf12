"""Opening a run in one columnar pass gives exactly what folding its events one by one gives.

``bulk_load`` replaces the per-event fold when a log is opened (a 100k-step run in a fraction of
a second instead of ~6 s); live tailing then goes on with the fold. So for real logs written by
real engines (kills, a crash mid-effect, retries, a budget run out and raised, model calls) and
for hand-written corner cases, at *every* cut point: bulk load up to the cut, fold the rest, and
the state must equal folding everything.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group, storm
from helpers.gui import assert_same
from helpers.paths import AGENTS
from helpers.witness import witness_args
from steplog.log.db import open_log
from steplog.log.reader import LogRepository
from steplog.verdict.kills import account
from steplog_gui.model.bulk_load import add_details, load_details, load_run
from steplog_gui.model.run_state import COMMITTED, FAILED, GAVE_UP, REDONE, RUNNING, LogState


def fold_all(repo: LogRepository) -> LogState:
    state = LogState()
    state.apply(repo.events_since(0, limit=10**9))
    return state


def bulk_then_fold(repo: LogRepository, upto: int) -> LogState:
    """What the tailer does: a bulk load up to ``upto`` (both passes), then the fold."""
    state = LogState()
    for run_id in repo.run_ids(upto):
        run = load_run(repo, run_id, upto)
        add_details(run, load_details(repo, run_id, upto))
        state.runs[run_id] = run
    state.bookmark = upto
    state.apply(repo.events_since(upto, limit=10**9))
    return state


def assert_every_cut_agrees(db: Path, *, step: int = 1) -> LogState:
    """Bulk load then fold equals the fold at every cut; and the kills both find are the deaths
    ``steplog verdict`` reads from the same events (``steplog.verdict.kills``)."""
    repo = LogRepository(db)
    try:
        folded = fold_all(repo)
        events = repo.events_since(0, limit=10**9)
        ids = [e.id for e in events]
        for upto in [0, *ids[::step], ids[-1]]:
            state = bulk_then_fold(repo, upto)
            assert list(state.runs) == list(folded.runs), f"cut at {upto}: runs in another order"
            for run_id, run in folded.runs.items():
                assert_same(state.runs[run_id], run, f"cut at event {upto}, run {run_id}")
        for run_id, run in folded.runs.items():
            deaths = account([e for e in events if e.run_id == run_id]).deaths
            assert [(k.killed_incarnation, k.ts, k.exact, k.resumed_at) for k in run.kills] == [
                (d.incarnation, d.at, d.exact, d.taken_over_at) for d in deaths
            ], f"run {run_id}: the monitor's kills are not the verdict's deaths"
        return folded
    finally:
        repo.close()


@pytest.mark.backends(
    "sqlite", "postgres"
)  # on PostgreSQL: the same repository, its JSON reads in jsonb
def test_a_crash_mid_effect_and_its_resume_load_as_they_fold(crashed_run: Engine) -> None:
    folded = assert_every_cut_agrees(crashed_run.db)
    run = folded.runs["R"]
    assert list(run.executions["outcome"]).count(REDONE) == 1 and run.status == "succeeded"
    assert run.executions["tokens"].sum() > 0  # the witness agent's model calls reported tokens


def test_kills_retries_and_a_raised_budget_load_as_they_fold(
    engine: Engine, tmp_path: Path
) -> None:
    # Three SIGKILLs mid-run; the first two relaunches are told when (as Kill now does), the last
    # not.
    args = witness_args(engine, "K", tmp_path / "w.db", 6, pause=0.05)
    at: float | None = None
    for _ in range(3):
        proc = engine.start(*args, *(["--killed-at", repr(at)] if at is not None else []))
        wanted = engine.events("step_committed") + 3
        deadline = time.monotonic() + 60
        while engine.events("step_committed") < wanted:
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the engine ended before it was killed"
            )
            time.sleep(0.02)
        at = kill_group(proc)
    done = engine.run(*args)
    assert done.returncode == 0, done.stderr
    # A budget run out (gave up between steps), raised, and the run finished.
    noop = ["run", f"{AGENTS}:noop", "--run-id", "G", "--db", str(engine.db), "--param", "n=6"]
    assert engine.run(*noop, "--max-steps", "3").returncode == 3
    assert engine.run(*noop, "--max-steps", "10").returncode == 0
    # Retries until the retry budget says stop (step_attempt_failed, then gave up mid-step).
    assert (
        engine.run(
            "run", "flaky", "--run-id", "F", "--db", str(engine.db), "--max-retries", "3"
        ).returncode
        == 3
    )
    folded = assert_every_cut_agrees(engine.db, step=3)
    assert len(folded.runs["K"].kills) == 3 and sum(k.exact for k in folded.runs["K"].kills) == 2
    assert GAVE_UP in folded.runs["G"].executions["outcome"]
    assert FAILED in folded.runs["F"].executions["outcome"]


def test_a_kill_storm_loads_as_it_folds(engine: Engine, tmp_path: Path) -> None:
    result = storm(
        engine,
        witness_args(engine, "S", tmp_path / "w.db", 8, pause=0.02),
        random.Random(7),
        4,
        low=0.3,
        high=0.9,
    )
    assert result.exit_code == 0
    assert_every_cut_agrees(engine.db, step=2)


def write_events(db: Path, events: list[tuple[Any, ...]]) -> None:
    """Append hand-written events to a real, empty log: (id, run, ts, incarnation, kind, seq,
    data)."""
    open_log(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO event (id, run_id, ts, incarnation, kind, seq, data) VALUES (?, ?, ?, ?, "
            "?, ?, ?)",
            [
                (i, r, ts, inc, k, s, d if isinstance(d, str) else json.dumps(d))
                for i, r, ts, inc, k, s, d in events
            ],
        )
    conn.close()


def test_corner_cases_load_as_they_fold(tmp_path: Path) -> None:
    """Sparse ids (pruned rows), two runs interleaved, a step started again while still open,
    a late event of a taken-over engine, a decision after an effect, a damaged payload, a step
    left open by a failed run, a reopened run, an event kind the monitor does not know."""
    db = tmp_path / "log.db"
    u = {"usage": {"steps": 0, "tokens": 5, "executions": 1}}
    write_events(
        db,
        [
            (3, "a", 10.0, 0, "run_created", None, {"agent": "x", "budget": {"steps": 9}}),
            (7, "a", 10.1, 1, "lease_acquired", None, {"pid": 11, "host": "h"}),
            (8, "b", 10.15, 0, "run_created", None, {"agent": "y"}),
            (9, "a", 10.2, 1, "step_started", 1, {"name": "one", "kind": "call", **u}),
            (12, "a", 10.3, 1, "effect_started", 1, {"key": "a:1"}),
            (
                13,
                "a",
                10.35,
                1,
                "decision_recorded",
                1,
                {"tokens_in": 2, "tokens_out": 3, "estimated": True, **u},
            ),
            (14, "a", 10.4, 1, "step_started", 1, {"name": "one again", "kind": "call", **u}),
            (15, "b", 10.45, 1, "lease_acquired", None, {"pid": 12}),
            (16, "b", 10.5, 1, "step_started", 1, {"name": "b1", "kind": "chat"}),
            (17, "a", 10.5, 1, "decision_recorded", 1, "{not json"),
            (20, "a", 10.6, 1, "something_new", 1, {}),
            (
                21,
                "a",
                11.0,
                2,
                "lease_acquired",
                None,
                {"pid": 13, "previous_pid": 11, "killed_at": 10.55},
            ),
            (22, "a", 11.05, 1, "effect_completed", 1, {"key": "a:1"}),
            (23, "a", 11.1, 2, "step_started", 1, {"name": "one", "kind": "call", **u}),
            (24, "a", 11.2, 2, "step_committed", 1, {"usage": {"steps": 1, "tokens": 5}}),
            (25, "a", 11.3, 2, "step_started", 2, {"name": "two", "kind": "call"}),
            (26, "b", 11.4, 1, "run_finished", None, {"status": "failed", "reason": "boom"}),
            (30, "a", 11.5, 2, "step_attempt_failed", 2, {"error": "e", "will_retry": True}),
            (31, "a", 11.6, 2, "run_finished", None, {"status": "gave_up", "reason": "steps 1/1"}),
            (
                32,
                "a",
                12.0,
                9,
                "budget_changed",
                None,
                {"steps": 20, "reopened": True},
            ),  # not the dead one's
            (33, "a", 12.1, 3, "lease_acquired", None, {"pid": 14, "previous_pid": 13}),
            (34, "a", 12.2, 3, "step_started", 2, {"name": "two", "kind": "call"}),
            (35, "a", 12.3, 3, "lease_released", None, {"usage": {"steps": 1}}),
            (40, "c", 13.0, 1, "lease_acquired", None, {"pid": 15}),
            (41, "c", 13.1, 1, "step_started", 1, {"name": "c1", "kind": "chat"}),
            (42, "c", 13.2, 1, "run_finished", None, {"status": "gave_up", "reason": "tokens"}),
            (50, "d", 14.0, 1, "lease_acquired", None, {"pid": 16}),
            (51, "d", 14.1, 1, "step_started", 1, {"name": "d1", "kind": "chat"}),
            (52, "d", 15.0, 2, "lease_acquired", None, {"pid": 17, "previous_pid": 16}),
            (53, "d", 15.1, 2, "step_started", 1, {"name": "d1", "kind": "chat"}),
        ],
    )
    folded = assert_every_cut_agrees(db)
    a, b, c = folded.runs["a"], folded.runs["b"], folded.runs["c"]
    assert list(a.executions["outcome"]) == [RUNNING, REDONE, COMMITTED, FAILED, GAVE_UP, RUNNING]
    assert a._open == {2: 5} and list(b.executions["outcome"]) == [FAILED]
    assert (
        list(c.executions["outcome"]) == [GAVE_UP] and -1 not in c.step_names
    )  # no marker: a step gave up
    # The engine that wrote run_finished let go cleanly: the takeover after the reopening is no
    # kill, by the verdict's rule (steplog.verdict.kills), which the monitor reads with.
    assert [(k.killed_incarnation, k.ts, k.exact) for k in a.kills] == [(1, 10.55, True)]
    d = folded.runs["d"]
    assert [(k.killed_incarnation, k.ts, k.exact) for k in d.kills] == [(1, 14.1, False)]
    assert list(d.executions["outcome"]) == [REDONE, RUNNING]  # dated by its own last event


def test_an_empty_log_and_a_run_with_only_its_creation_load(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    open_log(db).close()
    repo = LogRepository(db)
    try:
        assert repo.max_event_id() == 0 and repo.run_ids(0) == []
    finally:
        repo.close()
    write_events(db, [(1, "only", 5.0, 0, "run_created", None, {"agent": "z"})])
    assert_every_cut_agrees(db)


@pytest.mark.slow
def test_a_long_noop_run_loads_as_it_folds(engine: Engine) -> None:
    done = engine.run(
        "run",
        f"{AGENTS}:noop",
        "--run-id",
        "N",
        "--db",
        str(engine.db),
        "--param",
        "n=3000",
        "--sync",
        "normal",
    )
    assert done.returncode == 0, done.stderr
    repo = LogRepository(engine.db)
    try:
        folded = fold_all(repo)
        upto = repo.max_event_id()
        assert_same(bulk_then_fold(repo, upto).runs["N"], folded.runs["N"], "whole log")
        assert_same(
            bulk_then_fold(repo, upto // 2).runs["N"], folded.runs["N"], "half, then folded"
        )
    finally:
        repo.close()


@pytest.mark.backends("sqlite", "postgres")
def test_run_control_loads_as_it_folds(engine: Engine, tmp_path: Path) -> None:
    """A run that waits, is signalled and finishes; a fork with its copied prefix that waits; a
    cancelled run; a failed run retried: every cut of the log loads as it folds."""
    from steplog_gui.model.run_state import COPIED

    db = str(engine.db)
    approval = ["run", f"{AGENTS}:approval", "--db", db, "--param", f"witness={tmp_path / 'w.db'}"]
    assert engine.run(*approval, "--run-id", "W", "--exit-when-waiting").returncode == 6
    assert (
        engine.run("signal", "W", "approve", "--db", db, "--data", '{"approved": true}').returncode
        == 0
    )
    assert engine.run(*approval, "--run-id", "W").returncode == 0
    assert (
        engine.run(
            "fork", "W", "--at-step", "5", "--run-id", "F", "--db", db, "--exit-when-waiting"
        ).returncode
        == 6
    )
    assert engine.run("cancel", "F", "--db", db).returncode == 0
    fixed = tmp_path / "fixed"
    fixable = [
        "run",
        f"{AGENTS}:fixable",
        "--run-id",
        "R",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        f"fixed_when={fixed}",
    ]
    assert engine.run(*fixable).returncode == 4
    fixed.touch()
    assert engine.run("retry", "R", "--db", db).returncode == 0
    folded = assert_every_cut_agrees(engine.db, step=2)
    assert folded.runs["W"].status == "succeeded" and folded.runs["W"].waiting_for is None
    fork = folded.runs["F"]
    assert fork.forked_from == ("W", 5) and fork.status == "cancelled"
    assert sorted(fork.executions["seq"][fork.executions["outcome"] == COPIED].tolist()) == [
        1,
        2,
        3,
        4,
    ]
    assert fork.step_names[1][0] == "compute 0"
    assert folded.runs["R"].status == "succeeded"


def test_a_log_opened_in_slices_lists_its_runs_in_order_then_tails(
    qtbot,
    qtmodeltester,
    engine: Engine,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    monkeypatch,
) -> None:
    """Opening hands runs over a slice at a time (here one run per slice), oldest first, the runs
    list newest first all along; the details come after; then a new run arrives by tailing."""
    from steplog_gui.feeds import tailer
    from steplog_gui.feeds.monitor import Monitor
    from steplog_gui.views.runs_model import RunsModel

    monkeypatch.setattr(tailer, "SLICE_S", 0.0)
    for run_id in ("first", "second", "third"):
        done = engine.run(
            "run", f"{AGENTS}:noop", "--run-id", run_id, "--db", str(engine.db), "--param", "n=5"
        )
        assert done.returncode == 0, done.stderr
    monitor = Monitor(engine.db)
    model = RunsModel(monitor)
    qtmodeltester.check(model)
    slices: list[list[str]] = []
    monitor.runs_added.connect(lambda ids: slices.append(list(ids)))
    monitor.start()
    try:
        # the list reads its rows itself; the monitor's slices come as they did
        qtbot.waitUntil(
            lambda: model.rowCount() == 3 and len(slices) == 3 and not monitor.catching_up,
            timeout=10_000,
        )
        assert slices == [["first"], ["second"], ["third"]]
        assert [model.run_id(r) for r in range(3)] == ["third", "second", "first"]
        assert all(
            monitor.run(r).step_names and len(monitor.run(r).usage_series)
            for r in ("first", "third")
        )  # type: ignore[union-attr]
        qtmodeltester.check(model)
        done = engine.run(
            "run", f"{AGENTS}:noop", "--run-id", "fourth", "--db", str(engine.db), "--param", "n=5"
        )
        assert done.returncode == 0, done.stderr
        qtbot.waitUntil(
            lambda: (r := monitor.run("fourth")) is not None and r.terminal, timeout=10_000
        )
        assert model.run_id(0) == "fourth" and monitor.run("fourth").steps_committed == 5  # type: ignore[union-attr]
    finally:
        monitor.stop()
