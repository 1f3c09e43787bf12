"""The monitor on a PostgreSQL log: runs of other processes live through ``LISTEN/NOTIFY`` (no
file, nothing polled), a fleet's hosts, Kill now refused for an engine on another machine, and
a lost server connection said and recovered from. (Bulk open vs fold on PostgreSQL and the
worker's host are the same tests as on SQLite: ``test_bulk_load`` and ``test_queue_in_monitor``
run on both backends.)"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog.log.db import open_log
from steplog.log.location import PgUrl
from steplog_gui.main_window import MainWindow
from steplog_gui.views.runs_model import HOST, host_text

pytestmark = pytest.mark.backends("postgres")


def _tailer(window: MainWindow) -> Any:
    return window.monitor._tailer  # noqa: SLF001 - what the monitor listens and reads with


def _write(db: PgUrl, *events: tuple[str, str, int, str | None, dict[str, Any]]) -> int:
    """Events appended through the engine's own log connection, in one transaction (with the run
    row a ``run_created`` comes with); the newest id."""
    conn = open_log(db)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for run_id, kind, incarnation, seq, data in events:
            if kind == "run_created":  # the engine writes a run's row with its first event
                conn.execute(
                    "INSERT INTO run (id, agent, created_at, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (run_id, data.get("agent", "?"), time.time(), time.time()),
                )
            conn.execute(
                "INSERT INTO event (run_id, ts, incarnation, kind, seq, data) VALUES (?, ?, ?, ?, "
                "?, ?)",
                (run_id, time.time(), incarnation, kind, seq, json.dumps(data)),
            )
        conn.execute("COMMIT")
        return int(conn.execute("SELECT max(id) FROM event").fetchone()[0])
    finally:
        conn.close()


def test_runs_of_other_processes_appear_and_advance_live_by_notification(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(window.monitor.path, PgUrl)
    assert (
        "postgresql://" in window.windowTitle() and window.monitor.problem == ""
    )  # empty database: waits
    assert "LISTEN steplog_event" in window.statusBar().currentMessage()
    tailer = _tailer(window)
    assert tailer._observer is None and not tailer._worker._poll.isActive()  # noqa: SLF001 - no watch, no poll
    procs = [
        engine.start(
            "run",
            f"{AGENTS}:witness",
            "--run-id",
            rid,
            "--db",
            str(engine.db),
            "--param",
            "n=4",
            "--param",
            f"witness={tmp_path / (rid + '.db')}",
            "--param",
            "pause=0.3",
        )
        for rid in ("a", "b")
    ]
    try:
        qtbot.waitUntil(
            lambda: all(window.monitor.run(r) is not None for r in ("a", "b")), timeout=30_000
        )
        seen = {r: window.monitor.run(r).steps_committed for r in ("a", "b")}  # type: ignore[union-attr]
        qtbot.waitUntil(
            lambda: all(window.monitor.run(r).status == "succeeded" for r in ("a", "b")),  # type: ignore[union-attr]
            timeout=60_000,
        )
        for p in procs:
            assert p.wait(timeout=30) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(window.monitor.run(r).steps_committed > seen[r] for r in ("a", "b"))  # type: ignore[union-attr]
    assert tailer.notifications > 0
    run = window.monitor.run("a")
    assert run is not None and host_text(run)[0] == socket.gethostname()
    model = window.runs_view.model()
    row = next(i for i in range(model.rowCount()) if model.index(i, 0).data() == "a")
    assert model.index(row, HOST).data() == socket.gethostname()


def test_every_commit_of_another_connection_is_folded_by_notification(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    """Each of 30 events committed, one at a time, by another connection reaches the monitor's
    state, pushed by a notification (nothing polled). How fast is measured in tests/benchmarks
    (``test_commit_to_model_latency_on_postgresql``)."""
    _write(engine.db, ("lat", "run_created", 0, None, {"agent": "probe"}))
    qtbot.waitUntil(lambda: window.monitor.run("lat") is not None, timeout=15_000)
    tailer = _tailer(window)
    arrived: set[int] = set()
    window.monitor.events_applied.connect(lambda evs: arrived.update(e.id for e in evs))
    for i in range(30):
        before = tailer.notifications
        newest = _write(engine.db, ("lat", "budget_changed", 0, None, {"i": i}))
        qtbot.waitUntil(lambda newest=newest: newest in arrived, timeout=30_000)
        assert tailer.notifications > before


def test_an_event_held_back_behind_an_open_transaction_is_shown_once_that_one_rolls_back(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    """Writers of different runs commit side by side: b's event (a higher id) is committed and
    notified while a's lower id is still open, so the monitor must not read past a's yet. When a
    rolls back nobody is notified again; the monitor looks again by itself and shows b's."""
    from steplog.log.db import RUN_WRITE

    _write(
        engine.db,
        ("a", "run_created", 0, None, {"agent": "probe"}),
        ("b", "run_created", 0, None, {"agent": "probe"}),
    )
    qtbot.waitUntil(lambda: window.monitor.run("b") is not None, timeout=15_000)
    insert = (
        "INSERT INTO event (run_id, ts, incarnation, kind, seq, data) VALUES (?, ?, 0, "
        "'budget_changed', NULL, '{}')"
    )
    applied: set[int] = set()
    window.monitor.events_applied.connect(lambda evs: applied.update(e.id for e in evs))
    a, b = open_log(engine.db), open_log(engine.db)
    try:
        a.execute(RUN_WRITE)
        a.execute(insert, ("a", time.time()))
        b.execute(RUN_WRITE)
        high = int(b.execute(insert + " RETURNING id", ("b", time.time())).fetchone()[0])
        notified = _tailer(window).notifications
        b.execute("COMMIT")
        qtbot.waitUntil(lambda: _tailer(window).notifications > notified, timeout=5_000)
        qtbot.wait(300)
        assert high not in applied  # held back, not skipped past
        a.execute("ROLLBACK")
        qtbot.waitUntil(lambda: high in applied, timeout=5_000)
    finally:
        a.close()
        b.close()


