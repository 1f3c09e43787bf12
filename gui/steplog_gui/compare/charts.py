"""Compare mode's charts: both runs' curves on one axis, so one visibly climbs past the other.

"Tokens spent" adds up everything each agent paid for, kills included (the naive one pays again
for every step it redoes). "Steps kept" is the work each has to show: the durable run's committed
steps never go down; the naive run's drop to 0 at every kill, because it keeps nothing. Curves
are created once and fed with ``setData``; x is seconds since the comparison started, shared with
the lanes.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QWidget

from steplog.log.runstatus import RunStatus
from steplog_gui import theme
from steplog_gui.compare.monitor import CompareMonitor
from steplog_gui.model.compare_state import spent
from steplog_gui.model.run_state import RunState

REFRESH_MS = 250
CHARTS = (("tokens", "Tokens spent"), ("steps", "Steps kept"))
SIDES = ("naive", "durable")
SIDE_NAMES = {"naive": "naive agent", "durable": "steplog (durable)"}


def curve(run: RunState, column: str, origin: float, until: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one usage column as a staircase (a value holds until the next one), held level
    to ``until``: a finished run spends nothing more, and its level stays there to be passed."""
    s = run.usage_series
    if not len(s):
        return np.zeros(0), np.zeros(0)
    x, y = s["ts"] - origin, s[column].astype(np.float64)
    end = until - origin
    if end > x[-1]:
        x, y = np.append(x, end), np.append(y, y[-1])
    return np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]


class CompareCharts(QWidget):
    def __init__(self, monitor: CompareMonitor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self.plots: dict[str, pg.PlotWidget] = {}
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for key, title in CHARTS:
            plot = pg.PlotWidget()
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)  # x follows the lanes (set_x_range)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setTitle(title)
            plot.getAxis("bottom").enableAutoSIPrefix(False)
            plot.getAxis("left").enableAutoSIPrefix(False)
            legend = plot.addLegend(offset=(-8, -8))  # bottom right: both curves rise away from it
            for side in SIDES:
                item = plot.plot([], [], stepMode=None)
                legend.addItem(item, SIDE_NAMES[side])
                self.curves[(key, side)] = item
            self.plots[key] = plot
            row.addWidget(plot)
        self._kill_lines: list[tuple[pg.PlotWidget, pg.InfiniteLine]] = []
        self._kill_key: object = None
        self.apply_palette(theme.current())
        monitor.compared.connect(lambda _r: self.refresh())
        self._timer = QTimer(self)  # the curves run on with the clock while the runs go on
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()

    def set_x_range(self, lo: float, hi: float) -> None:
        """The lanes' visible time range (not an ``setXLink``: pyqtgraph links views by screen
        position, and these charts sit side by side, each under part of the lanes)."""
        for plot in self.plots.values():
            plot.setXRange(lo, hi, padding=0)

    def apply_palette(self, pal: theme.Palette) -> None:
        self._palette = pal
        colours = {
            "naive": pal.status[RunStatus.FAILED],
            "durable": pal.status[RunStatus.SUCCEEDED],
        }
        for (_figure, side), item in self.curves.items():
            item.setPen(pg.mkPen(colours[side], width=2.5))
        for plot in self.plots.values():
            plot.setBackground(pal.background)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(pg.mkPen(pal.foreground))
                plot.getAxis(axis).setTextPen(pg.mkPen(pal.foreground))
        self.refresh()

    def refresh(self) -> None:
        result = self._monitor.result
        pal = self._palette
        if result is None or not math.isfinite(result.origin):
            for item in self.curves.values():
                item.setData([], [])
            for key, title in CHARTS:
                self.plots[key].setTitle(title, color=pal.foreground, size="10pt")
            return
        now = time.time()
        runs = {"naive": result.naive, "durable": result.durable}
        ends = (r.finished if r.finished is not None else r.open_until(now) for r in runs.values())
        until = max((t for t in ends if math.isfinite(t)), default=now)
        self._draw_kills(
            sorted({round(k.ts - result.origin, 3) for r in runs.values() for k in r.kills})
        )
        for key, title in CHARTS:
            last = {}
            for side in SIDES:
                x, y = curve(runs[side], key, result.origin, until)
                self.curves[(key, side)].setData(x, y)
                last[side] = int(spent(runs[side], key))  # as the figures table says it
            self.plots[key].setTitle(
                f"{title}: naive {last['naive']:,} · durable {last['durable']:,}",
                color=pal.foreground,
                size="10pt",
            )

    def _draw_kills(self, xs: list[float]) -> None:
        """A dashed line at every kill (one Kill now kills both: one line serves both curves)."""
        key = (tuple(xs), id(self._palette))
        if key == self._kill_key:
            return
        self._kill_key = key
        for plot, line in self._kill_lines:
            plot.removeItem(line)
        self._kill_lines = []
        pen = pg.mkPen(self._palette.kill, width=1, style=Qt.PenStyle.DashLine)
        for plot in self.plots.values():
            for x in xs:
                line = pg.InfiniteLine(pos=x, angle=90, movable=False, pen=pen)
                plot.addItem(line, ignoreBounds=True)
                self._kill_lines.append((plot, line))
