"""What a person sees in the monitor, checked on the real window (offscreen) over logs written by
real engines: the step detail follows the selected run, About says what the window does, long run
ids fit, colours follow the theme, empty and failed runs draw honestly, kill labels stay in view."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QDialog

from helpers.engine import Engine
from helpers.gui import answer_next_modal
from helpers.paths import AGENTS
from steplog_gui.main_window import MainWindow
from steplog_gui.views.step_detail import PROMPT

NOOP = f"{AGENTS}:noop"


def finished(engine: Engine, run_id: str, *args: str, agent: str = NOOP) -> None:
    done = engine.run("run", agent, "--run-id", run_id, "--db", str(engine.db), *args)
    assert done.returncode == 0, done.stderr


def shown(qtbot: Any, window: MainWindow, run_id: str) -> None:
    qtbot.waitUntil(lambda: window.runs_model.row_of(run_id) >= 0, timeout=10_000)
    window.select_run(run_id)
    qtbot.waitUntil(lambda: window._run_id == run_id, timeout=5_000)


def test_the_step_detail_shows_no_step_of_the_run_selected_before(
    qtbot: Any, window: MainWindow, crashed_run: Engine
) -> None:
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


def test_about_says_the_monitor_starts_kills_cancels_and_prunes_runs(
    qtbot: Any, window: MainWindow
) -> None:
    said: list[str] = []
    answer_next_modal(lambda box: said.append(box.text()))  # type: ignore[attr-defined]
    window.act_about.trigger()
    [text] = said
    assert "read-only" not in text
    for deed in ("starts engines", "kills them", "cancels, retries, forks, signals and prunes"):
        assert deed in text, text
    assert str(window.monitor.path) in text


LONG_ID = "triage-20261203-094500-fork-094501-fork-094502-fork-094503"


def test_a_long_run_id_is_cut_in_the_runs_list_and_whole_in_the_fork_dialog(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    from steplog_gui.views.runs_model import RUN, STATUS, STEPS

    finished(engine, "short", "--param", "n=3")
    finished(engine, LONG_ID, "--param", "n=3")
    window.resize(1280, 720)
    window.size_docks()
    shown(qtbot, window, LONG_ID)
    view, model = window.runs_view, window.runs_model
    qtbot.waitUntil(
        lambda: model.data(model.index(model.row_of(LONG_ID), STATUS)) == "succeeded", timeout=5_000
    )
    qtbot.wait(100)
    full = view.fontMetrics().horizontalAdvance(LONG_ID)
    assert view.columnWidth(RUN) < full, "the long id is cut, not given a column of its own width"
    for column in (STATUS, STEPS):  # still in view beside it
        right = view.columnViewportPosition(column) + view.columnWidth(column)
        assert right <= view.viewport().width() + 2
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
    window.control.act_fork.trigger()  # the dialog opens once the step's row is read
    qtbot.waitUntil(lambda: "room" in seen, timeout=10_000)
    assert seen["room"] >= seen["text"], f"the fork's id is cut: {seen}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def colour_runs(window: MainWindow, lane: int, colour: str) -> list[tuple[int, int]]:
    """Runs of pixel columns of the timeline plot, as drawn, whose pixel at the middle of
    ``lane`` is ``colour``: what a person sees as separate bars (a grid line drawn across a
    bar, a pixel or two, does not split it)."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QColor

    plot = window.timeline.plot
    box = plot.getViewBox()
    y = plot.mapFromScene(box.mapViewToScene(QPointF(0, lane))).y()
    image = plot.grab().toImage()
    want = QColor(colour).rgb()
    columns = [x for x in range(image.width()) if image.pixel(x, y) == want]
    runs: list[tuple[int, int]] = []
    for x in columns:
        if runs and x <= runs[-1][1] + 3:
            runs[-1] = (runs[-1][0], x)
        else:
            runs.append((x, x))
    return runs


