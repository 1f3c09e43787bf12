"""The timeline (scale, hover, click) and the budget charts, on real and synthetic runs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, Qt

from helpers.engine import Engine
from helpers.logs import synthetic_events
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import REDONE
from steplog_gui.model.timeline_data import BAR_HEIGHT
from steplog_gui.timeline.view import TimelineView
from steplog_gui.views.budget_charts import BudgetCharts, project


def folded(qtbot, path: Path, run_id: str) -> Monitor:  # type: ignore[no-untyped-def]
    monitor = Monitor(path)
    monitor.start()
    qtbot.waitUntil(
        lambda: monitor.run(run_id) is not None and monitor.run(run_id).terminal, timeout=10_000
    )
    return monitor


def test_100k_bars_are_a_handful_of_items(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Never one item per step (frame time is measured in tests/benchmarks, not asserted here)."""
    monitor = Monitor(Path("/nonexistent/never.db"))  # not started: fed by hand
    monitor.apply(synthetic_events("big", 100_000, kill_every=5_000))  # type: ignore[arg-type]
    run = monitor.run("big")
    assert run is not None and len(run.executions) == 100_019 and len(run.kills) == 19
    view = TimelineView(monitor)
    qtbot.addWidget(view)
    view.resize(1200, 500)
    view.show()
    view.set_run("big")
    items = len(view.plot.getPlotItem().items)
    # Seven bar items (one per outcome, "interrupted by a stop" included), the selection, the kill
    # lines, a fork's line and label, a model call's veil and fill, a sleep's wake-up line and
    # label, and the 19 kill labels: never one per step.
    assert items <= 16 + 19
    assert not view.plot.grab().isNull()  # and it paints


