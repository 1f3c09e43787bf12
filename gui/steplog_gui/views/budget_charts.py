"""Budget charts: for steps, tokens, cost and active seconds, used over time against the limit.

Each chart's curves are created once and fed with ``setData`` on a timer (downsampled, clipped
to view). Tokens carry a second, dashed series: the part that is only *estimated* (a model that
reported no usage). A dotted line projects the recent rate to the limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QGridLayout, QWidget

from steplog.log.runstatus import RunStatus
from steplog_gui import theme
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import RunState

REFRESH_MS = 300
"""Charts of a live run redraw at most this often: four plots and their axes cost ~20 ms a
redraw here, time the timeline's commit → pixel needs more."""
LIMIT_IN_VIEW = 0.25
"""A chart's y range takes in its limit once the usage is past this share of it; until then the
range fits the usage."""
PROJECTION_POINTS = 30
TITLE_POINTS = 9
AXIS_ROOM = 60
BUDGETS = (
    ("steps", "steps", "Steps"),
    ("tokens", "tokens", "Tokens"),
    ("cost_usd", "cost_usd", "Cost (USD)"),
    ("seconds", "seconds", "Active seconds"),
)


@dataclass(frozen=True)
class Projection:
    at: float
    """Seconds since the run started when the limit would be reached at the recent rate."""
    from_x: float
    from_y: float
    limit: float


MAX_POINTS = 20_000
"""A chart draws at most about this many points of a usage series: each figure is a running
total (never falls), so every k-th point draws the same line. A 1M-step run's four charts held
a copy of each full series for pyqtgraph (about 150 MB)."""
EXACT_TAIL = 2_000
"""The newest points are always drawn each (the projection is fitted to the last ones)."""


def thinned(n: int) -> slice | npt.NDArray[np.int64]:
    """The points of an ``n``-point series a chart draws: all of them, or every k-th of the older
    ones (the first included) and each of the last ``EXACT_TAIL``."""
    if n <= MAX_POINTS:
        return slice(None)
    head = n - EXACT_TAIL
    step = -(-head // (MAX_POINTS - EXACT_TAIL))
    return np.concatenate([np.arange(0, head, step), np.arange(head, n)])


def project(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], limit: float | None
) -> Projection | None:
    """Linear projection of the last points to ``limit``; ``None`` without a limit or a rise."""
    if not limit or len(x) < 2:
        return None
    xs, ys = x[-PROJECTION_POINTS:], y[-PROJECTION_POINTS:]
    dx, dy = xs[-1] - xs[0], ys[-1] - ys[0]
    if dx <= 0 or dy <= 0 or ys[-1] >= limit:
        return None
    return Projection(
        xs[-1] + (limit - ys[-1]) * dx / dy, float(xs[-1]), float(ys[-1]), float(limit)
    )


