"""The timeline (scale, hover, click) and the budget charts, on real and synthetic runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gui_helpers import crashed_run, synthetic_events  # noqa: F401 (fixture)
from PySide6.QtCore import QPointF, Qt

from conftest import Engine
from steplog_gui.budget_charts import BudgetCharts, project
from steplog_gui.monitor import Monitor
from steplog_gui.run_state import REDONE
from steplog_gui.timeline_data import BAR_HEIGHT
from steplog_gui.timeline_view import TimelineView


def folded(qtbot, path: Path, run_id: str) -> Monitor:  # type: ignore[no-untyped-def]
    monitor = Monitor(path)
    monitor.start()
    qtbot.waitUntil(lambda: monitor.run(run_id) is not None and monitor.run(run_id).terminal, timeout=10_000)
    return monitor


def test_100k_bars_are_a_handful_of_items(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Never one item per step (frame time is measured in tests/benchmarks, not asserted here)."""
    monitor = Monitor(Path("/nonexistent/never.db"))  # not started: fed by hand
    monitor.apply(synthetic_events("big", 100_000, kill_every=5_000))  # type: ignore[arg-type]
    run = monitor.run("big")
    assert run is not None and len(run.executions) == 100_020 and len(run.kills) == 20
    view = TimelineView(monitor)
    qtbot.addWidget(view)
    view.resize(1200, 500)
    view.show()
    view.set_run("big")
    items = len(view.plot.getPlotItem().items)
    assert items < 10 + 20  # five bar items, selection, kill lines, kill labels: never one per step
    assert not view.plot.grab().isNull()  # and it paints


def test_hover_describes_and_click_selects_the_step_under_the_mouse(qtbot, crashed_run: Engine) -> None:  # type: ignore[no-untyped-def]
    monitor = folded(qtbot, crashed_run.db, "R")
    try:
        view = TimelineView(monitor)
        qtbot.addWidget(view)
        view.resize(1000, 400)
        view.show()
        view.set_run("R")
        qtbot.waitExposed(view)
        run = monitor.run("R")
        assert run is not None
        i = int(np.nonzero(run.executions["outcome"] == REDONE)[0][0])  # the step the crash interrupted
        # Zoom onto that bar so it is wide enough to hit.
        x0 = run.executions["start"][i] - run.created
        x1 = run.executions["end"][i] - run.created
        view.plot.setXRange(x0, x1 + 1e-3, padding=0)
        view.plot.setYRange(0.5, 2.5, padding=0)
        qtbot.wait(50)
        scene = view.plot.getViewBox().mapViewToScene(QPointF((x0 + x1) / 2, 1))
        assert view._execution_at(scene) == i
        assert view._execution_at(view.plot.getViewBox().mapViewToScene(QPointF((x0 + x1) / 2, 1 + BAR_HEIGHT))) is None
        pos = view.plot.mapFromScene(scene)
        with qtbot.waitSignal(view.step_selected, timeout=2_000) as blocker:
            qtbot.mouseClick(view.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        assert blocker.args == ["R", 8]
    finally:
        monitor.stop()


def test_budget_charts_show_usage_limits_and_the_estimated_series(qtbot, crashed_run: Engine) -> None:  # type: ignore[no-untyped-def]
    monitor = folded(qtbot, crashed_run.db, "R")
    try:
        charts = BudgetCharts(monitor)
        qtbot.addWidget(charts)
        charts.set_run("R")
        steps = charts.charts["steps"]
        x, y = steps.used.getData()
        assert y is not None and y[-1] == 15 and np.all(np.diff(x) >= 0)
        assert steps.limit.isVisible() and steps.limit.value() == 100_000
        tokens = charts.charts["tokens"]
        _ex, est = tokens.estimated.getData()  # type: ignore[union-attr]
        assert est is not None and est[-1] > 0  # the offline model reports no usage: all estimated
        assert "estimated" in tokens.widget.getPlotItem().titleLabel.text
        assert not charts.charts["cost_usd"].limit.isVisible()  # no cost limit on this agent
    finally:
        monitor.stop()


def test_projection_reaches_the_limit_at_the_recent_rate() -> None:
    x = np.arange(10, dtype=float)
    p = project(x, 2 * x, 100.0)
    assert p is not None and abs(p.at - 50.0) < 1e-9 and p.limit == 100.0
    assert project(x, 2 * x, None) is None
    assert project(x, np.zeros(10), 100.0) is None
