"""The Qt-free read side: since-bookmark queries, data_version, refusals, and the event fold."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from helpers.engine import Engine
from helpers.witness import witness_args
from steplog.log.reader import LogRepository, LogUnavailable
from steplog_gui.model.run_state import COMMITTED, REDONE, LogState
from steplog_gui.model.timeline_data import bars, describe, kill_marks


def test_events_are_read_since_a_bookmark_in_batches(crashed_run: Engine) -> None:
    repo = LogRepository(crashed_run.db)
    try:
        everything = repo.events_since(0, limit=100_000)
        ids = [e.id for e in everything]
        assert (
            ids == sorted(ids) and len(ids) == crashed_run.query("SELECT count(*) FROM event")[0][0]
        )
        first = repo.events_since(0, limit=10)
        rest = repo.events_since(first[-1].id, limit=100_000)
        assert [e.id for e in first + rest] == ids
        assert repo.events_since(ids[-1]) == []
        assert everything[0].kind == "run_created" and isinstance(everything[0].data, dict)
        assert not repo._c().in_transaction  # no read transaction held between refreshes
    finally:
        repo.close()


def test_data_version_moves_only_when_another_connection_commits(
    crashed_run: Engine, tmp_path: Path
) -> None:
    repo = LogRepository(crashed_run.db)
    try:
        v1 = repo.data_version()
        assert repo.data_version() == v1
        done = crashed_run.run(*witness_args(crashed_run, "R2", tmp_path / "w2.db", 1))
        assert done.returncode == 0, done.stderr
        assert repo.data_version() != v1
    finally:
        repo.close()


def test_foreign_corrupt_and_missing_files_are_refused_with_a_message(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.commit()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database at all" * 10)
    before = foreign.read_bytes(), corrupt.read_bytes()
    for path, words in (
        (foreign, "not a steplog log"),
        (corrupt, "not a SQLite database"),
        (tmp_path / "missing.db", "does not exist"),
    ):
        with pytest.raises(LogUnavailable, match=words):
            LogRepository(path).open()
    assert (foreign.read_bytes(), corrupt.read_bytes()) == before  # never modified


def test_the_fold_sees_the_crash_the_redone_step_and_the_resume(crashed_run: Engine) -> None:
    repo = LogRepository(crashed_run.db)
    state = LogState()
    try:
        state.apply(repo.events_since(0, limit=7))  # in two batches, as the tailer delivers them
        state.apply(repo.events_since(state.bookmark, limit=100_000))
        detail = repo.step_detail("R", 8)
    finally:
        repo.close()
    run = state.runs["R"]
    status = crashed_run.status("R")
    assert run.status == "succeeded" and run.incarnation == 2 == status["incarnations"]
    assert run.steps_committed == status["steps_committed"] == 15
    assert run.step_executions == status["step_executions"] == 16
    assert run.redone == 1
    assert len(run.kills) == 1 and run.kills[0].killed_incarnation == 1
    assert run.kills[0].latency is not None and 0 < run.kills[0].latency < 30
    ex = run.executions
    assert len(ex) == 16
    redone = np.nonzero(ex["outcome"] == REDONE)[0]
    assert list(ex["seq"][redone]) == [8] and ex["lane"][redone][0] == 1
    assert sorted(ex["seq"][ex["outcome"] == COMMITTED]) == list(range(1, 16))
    assert int((bars(run, COMMITTED, 0).y0 > 1).sum()) == 8  # seqs 8..15 committed in lane 2
    assert kill_marks(run)[0][1] == 1
    text = describe(run, int(redone[0]), 0)
    assert "apply 1" in text and "redone" in text and "acting" in text
    assert (
        detail is not None
        and detail.effects[0]["key"] == "R:8"
        and detail.effects[0]["attempts"] == 2
    )


def test_a_kill_marker_says_when_the_engine_was_up_and_when_a_step_was_committed() -> None:
    from steplog_gui.model.run_state import Kill
    from steplog_gui.model.timeline_data import kill_label

    assert (
        kill_label(Kill(1, 100.0, True, 100.15, 101.2))
        == "kill → engine up in 0.15 s\nstep committed in 1.20 s"
    )
    assert kill_label(Kill(1, 100.0, True, 100.15, None)) == "kill → engine up in 0.15 s"


def test_a_log_from_before_the_waits_since_keeps_the_waits_start_across_a_kill() -> None:
    """A log written before ``waiting`` carried ``since``: the wait taken up again by the engine
    relaunched after a kill is the same wait (same step, same signal): it began at the first
    ``waiting``; the kill's latency ends there, not at the commit a person's answer brought."""
    from steplog.log.logread import Event
    from steplog_gui.model.timeline_data import kill_label

    events = [
        Event(1, "w", 100.0, 0, "run_created", None, {"agent": "a", "budget": {}}),
        Event(2, "w", 100.1, 1, "lease_acquired", None, {"pid": 1, "previous_pid": None}),
        Event(3, "w", 100.2, 1, "step_started", 1, {"name": "wait approve", "kind": "wait"}),
        Event(4, "w", 100.3, 1, "waiting", 1, {"signal": "approve"}),
        Event(
            5,
            "w",
            110.4,
            2,
            "lease_acquired",
            None,
            {"pid": 2, "previous_pid": 1, "killed_at": 110.0},
        ),
        Event(6, "w", 110.5, 2, "step_started", 1, {"name": "wait approve", "kind": "wait"}),
        Event(7, "w", 110.6, 2, "waiting", 1, {"signal": "approve"}),
        Event(8, "w", 170.0, 2, "step_committed", 1, {"name": "wait approve", "kind": "wait"}),
    ]
    state = LogState()
    state.apply(events[:7])
    run = state.runs["w"]
    assert run.status == "waiting" and run.waiting_since == 100.3
    state.apply(events[7:])
    [kill] = run.kills
    assert kill.latency is not None and abs(kill.latency - 0.6) < 1e-9
    assert kill_label(kill) == "kill → engine up in 0.40 s\nwaiting again in 0.60 s"
