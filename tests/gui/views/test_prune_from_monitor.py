"""Pruning from the monitor: the size it frees is shown first, ``steplog prune`` runs as a child
process (the window never writes the log), and the live tail drops the pruned runs and goes on.
The same on a SQLite file and on a PostgreSQL log (its URL handed over in the environment)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from helpers.engine import Engine
from helpers.gui import open_window
from helpers.paths import AGENTS
from steplog_gui.main_window import MainWindow
from steplog_gui.views.runs_model import RUN_ID_ROLE

NOOP = f"{AGENTS}:noop"

pytestmark = pytest.mark.backends("sqlite", "postgres")


def finished_runs(engine: Engine, *ids: str) -> None:
    for rid in ids:
        done = engine.run("run", NOOP, "--run-id", rid, "--db", str(engine.db), "--param", "n=40")
        assert done.returncode == 0, done.stderr


@pytest.fixture
def window(qtbot, engine: Engine, settings, gui_env: dict[str, str]) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    finished_runs(engine, "old", "kept")
    win = open_window(qtbot, engine, settings, gui_env)
    qtbot.waitUntil(lambda: win.runs_model.rowCount() == 2, timeout=10_000)
    yield win
    win.pruner.wait()
    win.shutdown(stop_engine=True)


def _click_in_dialog(label: str) -> None:
    """Press the button ``label`` of the modal dialog once it is up (it blocks the test
    otherwise)."""

    def press() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, press)
            return
        press.text = box.text()  # type: ignore[attr-defined]
        [button] = [b for b in box.buttons() if b.text() == label]
        button.click()

    QTimer.singleShot(0, press)
    _click_in_dialog.last = press  # type: ignore[attr-defined]


def test_prune_selected_runs_says_what_it_frees_then_the_runs_leave_the_live_list(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    window.select_run("old")
    _click_in_dialog("Prune")
    with qtbot.waitSignal(window.pruner.finished, timeout=30_000) as finished:
        window.act_prune.trigger()
    code, text = finished.args
    assert code == 0 and text.startswith("pruned 1 run (")
    asked = _click_in_dialog.last.text  # type: ignore[attr-defined]
    assert asked.startswith("Remove 1 run, ") and "rows, about" in asked and "kB" in asked

    qtbot.waitUntil(lambda: window.runs_model.rowCount() == 1, timeout=10_000)
    assert window.runs_model.index(0, 0).data(RUN_ID_ROLE) == "kept"
    assert window.monitor.run("old") is None and engine.query(
        "SELECT count(*) FROM run WHERE id = 'old'"
    ) == [(0,)]

    finished_runs(engine, "after")  # the tail goes on past the deleted rows
    qtbot.waitUntil(lambda: window.runs_model.rowCount() == 2, timeout=10_000)
    assert window.monitor.run("after") is not None and window.monitor.run("after").terminal  # type: ignore[union-attr]


def test_a_run_brought_back_by_import_reappears_in_the_monitor(
    qtbot, window: MainWindow, engine: Engine, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "old.jsonl.gz"
    window.pruner.prune(["old"], archive=archive)
    with qtbot.waitSignal(window.pruner.finished, timeout=30_000):
        pass
    qtbot.waitUntil(lambda: window.monitor.run("old") is None, timeout=10_000)
    done = engine.run("import", str(archive), "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    qtbot.waitUntil(
        lambda: window.monitor.run("old") is not None and window.monitor.run("old").terminal,  # type: ignore[union-attr]
        timeout=10_000,
    )
    assert window.runs_model.rowCount() == 2


def test_a_run_that_cannot_be_pruned_is_refused_with_the_reason(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(window.pruner.refused, timeout=10_000) as refused:
        window.pruner.estimate(["no-such-run"])
    assert "no run 'no-such-run'" in refused.args[0]


def test_a_log_with_pruned_runs_reopens_with_exactly_its_runs(
    qtbot: Any, engine: Engine, settings: Any, gui_env: dict[str, str]
) -> None:
    """``steplog prune`` leaves one event that belongs to no run (its run id is ""): a monitor
    opened on the log afterwards lists the runs the log holds, not a blank "stopped" row more."""
    finished_runs(engine, "old", "kept", "newest")
    done = engine.run("prune", "old", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    held = sorted(r for (r,) in engine.query("SELECT id FROM run"))
    assert held == ["kept", "newest"]
    win = open_window(qtbot, engine, settings, gui_env)
    try:
        qtbot.waitUntil(
            lambda: window_runs(win) == held and not win.monitor.catching_up, timeout=10_000
        )
        qtbot.wait(300)  # and nothing else arrives
        assert window_runs(win) == held
        assert sorted(win.monitor.state.runs) == held
    finally:
        win.shutdown(stop_engine=True)


def window_runs(win: MainWindow) -> list[str]:
    model = win.runs_model
    return sorted(model.index(r, 0).data(RUN_ID_ROLE) for r in range(model.rowCount()))
