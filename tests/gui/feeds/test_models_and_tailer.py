"""Qt item models (qtmodeltester) and the tailer, on logs written by real engines."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

from PySide6.QtCore import Qt

from helpers.engine import Engine, kill_group
from helpers.gui import assert_same
from helpers.witness import witness_args
from steplog.log.reader import LogRepository
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import LogState
from steplog_gui.views.records_model import RecordsModel
from steplog_gui.views.runs_model import RunsModel


def started_monitor(qtbot, path: Path) -> Monitor:  # type: ignore[no-untyped-def]
    monitor = Monitor(path)
    monitor.start()
    return monitor


def test_runs_model_passes_the_model_tester_while_runs_arrive(
    qtbot,
    qtmodeltester,
    crashed_run: Engine,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    monitor = started_monitor(qtbot, crashed_run.db)
    try:
        model = RunsModel(monitor)
        qtmodeltester.check(model)
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=10_000)
        done = crashed_run.run(*witness_args(crashed_run, "R2", tmp_path / "w2.db", 1))
        assert done.returncode == 0, done.stderr
        qtbot.waitUntil(
            lambda: model.rowCount() == 2 and monitor.run("R2").status == "succeeded",
            timeout=10_000,
        )
        qtmodeltester.check(model)
        assert model.run_id(0) == "R2"  # newest first
        row = {
            model.headerData(c, Qt.Orientation.Horizontal): model.index(1, c).data()
            for c in range(model.columnCount())
        }
        assert (
            row["Run"] == "R" and row["Status"] == "succeeded" and row["Agent"].endswith(":witness")
        )
        assert row["Steps"].startswith("15")
    finally:
        monitor.stop()


def test_records_model_passes_the_model_tester_on_append_and_replace(qtmodeltester) -> None:  # type: ignore[no-untyped-def]
    model = RecordsModel([("Key", "key"), ("Status", "status")])
    qtmodeltester.check(model)
    model.set_records([{"key": "a", "status": 1}])
    model.set_records([{"key": "a", "status": 1}, {"key": "b", "status": None}])
    qtmodeltester.check(model)
    assert model.index(1, 1).data() == ""
    model.set_records([{"key": "<b>c</b>", "status": 2}])
    qtmodeltester.check(model)
    assert model.rowCount() == 1 and model.index(0, 0).data() == "<b>c</b>"


def test_the_tailer_delivers_a_live_run_in_order_and_quickly(
    qtbot, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    monitor = started_monitor(qtbot, engine.db)  # the log does not exist yet
    seen: list[int] = []
    monitor.events_applied.connect(lambda evs: seen.extend(e.id for e in evs))
    proc = engine.start(*witness_args(engine, "live", tmp_path / "w.db", 20, 0.02))
    try:
        qtbot.waitUntil(
            lambda: monitor.run("live") is not None and monitor.run("live").status == "succeeded",
            timeout=30_000,
        )
    finally:
        kill_group(proc)
        monitor.stop()
    # The history found on opening came in columns; every later event once, in order, after it.
    assert seen == list(range(monitor.history_upto + 1, len(seen) + monitor.history_upto + 1))
    repo = LogRepository(engine.db)
    try:
        from_scratch = LogState()
        from_scratch.apply(repo.events_since(0, limit=10**9))
    finally:
        repo.close()
    assert seen[-1] == from_scratch.bookmark
    assert_same(monitor.run("live"), from_scratch.runs["live"], "history loaded, then tailed")
    assert monitor.problem == ""


def test_each_commit_reaches_the_model_without_a_manual_refresh(
    qtbot, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    done = engine.run(*witness_args(engine, "first", tmp_path / "w.db", 1))
    assert done.returncode == 0, done.stderr
    monitor = started_monitor(qtbot, engine.db)
    try:
        qtbot.waitUntil(
            lambda: monitor.run("first") is not None and monitor.run("first").terminal,
            timeout=10_000,
        )
        for i in range(5):  # commits from another connection, as an engine writes them
            conn = sqlite3.connect(engine.db, isolation_level=None)
            conn.execute(
                "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, 0, "
                "'run_created', '{}')",
                (f"probe{i}", time.time()),
            )
            conn.close()
            qtbot.waitUntil(lambda i=i: monitor.run(f"probe{i}") is not None, timeout=5_000)
    finally:
        monitor.stop()


def test_a_deleted_replaced_or_foreign_log_shows_a_message_and_never_crashes(
    qtbot,
    crashed_run: Engine,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    path = tmp_path / "watched" / "steplog.db"
    path.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):
        if Path(str(crashed_run.db) + suffix).exists():
            shutil.copy(str(crashed_run.db) + suffix, str(path) + suffix)
    monitor = started_monitor(qtbot, path)
    resets: list[bool] = []
    monitor.state_reset.connect(lambda: resets.append(True))
    try:
        qtbot.waitUntil(
            lambda: monitor.run("R") is not None and monitor.run("R").terminal, timeout=10_000
        )
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        qtbot.waitUntil(lambda: "deleted" in monitor.problem, timeout=5_000)
        assert monitor.run("R") is not None  # what was read before stays on screen

        sqlite3.connect(path).execute(
            "CREATE TABLE stranger (x)"
        ).connection.commit()  # a foreign file appears
        qtbot.waitUntil(lambda: "not a steplog log" in monitor.problem, timeout=5_000)

        os.unlink(path)
        shutil.copy(crashed_run.db, path)  # replaced by a (checkpointed) steplog log
        for suffix in ("-wal", "-shm"):
            if Path(str(crashed_run.db) + suffix).exists():
                shutil.copy(str(crashed_run.db) + suffix, str(path) + suffix)
        qtbot.waitUntil(
            lambda: monitor.problem == "" and monitor.run("R") is not None, timeout=5_000
        )
    finally:
        monitor.stop()


def test_a_chat_decision_reads_as_the_models_answer_then_its_metadata() -> None:
    import json

    from steplog_gui.views.step_detail import decision_text

    recorded = json.dumps(
        {
            "text": '{"category": "billing", "reply": "Hi Dana,\\n\\nSorry."}',
            "model": "offline",
            "finish_reason": "stop",
            "usage": {"input_tokens": 3},
        }
    )
    assert (
        decision_text(recorded)
        == "category: billing\nreply:\n    Hi Dana,\n\n    Sorry.\n\n— model offline, finish stop"
    )
    nested = json.dumps({"text": '{"items": [1, 2]}', "model": "m"})
    assert decision_text(nested) == '{\n  "items": [\n    1,\n    2\n  ]\n}\n\n— model m'
    assert (
        decision_text(json.dumps({"text": "plain words", "model": "m"}))
        == "plain words\n\n— model m"
    )
    assert decision_text("not json <b>at all</b>") == "not json <b>at all</b>"
    assert decision_text(None) == ""


def test_a_running_run_whose_engine_died_reads_stopped_with_what_to_do(
    qtbot, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    crashed = engine.run(
        *witness_args(engine, "orphan", tmp_path / "w.db", 3),
        env={"STEPLOG_CRASH_AT": "after_step_record@2"},
    )
    assert crashed.returncode == 86, crashed.stderr
    monitor = started_monitor(qtbot, engine.db)
    try:
        model = RunsModel(monitor)
        qtbot.waitUntil(
            lambda: model.rowCount() == 1 and monitor.run("orphan") is not None, timeout=10_000
        )
        assert monitor.run("orphan").status == "running"  # what the log says
        status = model.index(0, 1)  # Run, Status, ...: the status is the second column
        assert status.data() == "stopped"  # what is true: no engine is working on it
        assert "is gone; Resume run continues it" in status.data(Qt.ItemDataRole.ToolTipRole)
    finally:
        monitor.stop()