def test_a_failed_run_shows_every_step_and_every_failed_attempt_however_thin(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    """The demo posting to an outbox that is not there: its three steps commit in a few ms, then
    the post fails three times, a second apart; each of those bars is far below a pixel wide
    at the run's scale. Every one of them is drawn (they were painted over by their outline)."""
    from steplog_gui import theme
    from steplog_gui.model.run_state import COMMITTED, FAILED

    done = engine.run(
        "run",
        "demo",
        "--run-id",
        "dead-outbox",
        "--db",
        str(engine.db),
        "--param",
        "tickets=1",
        "--outbox",
        f"http://127.0.0.1:{free_port()}",
    )
    assert done.returncode == 4, done.stderr
    window.resize(1280, 720)
    shown(qtbot, window, "dead-outbox")
    qtbot.waitUntil(
        lambda: (r := window.monitor.run("dead-outbox")) is not None and r.terminal, timeout=5_000
    )
    qtbot.wait(200)
    pal = theme.current()
    failed = colour_runs(window, 1, pal.outcome[FAILED])
    assert len(failed) == 3, f"three failed attempts, three red bars: {failed}"
    assert colour_runs(window, 1, pal.outcome[COMMITTED]), "the steps before them are drawn too"


def test_a_queued_run_shows_an_empty_axis_of_its_own_not_the_last_runs(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    finished(engine, "before", "--param", "n=30")
    done = engine.run("submit", NOOP, "--run-id", "waits", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    shown(qtbot, window, "before")
    box = window.timeline.plot.getViewBox()
    qtbot.waitUntil(lambda: abs(box.viewRange()[0][1] - 1.0) > 0.01, timeout=5_000)
    shown(qtbot, window, "waits")
    qtbot.wait(200)
    assert box.viewRange()[0] == [0.0, 1.0]
    assert window.timeline._empty.isVisible()
    assert window.timeline._empty.textItem.toPlainText() == "queued: no engine has started it yet"
    shown(qtbot, window, "before")  # and a run with steps fits its own again
    qtbot.waitUntil(lambda: box.viewRange()[0] != [0.0, 1.0], timeout=5_000)
    assert not window.timeline._empty.isVisible()


def test_a_kill_label_is_never_cut_at_the_plots_edge(
    qtbot: Any, window: MainWindow, crashed_run: Engine
) -> None:
    """Wherever the view puts a kill (panned, zoomed, or following the run), its label ("kill →
    engine up in …", "step committed in …") is inside the plot, on the side where it fits."""
    window.resize(1000, 650)
    shown(qtbot, window, "R")
    view = window.timeline
    qtbot.waitUntil(lambda: bool(view._kill_labels), timeout=5_000)
    run = window.monitor.run("R")
    assert run is not None and len(run.kills) == 1
    kill = run.kills[0].ts - run.created
    box = view.plot.getViewBox()
    [label] = view._kill_labels

    def inside() -> bool:
        shown_at, plot_at = label.sceneBoundingRect(), box.sceneBoundingRect()
        return shown_at.left() >= plot_at.left() - 1 and shown_at.right() <= plot_at.right() + 1

    qtbot.waitUntil(inside, timeout=2_000)  # as opened, following the run
    span = max(run.duration(run.finished or run.last_ts), 0.1)
    for where in (0.05, 0.5, 0.7, 0.85, 0.97):
        box.setXRange(kill - where * span, kill + (1 - where) * span, padding=0)
        qtbot.wait(50)
        assert inside(), (
            f"the kill at {where:.0%} of the view: label {label.sceneBoundingRect()},"
            f" plot {box.sceneBoundingRect()}"
        )


def test_the_verdict_strips_figures_follow_a_switch_to_the_dark_theme(
    qtbot: Any, window: MainWindow, crashed_run: Engine, theme_restored: None
) -> None:
    """View → Theme → Dark with a run shown: "Duplicates: 0" stayed in the light theme's
    near-black on the dark grey (the strip copied its colour before the new palette arrived)."""
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    window.set_theme("light")
    shown(qtbot, window, "R")
    labels = window.verdict.labels
    qtbot.waitUntil(lambda: labels["duplicates"].text().startswith("Duplicates: "), timeout=10_000)
    window.set_theme("dark")
    text = QApplication.palette().color(QPalette.ColorRole.WindowText)
    assert text.lightness() > 128
    for key in ("kills", "redone", "duplicates", "latency"):
        label = labels[key]
        qtbot.waitUntil(
            lambda label=label: label.palette().color(QPalette.ColorRole.WindowText) == text,
            timeout=2_000,
        )


def test_an_old_runs_outbox_panel_reads_the_deliveries_from_the_outbox_file_when_it_is_gone(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    """A demo run whose outbox has stopped since (its port answers nothing): the strip counts
    its deliveries from the outbox's own file beside the log, and the panel shows the same
    ones from there (it said "not answering" over an empty table)."""
    from steplog.outbox import start_outbox
    from steplog.verdict.evidence import outbox_file_for

    with start_outbox(outbox_file_for(engine.db)) as outbox:
        finished(engine, "old-demo", "--param", "tickets=2", "--outbox", outbox.url, agent="demo")
        delivered = [d.key for d in outbox.ledger().deliveries]
        url = outbox.url
    assert len(delivered) == 3  # two replies and the digest
    shown(qtbot, window, "old-demo")
    panel = window.outbox_panel
    qtbot.waitUntil(lambda: panel.deliveries.rowCount() == 3, timeout=15_000)
    assert [panel.deliveries.record(r)["key"] for r in range(3)] == delivered
    said = f"outbox file {outbox_file_for(engine.db)}: 3 deliveries, 3 attempts"
    assert panel.summary.text().startswith(said)
    assert f"the outbox at {url} is not answering" in panel.summary.text()
    strip = window.verdict.labels
    qtbot.waitUntil(lambda: strip["deliveries"].text() == "Outbox: 3/3", timeout=10_000)
    assert window.watcher.ledger is None  # what the URL answered: nothing
