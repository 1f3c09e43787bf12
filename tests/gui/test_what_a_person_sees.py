"""What a person sees in the monitor, checked on the real window (offscreen) over logs written by
real engines: the step detail follows the selected run, About says what the window does, long run
ids fit, colours follow the theme, empty and failed runs draw honestly, kill labels stay in view."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import answer_next_modal, crashed_run, gui_env, settings, window  # noqa: F401 (fixtures)
from PySide6.QtWidgets import QDialog

from conftest import AGENTS, Engine
from steplog_gui.main_window import MainWindow
from steplog_gui.step_detail import PROMPT

NOOP = f"{AGENTS}:noop"


def finished(engine: Engine, run_id: str, *args: str, agent: str = NOOP) -> None:
    done = engine.run("run", agent, "--run-id", run_id, "--db", str(engine.db), *args)
    assert done.returncode == 0, done.stderr


def shown(qtbot, window: MainWindow, run_id: str) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: window.runs_model.row_of(run_id) >= 0, timeout=10_000)
    window.select_run(run_id)
    qtbot.waitUntil(lambda: window._run_id == run_id, timeout=5_000)


def test_the_step_detail_shows_no_step_of_the_run_selected_before(  # type: ignore[no-untyped-def]
        qtbot, window: MainWindow, crashed_run: Engine) -> None:
    finished(crashed_run, "other", "--param", "n=5")
    shown(qtbot, window, "R")
    window.timeline.step_selected.emit("R", 2)  # what a click on step 2's bar sends
    qtbot.waitUntil(lambda: window.detail.header.text().startswith("#2 "), timeout=5_000)
    assert window.detail.decision.toPlainText() or window.detail.result.toPlainText()

    shown(qtbot, window, "other")
    qtbot.wait(300)  # a read of R's step still under way must not come back either
    assert window.detail.header.text() == PROMPT
    assert window.detail.decision.toPlainText() == window.detail.result.toPlainText() == ""
    assert window.detail.effects.rowCount() == 0


def test_about_says_the_monitor_starts_kills_cancels_and_prunes_runs(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    said: list[str] = []
    answer_next_modal(lambda box: said.append(box.text()))  # type: ignore[attr-defined]
    window.act_about.trigger()
    [text] = said
    assert "read-only" not in text
    for deed in ("starts engines", "kills them", "cancels, retries, forks, signals and prunes runs"):
        assert deed in text, text
    assert str(window.monitor.path) in text


LONG_ID = "triage-20261203-094500-fork-094501-fork-094502-fork-094503"


def test_a_long_run_id_is_cut_in_the_runs_list_and_whole_in_the_fork_dialog(  # type: ignore[no-untyped-def]
        qtbot, window: MainWindow, engine: Engine) -> None:
    from steplog_gui.runs_model import RUN, STATUS, STEPS

    finished(engine, "short", "--param", "n=3")
    finished(engine, LONG_ID, "--param", "n=3")
    window.resize(1280, 720)
    window.size_docks()
    shown(qtbot, window, LONG_ID)
    view, model = window.runs_view, window.runs_model
    qtbot.waitUntil(lambda: model.data(model.index(model.row_of(LONG_ID), STATUS)) == "succeeded", timeout=5_000)
    qtbot.wait(100)
    full = view.fontMetrics().horizontalAdvance(LONG_ID)
    assert view.columnWidth(RUN) < full, "the long id is cut, not given a column of its own width"
    for column in (STATUS, STEPS):  # still in view beside it
        assert view.columnViewportPosition(column) + view.columnWidth(column) <= view.viewport().width() + 2
    row = model.row_of(LONG_ID)
    assert model.data(model.index(row, RUN)) == LONG_ID
    assert model.data(model.index(row, RUN), 3).startswith(LONG_ID)  # ToolTipRole: the whole id

    seen: dict[str, int] = {}

    def look(dialog: QDialog) -> None:
        edit = dialog.run_id  # type: ignore[attr-defined]
        seen["text"] = edit.fontMetrics().horizontalAdvance(edit.text())
        seen["room"] = edit.contentsRect().width()
        dialog.reject()

    answer_next_modal(look)
    window.control.act_fork.trigger()
    assert seen["room"] >= seen["text"], f"the fork's id is cut: {seen}"
