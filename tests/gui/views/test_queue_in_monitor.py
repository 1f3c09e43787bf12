"""The monitor shows the queue: a submitted run reads "queued" (not "stopped"), and once a worker
ran it, which worker did. Followed live, and the same when the log is opened afresh later."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.main_window import MainWindow
from steplog_gui.views.runs_model import status_text


def submit(engine: Engine, run_id: str, witness: Path) -> None:
    done = engine.run(
        "submit",
        f"{AGENTS}:witness",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        "n=2",
        "--param",
        f"witness={witness}",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.backends("sqlite", "postgres")
def test_a_queued_run_reads_queued_and_then_names_the_worker_that_ran_it(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    submit(engine, "q1", tmp_path / "w.db")
    qtbot.waitUntil(lambda: window.monitor.run("q1") is not None, timeout=10_000)
    run = window.monitor.run("q1")
    assert run is not None
    text, why = status_text(run)
    assert text == "queued" and "worker" in (why or "")
    window.select_run("q1")
    qtbot.waitUntil(lambda: window.verdict.labels["verdict"].text() == "queued…", timeout=10_000)
    assert (
        "no engine works on it yet" in window.verdict.evidence.text()
    )  # not "the run is still going"

    worker = engine.start("worker", "--db", str(engine.db), "--drain", "--poll", "0.05")
    try:
        assert worker.wait(timeout=60) == 0, worker.stderr.read() if worker.stderr else ""
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    qtbot.waitUntil(lambda: window.monitor.run("q1").status == "succeeded", timeout=15_000)  # type: ignore[union-attr]
    assert run.worker == (socket.gethostname(), worker.pid)
    assert not run.worker_active  # handed back: the run ended

    reopened = Monitor(engine.db)  # the columnar first load, as a person reopening the log later
    reopened.start()
    try:
        qtbot.waitUntil(lambda: reopened.run("q1") is not None, timeout=10_000)
        again = reopened.run("q1")
        assert again is not None
        assert (again.status, again.worker, again.worker_active) == ("succeeded", run.worker, False)
    finally:
        reopened.stop()


def test_a_run_still_in_the_queue_when_the_log_is_opened_reads_queued(
    qtbot, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    submit(engine, "q2", tmp_path / "w.db")
    monitor = Monitor(engine.db)
    monitor.start()
    try:
        qtbot.waitUntil(lambda: monitor.run("q2") is not None, timeout=10_000)
        run = monitor.run("q2")
        assert run is not None and status_text(run)[0] == "queued"
    finally:
        monitor.stop()