def test_kill_now_is_refused_for_an_engine_on_another_machine_and_cancel_is_offered(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    _write(
        engine.db,
        ("far", "run_created", 0, None, {"agent": "elsewhere:agent"}),
        (
            "far",
            "lease_acquired",
            1,
            None,
            {"pid": 4242, "host": "worker-7.example", "previous_pid": None},
        ),
    )
    qtbot.waitUntil(lambda: window.monitor.run("far") is not None, timeout=15_000)
    window.select_run("far")
    run = window.monitor.run("far")
    assert run is not None and run.engine_elsewhere == "worker-7.example"
    assert not window.act_kill.isEnabled() and not window.auto_kill.isEnabled()
    why = window.act_kill.toolTip()
    assert "worker-7.example" in why and "Cancel run" in why, why
    assert window.auto_kill.toolTip() == why
    assert window.control.act_cancel.isEnabled()
    # the same run worked on this host again: the kill panel is back to what it says today
    _write(
        engine.db,
        (
            "far",
            "lease_acquired",
            2,
            None,
            {"pid": 4243, "host": socket.gethostname(), "previous_pid": 4242},
        ),
    )
    qtbot.waitUntil(lambda: window.monitor.run("far").engine_elsewhere is None, timeout=15_000)  # type: ignore[union-attr]
    assert window.auto_kill.isEnabled() and "Cancel run" not in window.act_kill.toolTip()


def test_a_lost_connection_is_said_and_the_tail_resumes_after_reconnecting(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    _write(engine.db, ("r1", "run_created", 0, None, {"agent": "probe"}))
    qtbot.waitUntil(lambda: window.monitor.run("r1") is not None, timeout=15_000)
    problems: list[str] = []
    window.monitor.problem_changed.connect(problems.append)
    with psycopg.connect(str(engine.db), autocommit=True) as admin:  # as a server restart would
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid()"
        )
    qtbot.waitUntil(lambda: any("lost the connection" in p for p in problems), timeout=15_000)
    assert all(
        "@" not in p or ":" not in p.split("@")[0].split("//")[-1] for p in problems
    )  # no password shape
    qtbot.waitUntil(lambda: window.monitor.problem == "", timeout=15_000)
    _write(engine.db, ("r2", "run_created", 0, None, {"agent": "probe"}))
    qtbot.waitUntil(lambda: window.monitor.run("r2") is not None, timeout=15_000)
    assert _tailer(window)._commit_watch.reconnects >= 1  # noqa: SLF001