class _Chart:
    def __init__(self, title: str) -> None:
        self.title = title
        self.widget = pg.PlotWidget()
        self.widget.setMenuEnabled(False)
        self.widget.setMouseEnabled(x=True, y=False)
        self.widget.showGrid(x=True, y=True, alpha=0.2)
        self.used = self.widget.plot(
            [], [], name="used" if title != "Tokens" else "tokens (reported + estimated)"
        )
        self.used.setDownsampling(auto=True, method="peak")
        self.used.setClipToView(True)
        self.estimated: pg.PlotDataItem | None = None
        self.limit = pg.InfiniteLine(angle=0, movable=False)
        self.limit.setVisible(False)
        self.widget.addItem(self.limit)
        # The projection may reach far past the data: it must not drag the autorange with it.
        self.projection = pg.PlotDataItem([], [])
        self.widget.addItem(self.projection, ignoreBounds=True)
        self.follow = True
        """Time axis from the run's start to its last point (until the person pans or zooms)."""
        self.widget.getViewBox().sigRangeChangedManually.connect(self._manual)
        self.full_title = title
        self._shown: tuple[str, str] = ("", "")
        self._palette: theme.Palette | None = None
        # The y axis widens once new data's tick labels are laid out, after the title was cut for
        # the old width: cut it again then, or it overhangs the plot's right edge by a few pixels.
        self.widget.getAxis("left").geometryChanged.connect(self._recut)
        # And whatever the cut, the title never makes the plot wider than its view: pyqtgraph sets
        # a label's minimum width to its text's on every text change and resize.
        label = self.widget.getPlotItem().titleLabel

        def title_min_size() -> None:
            pg.LabelItem.updateMin(label)
            label.setMinimumWidth(0)

        label.updateMin = title_min_size

    def _manual(self, *_args: object) -> None:
        self.follow = False

    def _recut(self) -> None:
        if self._palette is not None:
            self.set_title(self.full_title, self._palette)

    def set_title(self, text: str, pal: theme.Palette) -> None:
        """The title, cut with "…" to the chart's width (a title wider than its column would
        widen the chart past it and clip its right edge); the whole text is the tooltip."""
        font = QFont(self.widget.font())
        font.setPointSizeF(TITLE_POINTS)
        # The title sits over the plot, right of the y axis (which may widen once new data's
        # ticks are laid out: room for "60000" is kept); its HTML adds a few pixels of margin.
        axis = max(int(self.widget.getAxis("left").width()), AXIS_ROOM)
        room = max(40, self.widget.width() - axis - 24)
        shown = QFontMetrics(font).elidedText(text, Qt.TextElideMode.ElideRight, room)
        self.full_title, self._palette = text, pal
        if (shown, pal.foreground) != self._shown:
            self._shown = (shown, pal.foreground)
            self.widget.setTitle(shown, color=pal.foreground, size=f"{TITLE_POINTS}pt")
            self.widget.setToolTip(text if shown != text else "")


