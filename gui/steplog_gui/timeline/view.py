"""The step timeline: one bar per step execution, one lane per engine incarnation, kill markers.

One ``BarGraphItem`` per outcome colour (five items whatever the number of steps: each draws its
rectangles in one ``drawRects`` call), created once and fed with ``setOpts`` on a timer. Bars
narrower than a pixel are drawn as per-pixel aggregates (``timeline_data.bars``), recomputed when
the view pans or zooms, so a 100k-step run shows its structure and paints fast. The x axis is
time or step number; a name filter keeps matching steps; an overview strip under the plot shows
the whole run and the visible range (drag it to pan). Hover shows the step; a click selects the
nearest one at any zoom.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QToolTip, QVBoxLayout, QWidget

from steplog.log.runstatus import RunStatus
from steplog_gui import startup_trace, theme
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import (
    COMMITTED,
    COPIED,
    FAILED,
    GAVE_UP,
    INTERRUPTED,
    REDONE,
    RUNNING,
    RunState,
)
from steplog_gui.model.timeline_data import (
    BAR_HEIGHT,
    bars,
    describe,
    kill_marks,
    name_filter,
    nearest,
    spans,
    wake_mark,
    writing_bars,
)

REFRESH_MS = 100
"""Running bars grow with the clock at this period."""
COALESCE_MS = 15
"""New events redraw this soon after they arrive (one frame), however many batches came."""
MIN_REDRAW_MS = 50
"""...but not more often than this: a redraw repaints the plot and its axes (~10 ms here), and
an engine committing hundreds of steps a second would otherwise keep the GUI thread busy and
every commit waiting for it (commit → pixel p95 0.24 s measured before, see the benchmarks)."""
MAX_KILL_LABELS = 40
PICK_PIXELS = 6
"""A click or hover this close to a bar picks it (a 100k-step run has bars far below a pixel)."""
MIN_BAR_PIXELS = 1.5
"""No bar is drawn narrower than this (a 1 ms step of a minute's run, a failed attempt between
retries): a narrower rectangle may cover no pixel at all and vanish."""
GAP_PIXELS = 1.0
"""Bars at least three times this wide leave this much of the background at their right end, so
back-to-back steps read as steps (an outline did it, and painted over every bar under ~2 px)."""
OVERVIEW_EVERY_S = 0.5
"""A live run's overview strip (the whole run at a glance) is redrawn at most this often."""
OUTCOMES = (COPIED, COMMITTED, INTERRUPTED, REDONE, FAILED, GAVE_UP, RUNNING)
Heights = npt.NDArray[np.float64] | float


def _bars_by_outcome(plot: pg.PlotWidget) -> dict[int, pg.BarGraphItem]:
    """One bar item per outcome on ``plot``, empty (one item for thousands of bars, not one
    each)."""
    items = {}
    for outcome in OUTCOMES:
        item = pg.BarGraphItem(
            x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT, pen=None
        )
        plot.addItem(item)
        items[outcome] = item
    return items