def test_hover_describes_and_click_selects_the_step_under_the_mouse(
    qtbot, crashed_run: Engine
) -> None:  # type: ignore[no-untyped-def]
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
        i = int(
            np.nonzero(run.executions["outcome"] == REDONE)[0][0]
        )  # the step the crash interrupted
        # Zoom onto that bar so it is wide enough to hit.
        x0 = run.executions["start"][i] - run.created
        x1 = run.executions["end"][i] - run.created
        view.plot.setXRange(x0, x1 + 1e-3, padding=0)
        view.plot.setYRange(0.5, 2.5, padding=0)
        qtbot.wait(50)
        scene = view.plot.getViewBox().mapViewToScene(QPointF((x0 + x1) / 2, 1))
        assert view._execution_at(scene) == i
        assert (
            view._execution_at(
                view.plot.getViewBox().mapViewToScene(QPointF((x0 + x1) / 2, 1 + BAR_HEIGHT))
            )
            is None
        )
        pos = view.plot.mapFromScene(scene)
        with qtbot.waitSignal(view.step_selected, timeout=2_000) as blocker:
            qtbot.mouseClick(view.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        assert blocker.args == ["R", 8]
    finally:
        monitor.stop()


def test_budget_charts_show_usage_limits_and_the_estimated_series(
    qtbot, crashed_run: Engine
) -> None:  # type: ignore[no-untyped-def]
    monitor = folded(qtbot, crashed_run.db, "R")
    try:
        charts = BudgetCharts(monitor)
        qtbot.addWidget(charts)
        charts.set_run("R")
        steps = charts.charts["steps"]
        x, y = steps.used.getData()
        assert y is not None and y[-1] == 15 and np.all(np.diff(x) >= 0)
        assert steps.limit.isVisible() and steps.limit.value() == 100_000
        # 15 steps of 100,000: the chart fits the usage (not a flat line at the floor of 0..100,000)
        # and its title names the limit.
        low, high = steps.widget.getViewBox().viewRange()[1]
        assert low == 0 and 15 < high < 30
        assert "15 / 100000" in steps.widget.getPlotItem().titleLabel.text
        tokens = charts.charts["tokens"]
        _ex, est = tokens.estimated.getData()  # type: ignore[union-attr]
        assert est is not None and est[-1] > 0  # the offline model reports no usage: all estimated
        assert "estimated" in tokens.widget.getPlotItem().titleLabel.text
        assert not charts.charts["cost_usd"].limit.isVisible()  # no cost limit on this agent
    finally:
        monitor.stop()


def test_charts_chosen_before_their_run_has_usage_follow_it_once_it_comes(
    qtbot, crashed_run: Engine
) -> None:  # type: ignore[no-untyped-def]
    """A run picked as it starts has no usage yet: its charts show 0..1, and once the usage
    arrives both axes fit it (the time axis stayed at 0..1 s: a 40 s run drew a stub at its left
    edge, this 0.15 s one a short line)."""
    monitor = Monitor(crashed_run.db)
    charts = BudgetCharts(monitor)
    qtbot.addWidget(charts)
    charts.show()  # pyqtgraph fits auto-ranged axes as it paints
    charts.set_run("R")  # nothing read yet
    assert charts.charts["steps"].widget.getViewBox().viewRange() == [[0, 1], [0, 1]]
    monitor.start()
    try:
        qtbot.waitUntil(lambda: (r := monitor.run("R")) is not None and r.terminal, timeout=10_000)
        charts.refresh()
        for key in ("steps", "seconds"):
            box = charts.charts[key].widget.getViewBox()
            x, y = charts.charts[key].used.getData()
            # No bound on how long the run took (under load it took 1.8 s): the axis must fit it.
            assert x is not None and y is not None and 0 < x[-1]
            qtbot.waitUntil(
                lambda box=box, x=x: (
                    box.viewRange()[0][0] <= x[0] and x[-1] <= box.viewRange()[0][1] < 1.25 * x[-1]
                ),
                timeout=5_000,
            )
            assert box.viewRange()[1][1] >= y.max()
    finally:
        monitor.stop()


def test_projection_reaches_the_limit_at_the_recent_rate() -> None:
    x = np.arange(10, dtype=float)
    p = project(x, 2 * x, 100.0)
    assert p is not None and abs(p.at - 50.0) < 1e-9 and p.limit == 100.0
    assert project(x, 2 * x, None) is None
    assert project(x, np.zeros(10), 100.0) is None


def big_run() -> tuple[Monitor, object]:
    monitor = Monitor(Path("/nonexistent/never.db"))  # not started: fed by hand
    monitor.apply(synthetic_events("big", 100_000, kill_every=5_000))  # type: ignore[arg-type]
    return monitor, monitor.run("big")


def test_bars_narrower_than_a_pixel_become_per_pixel_aggregates_that_keep_the_structure() -> None:
    from steplog_gui.model.run_state import COMMITTED
    from steplog_gui.model.timeline_data import bars, spans

    _monitor, run = big_run()
    x0, x1 = spans(run, 0.0)  # type: ignore[arg-type]
    whole = (float(x0.min()), float(x1.max()))
    committed = bars(run, COMMITTED, 0.0, visible=whole, pixels=1000)  # type: ignore[arg-type]
    redone = bars(run, REDONE, 0.0, visible=whole, pixels=1000)  # type: ignore[arg-type]
    lanes = 20  # 19 kills
    assert 0 < len(committed.x0) <= lanes * 1000  # bounded by lanes x pixels, not by steps
    assert len(redone.x0) == 19  # each redone step still shows, one per kill
    # The aggregates cover what the steps cover: every committed step lies under some bar of its
    # lane.
    per_px = (whole[1] - whole[0]) / 1000
    covered = sum(float(w) for w in committed.width)
    assert abs(covered - (whole[1] - whole[0])) < 25 * per_px * lanes
    # Zoomed in to ten steps, each is its own bar again.
    ex = run.executions  # type: ignore[attr-defined]
    lane1 = ex["lane"] == 1
    first = float(x0[lane1][100]), float(x1[lane1][109])
    close = bars(run, COMMITTED, 0.0, visible=first, pixels=1000)  # type: ignore[arg-type]
    assert 10 <= len(close.x0) <= 12


def test_a_click_picks_the_nearest_step_at_any_zoom_and_the_filter_and_step_axis_narrow_it() -> (
    None
):
    from steplog_gui.model.timeline_data import name_filter, nearest, spans

    _monitor, run = big_run()
    x0, _x1 = spans(run, 0.0)  # type: ignore[arg-type]
    ex = run.executions  # type: ignore[attr-defined]
    i = 4321
    lane = int(ex["lane"][i])
    assert nearest(run, float(x0[i]) + 1e-7, lane, 0.0) == i  # type: ignore[arg-type]
    past_the_end = float(_x1.max()) + 100.0
    assert nearest(run, past_the_end, lane, 0.0, within=1e-3) is None  # type: ignore[arg-type]
    assert nearest(run, past_the_end, lane, 0.0) is not None  # type: ignore[arg-type]
    name = run.step_names[int(ex["seq"][i])][0]  # type: ignore[attr-defined]
    keep = name_filter(run, name.upper())  # type: ignore[arg-type]
    assert keep is not None and bool(keep[i])
    kept_names = {run.step_names[int(q)][0] for q in ex["seq"][keep]}  # type: ignore[attr-defined]
    assert (
        all(name in n for n in kept_names) and 1 <= len(kept_names) <= 11
    )  # "s4320", "s43200".."s43209"
    assert name_filter(run, "  ") is None  # type: ignore[arg-type]
    by_step, _ = spans(run, 0.0, by_step=True)  # type: ignore[arg-type]
    seq = int(ex["seq"][i])
    assert nearest(run, float(seq), lane, 0.0, by_step=True) == i  # type: ignore[arg-type]
    assert abs(by_step[i] - (seq - 0.45)) < 1e-9


def test_the_timeline_widget_filters_switches_axis_and_shows_the_visible_range(qtbot) -> None:  # type: ignore[no-untyped-def]
    monitor, _run = big_run()
    view = TimelineView(monitor)
    qtbot.addWidget(view)
    view.resize(1200, 500)
    view.show()
    view.set_run("big")
    view.plot.getViewBox().setXRange(10.0, 11.0, padding=0)
    qtbot.waitUntil(lambda: abs(view.region.getRegion()[0] - 10.0) < 1e-6, timeout=2_000)
    view.filter.setText("s99998")
    qtbot.waitUntil(lambda: view._keep is not None and int(view._keep.sum()) == 1, timeout=2_000)
    view.set_axis(by_step=True)
    assert view.plot.getPlotItem().getAxis("bottom").labelText == "step number"
    assert not view.plot.grab().isNull() and not view.overview.grab().isNull()


def test_the_view_keeps_following_a_growing_run(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Bars are drawn for the visible range only; while the view follows the run (auto-range),
    that range must be the whole run, or the view would never grow past its first extent."""
    monitor = Monitor(Path("/nonexistent/never.db"))
    events = synthetic_events("grow", 60)
    monitor.apply(events[:50])  # type: ignore[arg-type]
    view = TimelineView(monitor)
    qtbot.addWidget(view)
    view.resize(800, 400)
    view.show()
    view.set_run("grow")
    qtbot.wait(50)
    first_end = view.plot.getViewBox().viewRange()[0][1]
    monitor.apply(events[50:])  # type: ignore[arg-type]
    run = monitor.run("grow")
    assert run is not None
    last = float(run.executions["end"].max() - run.created)
    view.refresh()  # one redraw, as the new events bring
    view.plot.getViewBox().updateAutoRange()
    assert view.plot.getViewBox().viewRange()[0][1] >= last > first_end


def test_parallel_steps_are_drawn_in_sub_lanes_and_sequential_ones_use_the_whole_lane(
    qtbot, engine
) -> None:  # type: ignore[no-untyped-def]
    from helpers.paths import AGENTS
    from steplog_gui.model.timeline_data import BAR_HEIGHT, sublanes

    for run_id, agent in (("par", "gatherer"), ("seq", "noop")):
        done = engine.run(
            "run", f"{AGENTS}:{agent}", "--run-id", run_id, "--db", str(engine.db), "--param", "n=6"
        )
        assert done.returncode == 0, done.stderr
    monitor = Monitor(engine.db)
    monitor.start()
    qtbot.waitUntil(
        lambda: all((r := monitor.run(i)) is not None and r.terminal for i in ("par", "seq")),
        timeout=10_000,
    )
    par, seq = monitor.run("par"), monitor.run("seq")
    offset, height = sublanes(par, time.time())
    squares = par.executions["seq"] <= 6  # six steps gathered at once
    assert height[squares].max() < BAR_HEIGHT and len(set(offset[squares].round(6).tolist())) > 1
    assert all(
        o + h <= BAR_HEIGHT + 1e-9 for o, h in zip(offset, height, strict=True)
    )  # inside the lane
    offset, height = sublanes(seq, time.time())
    assert not offset.any() and (height == BAR_HEIGHT).all()
    monitor.stop()


def test_a_long_usage_series_is_drawn_thinned_with_its_first_point_and_its_newest_each() -> None:
    from steplog_gui.views.budget_charts import EXACT_TAIL, MAX_POINTS, thinned

    assert thinned(MAX_POINTS) == slice(None)  # a series this short is drawn whole
    n = 1_000_003
    keep = thinned(n)
    assert isinstance(keep, np.ndarray) and len(keep) <= MAX_POINTS + 1
    assert keep[0] == 0 and np.all(np.diff(keep) > 0)
    assert keep[-EXACT_TAIL:].tolist() == list(range(n - EXACT_TAIL, n))


SLOW_START = """\
import time
import steplog

def wait(seconds):
    time.sleep(seconds)
    return seconds

@steplog.agent
def slow_start(run):
    run.step("slow", wait, 1.5)
    for i in range(3):
        run.step(f"quick {i}", wait, 0.0)
"""


def test_charts_time_starts_at_the_run_and_usage_at_zero_however_close_the_points(
    qtbot, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The first usage points of a run whose first step took 1.5 s come milliseconds apart: the
    charts still read from the run's start and from zero ("1.5 s" on an axis of 1.5008 .. 1.5012
    reads as nothing). Panning the time axis by hand keeps it where the person put it."""
    agent = tmp_path / "slow_start.py"
    agent.write_text(SLOW_START)
    done = engine.run("run", f"{agent}:slow_start", "--run-id", "S", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    monitor = folded(qtbot, engine.db, "S")
    charts = BudgetCharts(monitor)
    qtbot.addWidget(charts)
    charts.show()
    charts.set_run("S")
    try:
        for key in ("steps", "seconds"):
            box = charts.charts[key].widget.getViewBox()
            x, y = charts.charts[key].used.getData()
            assert x is not None and y is not None
            assert x[0] > 1.4 and x[-1] - x[0] < 0.5, "the points are close, far from the start"
            (x_lo, x_hi), (y_lo, y_hi) = box.viewRange()
            assert x_lo <= 0.0 and x[-1] <= x_hi < 1.1 * x[-1]
            assert y_lo <= 0.0 and y.max() <= y_hi
        box = charts.charts["steps"].widget.getViewBox()
        box.setXRange(1.4, 1.6, padding=0)
        box.sigRangeChangedManually.emit([True, False])  # what a drag or wheel says
        charts.refresh()
        assert box.viewRange()[0] == [1.4, 1.6]
    finally:
        monitor.stop()