class BudgetCharts(QWidget):
    """Four charts for the selected run, live."""

    def __init__(self, monitor: Monitor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._run_id: str | None = None
        self._dirty = False
        self._last_refresh = 0.0
        self.charts: dict[str, _Chart] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        for i, (key, _col, title) in enumerate(BUDGETS):
            chart = _Chart(title)
            self.charts[key] = chart
            grid.addWidget(chart.widget, i // 2, i % 2)
            chart.widget.installEventFilter(self)
        tokens = self.charts["tokens"]
        legend = tokens.widget.addLegend(offset=(5, 5))
        legend.addItem(tokens.used, "tokens (reported + estimated)")
        tokens.estimated = tokens.widget.plot([], [], name="estimated (no usage reported)")
        tokens.estimated.setDownsampling(auto=True, method="peak")
        tokens.estimated.setClipToView(True)
        self.apply_palette(theme.current())
        monitor.runs_changed.connect(
            lambda ids: setattr(self, "_dirty", self._dirty or self._run_id in ids)
        )
        monitor.state_reset.connect(lambda: self.set_run(None))
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def apply_palette(self, pal: theme.Palette) -> None:
        self._palette = pal
        for chart in self.charts.values():
            chart.widget.setBackground(pal.background)
            for axis in ("left", "bottom"):
                ax = chart.widget.getAxis(axis)
                ax.setPen(pg.mkPen(pal.foreground))
                ax.setTextPen(pg.mkPen(pal.foreground))
            chart.used.setPen(pg.mkPen(pal.status[RunStatus.RUNNING], width=2))
            chart.limit.setPen(pg.mkPen(pal.limit, width=1.5))
            chart.projection.setPen(pg.mkPen(pal.projection, width=1.5, style=Qt.PenStyle.DotLine))
            if chart.estimated is not None:
                chart.estimated.setPen(pg.mkPen(pal.estimated, width=2, style=Qt.PenStyle.DashLine))
        self._dirty = True

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        # A chart's title is cut to its new width as it resizes: the grid can move a chart's width
        # without this widget resizing, and a title cut for a wider chart overhangs its right edge.
        if event.type() == QEvent.Type.Resize:
            for chart in self.charts.values():
                if chart.widget is watched:
                    chart.set_title(chart.full_title, self._palette)
        return super().eventFilter(watched, event)

    def set_run(self, run_id: str | None) -> None:
        self._run_id = run_id
        for chart in self.charts.values():
            chart.widget.enableAutoRange()  # first: the refresh may fix the y range (see ``_draw``)
            chart.follow = True
        self.refresh()

    def _tick(self) -> None:
        if self._dirty and not self._monitor.may_redraw(self._last_refresh):
            return  # reading a backlog: redraw about once a second, then once at the end
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        self._dirty = False
        self._last_refresh = time.monotonic()
        run = self._monitor.run(self._run_id) if self._run_id else None
        for key, col, title in BUDGETS:
            self._draw(self.charts[key], run, key, col, title)

    def _draw(self, chart: _Chart, run: RunState | None, key: str, col: str, title: str) -> None:
        pal = self._palette
        if run is None or not len(run.usage_series):
            chart.used.setData([], [])
            chart.projection.setData([], [])
            if chart.estimated is not None:
                chart.estimated.setData([], [])
            chart.limit.setVisible(False)
            chart.set_title(title, pal)
            chart.widget.getViewBox().setRange(
                xRange=(0, 1), yRange=(0, 1), padding=0
            )  # not the last run's
            return
        s = run.usage_series
        t0 = run.created if math.isfinite(run.created) else float(s["ts"][0])
        keep = thinned(len(s))
        x = s["ts"][keep] - t0
        y = s[col][keep]
        chart.used.setData(x, y)
        if chart.estimated is not None:
            chart.estimated.setData(x, s["tokens_estimated"][keep])
        limit = run.limits.get(key)
        box = chart.widget.getViewBox()
        # Time from the run's start to its last point: auto-range would stretch points a few
        # milliseconds apart (a first commit and the next step's start) to the whole width, on
        # an axis of "4.0115 4.0120 ...". Once the person pans or zooms, it is theirs.
        if chart.follow:
            end = float(x[-1])
            box.setXRange(0.0, end if end > 0 else 1.0, padding=0.02)
        top = float(np.max(y))
        if not limit and not top:  # all zero, no limit: 0..1, not auto-range's -0.4..0.4
            box.setYRange(0, 1, padding=0)
        elif not limit or top < limit * LIMIT_IN_VIEW:
            # Far from its limit (15 steps of 100,000), or none: the usage fills the chart, not a
            # flat line along its floor; the title gives the limit, and the line comes into view
            # later. From 0: a usage of 4.0 s is not drawn on an axis of 4.009 .. 4.011.
            box.setYRange(0, top * 1.15 if top else 1.0, padding=0)
        else:
            box.enableAutoRange(axis=pg.ViewBox.YAxis)
        chart.limit.setVisible(bool(limit))
        if limit:
            chart.limit.setValue(float(limit))
        proj = project(x, y, float(limit) if limit else None) if not run.terminal else None
        used = float(y[-1])
        digits = 4 if key == "cost_usd" else 1 if key == "seconds" else 0

        def fmt(v: float) -> str:
            return f"{v:.{digits}f}"

        text = f"{title}: {fmt(used)}" + (f" / {fmt(float(limit))}" if limit else " (no limit)")
        if (
            key == "tokens" and s["tokens_estimated"][-1] > 0
        ):  # short: a long title widens the chart past its column
            estimated = float(s["tokens_estimated"][-1])
            text += " · all estimated" if estimated >= used else f" · {estimated:.0f} estimated"
        if proj is not None:
            chart.projection.setData([proj.from_x, proj.at], [proj.from_y, proj.limit])
            text += f" · limit in ~{max(0.0, proj.at - proj.from_x):.0f} s"
        else:
            chart.projection.setData([], [])
        chart.set_title(text, pal)