class TimelineView(QWidget):
    """The timeline of the selected run."""

    step_selected = Signal(str, int)
    """(run_id, seq) of a clicked bar."""

    def __init__(self, monitor: Monitor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._run_id: str | None = None
        self._dirty = False
        self._last_refresh = 0.0
        self._by_step = False
        self._keep: np.ndarray | None = None
        self.axis_choice = QComboBox()
        self.axis_choice.addItems(["x: time", "x: step number"])
        self.axis_choice.setToolTip(
            "draw steps by when they ran, or by their number (redone steps line up)"
        )
        self.axis_choice.currentIndexChanged.connect(lambda i: self.set_axis(by_step=i == 1))
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("filter steps by name…")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter_changed)
        self.plot = pg.PlotWidget()
        self.plot.setLabel("bottom", "seconds since the run started")
        # Plain seconds always: an automatic "(x0.001)" on a fast run's axis reads as an error.
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.plot.setLabel("left", "engine")
        self.plot.showGrid(x=True, y=False, alpha=0.25)
        self.plot.setMouseEnabled(x=True, y=False)
        self.plot.getPlotItem().setMenuEnabled(False)
        self.plot.getViewBox().setLimits(yMin=-0.6, minYRange=1)
        self._items = _bars_by_outcome(self.plot)
        self._selected = pg.BarGraphItem(
            x0=np.zeros(0),
            width=np.zeros(0),
            y0=np.zeros(0),
            height=BAR_HEIGHT + 0.1,
            brush=None,
            pen=pg.mkPen("#000000", width=2),
        )
        # Over a model call in progress: a veil paling its bar, and the stretch its streamed
        # pieces came in drawn solid again on top (``writing_bars``).
        self._veil = pg.BarGraphItem(
            x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT, pen=None
        )
        self._fill = pg.BarGraphItem(
            x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT, pen=None
        )
        self.plot.addItem(self._veil)
        self.plot.addItem(self._fill)
        self._writing: dict[tuple[int, int], tuple[int, float, float]] = {}
        self.plot.addItem(self._selected)
        self._kills = pg.PlotDataItem(connect="pairs")
        self.plot.addItem(self._kills)
        self._kill_labels: list[pg.TextItem] = []
        self._kill_key: object = None
        # A fork's start: its copied steps (lane 0) are left of this line, its own to the right.
        self._fork_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#888888", width=2, style=Qt.PenStyle.DashLine)
        )
        self._fork_label = pg.TextItem("", anchor=(0, 1))
        for item in (self._fork_line, self._fork_label):
            item.hide()
            self.plot.addItem(item)
        # A sleeping run's wake-up time (``run.sleep``): a dotted line there, labelled.
        self._wake_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#888888", width=2, style=Qt.PenStyle.DotLine)
        )
        self._wake_label = pg.TextItem("", anchor=(1, 1))
        for item in (self._wake_line, self._wake_label):
            item.hide()
            self.plot.addItem(item)
        self._empty = pg.TextItem("", anchor=(0.5, 0.5))
        self._empty.hide()
        self.plot.addItem(self._empty, ignoreBounds=True)
        self._selected_seq: int | None = None
        self._overview_run: RunState | None = None
        self._overview_at = 0.0
        self._overview_stale = False
        self.overview = pg.PlotWidget()
        self.overview.setFixedHeight(56)
        self.overview.hideAxis("left")
        self.overview.hideAxis("bottom")
        self.overview.setMouseEnabled(x=False, y=False)
        self.overview.getPlotItem().setMenuEnabled(False)
        self.overview.hideButtons()
        self._overview_items = _bars_by_outcome(self.overview)
        self.region = pg.LinearRegionItem(movable=True)
        self.region.setZValue(10)
        self.overview.addItem(self.region)
        self.region.sigRegionChanged.connect(self._region_moved)
        self.plot.getViewBox().sigXRangeChanged.connect(self._range_changed)
        self.plot.getViewBox().sigResized.connect(self._place_kill_labels)
        bar = QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 0)
        bar.addWidget(self.axis_choice)
        bar.addWidget(self.filter, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.overview)
        self.apply_palette(theme.current())
        self.plot.scene().sigMouseMoved.connect(self._hover)
        self.plot.scene().sigMouseClicked.connect(self._click)
        monitor.runs_changed.connect(self._on_changed)
        monitor.state_reset.connect(lambda: self.set_run(None))
        self._soon = QTimer(self)
        self._soon.setSingleShot(True)
        self._soon.setInterval(COALESCE_MS)
        self._soon.timeout.connect(self._tick)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    # -- public -----------------------------------------------------------------------------

    def set_run(self, run_id: str | None) -> None:
        if run_id != self._run_id:
            self._writing = {}
        self._run_id = run_id
        self._selected_seq = None
        run = self.run()
        if run is None or not len(run.executions):
            # Nothing to fit (a queued run): auto-range alone would keep the last run's axis.
            self.plot.setXRange(0.0, 1.0, padding=0)
        self.refresh()
        self.plot.enableAutoRange()

    def set_writing(
        self, run_id: str, writing: dict[tuple[int, int], tuple[int, float, float]]
    ) -> None:
        """When the shown run's step attempts streamed (``StepOutputFeed.writing_changed``)."""
        if run_id != self._run_id:
            return
        self._writing = writing
        run = self.run()
        if run is not None and run.in_progress:
            self._draw_writing(run, time.time())

    def set_axis(self, *, by_step: bool) -> None:
        """x by time (default) or by step number."""
        self._by_step = by_step
        self.axis_choice.setCurrentIndex(1 if by_step else 0)
        self.plot.setLabel("bottom", "step number" if by_step else "seconds since the run started")
        self._kill_key = None
        self._overview_run = None  # redrawn at once, not when a live run's next turn comes
        self.refresh()
        self.plot.enableAutoRange()

    def _filter_changed(self, _text: str) -> None:
        self._dirty = True
        self._overview_run = None
        self._soon.start()

    def _range_changed(self, *_args: object) -> None:
        # The level of detail depends on the zoom, but not while the view follows the run: then
        # the bars are cut for the whole run already (see ``_draw``), and redrawing them because
        # the auto-range moved to fit them would draw every update twice.
        if not self.plot.getViewBox().autoRangeEnabled()[0]:
            self._dirty = True
            if not self._soon.isActive():
                self._soon.start()
        self._sync_region()
        self._place_kill_labels()
        self._draw_empty(self.run())

    def _sync_region(self) -> None:
        (lo, hi), _ = self.plot.getViewBox().viewRange()
        self.region.blockSignals(True)
        self.region.setRegion((lo, hi))
        self.region.blockSignals(False)

    def _region_moved(self) -> None:
        lo, hi = self.region.getRegion()
        self.plot.getViewBox().setXRange(lo, hi, padding=0)

    def select_step(self, seq: int | None) -> None:
        self._selected_seq = seq
        self._draw_selection()

    def apply_palette(self, pal: theme.Palette) -> None:
        self.plot.setBackground(pal.background)
        for axis in ("left", "bottom"):
            ax = self.plot.getAxis(axis)
            ax.setPen(pg.mkPen(pal.foreground))
            ax.setTextPen(pg.mkPen(pal.foreground))
        for outcome, item in self._items.items():
            item.setOpts(brush=pg.mkBrush(pal.outcome[outcome]), pen=None)
            self._overview_items[outcome].setOpts(brush=pg.mkBrush(pal.outcome[outcome]), pen=None)
        self.overview.setBackground(pal.background)
        self._selected.setOpts(pen=pg.mkPen(pal.foreground, width=2), brush=None)
        veil = theme.qcolor(pal.background)
        veil.setAlpha(150)
        self._veil.setOpts(brush=pg.mkBrush(veil), pen=None)
        self._fill.setOpts(brush=pg.mkBrush(pal.outcome[RUNNING]), pen=None)
        self._kills.setPen(pg.mkPen(pal.kill, width=3))
        self._palette = pal
        self._dirty = True
        self._overview_run = None

    def run(self) -> RunState | None:
        return self._monitor.run(self._run_id) if self._run_id else None

    # -- drawing ----------------------------------------------------------------------------

    def _on_changed(self, run_ids: set[str]) -> None:
        if self._run_id in run_ids:
            self._dirty = True
            if not self._soon.isActive():  # coalesce a burst of batches into one redraw
                since_ms = (time.monotonic() - self._last_refresh) * 1000
                self._soon.start(int(max(COALESCE_MS, MIN_REDRAW_MS - since_ms)))

    def _tick(self) -> None:
        run = self.run()
        if run is None:
            return
        if self._dirty and not self._monitor.may_redraw(self._last_refresh):
            return  # reading a backlog: a redraw a second shows progress
        if self._dirty:
            self.refresh()
        elif run.in_progress:
            now = time.time()
            self._draw(RUNNING, run, now)  # running bars grow with the clock
            self._draw_writing(run, now)
        if self._overview_stale and time.monotonic() - self._overview_at >= OVERVIEW_EVERY_S:
            self._draw_overview(run, time.time())

    def refresh(self) -> None:
        self._dirty = False
        self._last_refresh = time.monotonic()
        run = self.run()
        now = time.time()
        self._keep = name_filter(run, self.filter.text()) if run is not None else None
        for outcome in OUTCOMES:
            self._draw(outcome, run, now)
        self._draw_writing(run, now)
        if (
            run is not self._overview_run
            or time.monotonic() - self._overview_at >= OVERVIEW_EVERY_S
        ):
            self._draw_overview(run, now)
        else:
            self._overview_stale = True
        self._draw_kills(run)
        self._draw_fork(run)
        self._draw_wake(run)
        self._draw_selection()
        self._draw_empty(run)
        if run is not None and len(run.executions):
            startup_trace.mark("first_step_drawn")
        if run is not None:
            lanes = max(1, run.incarnation)
            ax = self.plot.getAxis("left")
            step = max(1, lanes // 12)
            ticks = [(i, str(i)) for i in range(1, lanes + 1, step)]
            ax.setTicks([([(0, "copied")] if run.forked_from else []) + ticks, []])

    def _draw_empty(self, run: RunState | None) -> None:
        """A run with no step yet (queued, or just started) says so in the middle of the plot."""
        empty = run is not None and not len(run.executions)
        self._empty.setVisible(empty)
        if run is None or not empty:
            return
        self._empty.setText(
            "no step ran: the run ended before its first one"
            if run.terminal
            else "queued: no engine has started it yet"
            if run.status == RunStatus.QUEUED
            else "no steps yet"
        )
        self._empty.setColor(self._palette.foreground)
        (lo, hi), (bottom, top) = self.plot.getViewBox().viewRange()
        self._empty.setPos((lo + hi) / 2, (bottom + top) / 2)

    def _draw_fork(self, run: RunState | None) -> None:
        fork = run.forked_from if run is not None else None
        self._fork_line.setVisible(fork is not None)
        self._fork_label.setVisible(fork is not None)
        if run is None or fork is None:
            return
        x = fork[1] - 0.5 if self._by_step else 0.0
        self._fork_line.setPos(x)
        self._fork_label.setText(f"forked from {fork[0]} at step {fork[1]}")
        self._fork_label.setColor(self._palette.foreground)
        self._fork_label.setPos(x, max(1, run.incarnation) + 0.45)

    def _draw_wake(self, run: RunState | None) -> None:
        mark = wake_mark(run, by_step=self._by_step) if run is not None else None
        self._wake_line.setVisible(mark is not None)
        self._wake_label.setVisible(mark is not None)
        if run is None or mark is None:
            return
        x, text = mark
        self._wake_line.setPos(x)
        self._wake_label.setText(text)
        self._wake_label.setColor(self._palette.foreground)
        self._wake_label.setPos(x, max(1, run.incarnation) + 0.45)

    def _draw(self, outcome: int, run: RunState | None, now: float) -> None:
        item = self._items[outcome]
        if run is None:
            item.setOpts(x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT)
            return
        box = self.plot.getViewBox()
        pixels = max(1, int(box.width()))
        if box.autoRangeEnabled()[0]:
            # Following the run: the bars must span all of it, or auto-range (which sizes the view
            # to the items) would never grow past what is drawn.
            x0, x1 = spans(run, now, by_step=self._by_step)
            visible = (float(np.nanmin(x0)), float(np.nanmax(x1))) if len(x0) else (0.0, 1.0)
        else:
            (lo, hi), _ = box.viewRange()
            visible = (lo, hi)
        b = bars(
            run,
            outcome,
            now,
            by_step=self._by_step,
            visible=visible,
            pixels=pixels,
            keep=self._keep,
        )
        # In pixels of the range the bars were cut for: while following the run, the view shows
        # that range and a little padding, so a pixel here is a little less than one on screen.
        unit = (visible[1] - visible[0]) / pixels
        width = np.where(
            b.width >= 3 * GAP_PIXELS * unit,
            b.width - GAP_PIXELS * unit,
            np.maximum(b.width, MIN_BAR_PIXELS * unit),
        )
        item.setOpts(x0=b.x0, width=width, y0=b.y0, height=self._with_gaps(b.height))

    def _draw_writing(self, run: RunState | None, now: float) -> None:
        """The veil and fill over model calls in progress (none once the run is over)."""
        if run is None or not run.in_progress:
            veil = fill = None
        else:
            veil, fill = writing_bars(run, self._writing, now, by_step=self._by_step)
        box = self.plot.getViewBox()
        (lo, hi), _ = box.viewRange()
        least = MIN_BAR_PIXELS * (hi - lo) / max(1.0, box.width())
        for item, b in ((self._veil, veil), (self._fill, fill)):
            if b is None or not len(b.x0):
                item.setOpts(x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT)
            else:
                item.setOpts(x0=b.x0, width=np.maximum(b.width, least), y0=b.y0, height=b.height)

    def _with_gaps(self, height: Heights) -> Heights:
        """Parallel steps share their lane in sub-lanes: a pixel of background between them."""
        if isinstance(height, float) or not len(height) or height.min() >= BAR_HEIGHT - 1e-9:
            return height
        box = self.plot.getViewBox()
        (_, _), (bottom, top) = box.viewRange()
        unit = (top - bottom) / max(1.0, box.height())
        thinner = np.maximum(height - GAP_PIXELS * unit, height / 2)
        return np.where(height < BAR_HEIGHT - 1e-9, thinner, height)

    def _draw_overview(self, run: RunState | None, now: float) -> None:
        """The whole run at a glance (aggregated to the strip's width), lanes squeezed to fit."""
        self._overview_run, self._overview_at, self._overview_stale = run, time.monotonic(), False
        width = max(1, int(self.overview.width()))
        full = None
        if run is not None and len(run.executions):
            x0, x1 = spans(run, now, by_step=self._by_step)
            full = (float(np.nanmin(x0)), float(np.nanmax(x1)))
        for outcome, item in self._overview_items.items():
            if full is None:
                item.setOpts(x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT)
                continue
            assert run is not None  # a full span is only measured on a run
            b = bars(
                run,
                outcome,
                now,
                by_step=self._by_step,
                visible=full,
                pixels=width,
                keep=self._keep,
            )
            item.setOpts(x0=b.x0, width=b.width, y0=b.y0, height=b.height)
        if full is not None:
            lanes = max(1, run.incarnation) if run is not None else 1
            self.overview.setXRange(*full, padding=0.01)
            self.overview.setYRange(0.5, lanes + 0.5, padding=0)
        else:  # nothing to show: the main plot's empty axis, not the last run's
            self.overview.setXRange(0.0, 1.0, padding=0.01)
        self._sync_region()

    def _draw_selection(self) -> None:
        run = self.run()
        if run is None or self._selected_seq is None:
            self._selected.setOpts(
                x0=np.zeros(0), width=np.zeros(0), y0=np.zeros(0), height=BAR_HEIGHT + 0.1
            )
            return
        ex = run.executions
        mask = ex["seq"] == self._selected_seq
        x0, x1 = spans(run, time.time(), by_step=self._by_step)
        (lo, hi), _ = self.plot.getViewBox().viewRange()
        least = 3 * (hi - lo) / max(1, self.plot.getViewBox().width())  # visible at any zoom
        self._selected.setOpts(
            x0=x0[mask],
            width=np.maximum(x1[mask] - x0[mask], least),
            y0=ex["lane"][mask] - (BAR_HEIGHT + 0.1) / 2,
        )

    def _draw_kills(self, run: RunState | None) -> None:
        marks = kill_marks(run, by_step=self._by_step) if run is not None else []
        key = (id(run), marks, id(self._palette), self._by_step)
        if key == self._kill_key:
            return
        self._kill_key = key
        for label in self._kill_labels:
            self.plot.removeItem(label)
        self._kill_labels = []
        if not marks:
            self._kills.setData([], [])
            return
        xs = np.repeat([m[0] for m in marks], 2)
        ys = np.array([[m[1] - 0.5, m[1] + 0.5] for m in marks]).ravel()
        self._kills.setData(xs, ys)
        backing = theme.qcolor(self._palette.background)
        backing.setAlpha(215)  # legible where it has to sit over the killed engine's bars
        for x, lane, text in marks[-MAX_KILL_LABELS:]:
            label = pg.TextItem(
                text, color=self._palette.kill, anchor=(0, 0.5), fill=pg.mkBrush(backing)
            )
            label.setPos(x, lane)
            self.plot.addItem(label, ignoreBounds=True)
            self._kill_labels.append(label)
        self._place_kill_labels()

    def _place_kill_labels(self, *_args: object) -> None:
        """Each kill's label right of its line, in the killed engine's own lane (empty from the
        kill on: the label covers no bar), unless it would be cut at the view's right edge: then
        left of the line; where neither side has room, on the side with more. Measured in pixels
        and placed again whenever the view pans, zooms, grows with the run or is resized."""
        if not self._kill_labels:
            return
        box = self.plot.getViewBox()
        (x_min, x_max), _ = box.viewRange()
        per_pixel = (x_max - x_min) / max(1.0, box.width())
        for label in self._kill_labels:
            x = label.pos().x()
            wide = label.textItem.boundingRect().width() * per_pixel
            right, left = x_max - x, x - x_min
            rightwards = wide <= right or (wide > left and right >= left)
            label.setAnchor((0, 0.5) if rightwards else (1, 0.5))

    # -- interaction ------------------------------------------------------------------------

    def _execution_at(self, scene_pos: QPointF) -> int | None:
        run = self.run()
        if run is None or not self.plot.sceneBoundingRect().contains(scene_pos):
            return None
        box = self.plot.getViewBox()
        p = box.mapSceneToView(scene_pos)
        lane = int(round(p.y()))
        if abs(p.y() - lane) > BAR_HEIGHT / 2:
            return None
        (lo, hi), _ = box.viewRange()
        within = PICK_PIXELS * (hi - lo) / max(1, box.width())  # a few pixels, whatever the zoom
        return nearest(
            run, p.x(), lane, time.time(), by_step=self._by_step, within=within, keep=self._keep
        )

    def _hover(self, scene_pos: QPointF) -> None:
        i = self._execution_at(scene_pos)
        run = self.run()
        if i is None or run is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), describe(run, i, time.time()), self.plot)

    def _click(self, event: object) -> None:
        if getattr(event, "button", lambda: None)() != Qt.MouseButton.LeftButton:
            return
        i = self._execution_at(event.scenePos())  # type: ignore[attr-defined]
        run = self.run()
        if i is None or run is None:
            return
        seq = int(run.executions["seq"][i])
        if seq >= 0:
            self.select_step(seq)
            self.step_selected.emit(run.run_id, seq)
