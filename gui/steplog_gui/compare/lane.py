"""One side of compare mode: a ``TimelineView`` of one run, x in seconds since the comparison began.

Composed from the ordinary timeline (same bars, colours, kill markers and level of detail); what
it adds is the sentence a first-time viewer needs at the start of every lane after a kill: the
durable run "resumes at step 23", the naive one "starts over at step 1". The step-number axis,
the name filter and the overview strip are hidden: both lanes and the charts share one time axis.

For the naive run the hover text says what its bars are: things it did, none of them recorded,
and which ones it did again after a kill.
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip, QWidget

from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import COMMITTED, REDONE, RUNNING, RunState
from steplog_gui.model.timeline_data import hover_lines
from steplog_gui.timeline.view import TimelineView

NAIVE_OUTCOMES = {
    COMMITTED: "done (not recorded anywhere: a kill would lose it)",
    REDONE: "lost to a kill: it ran again from the start",
    RUNNING: "in progress",
}


def restarts(run: RunState) -> list[tuple[float, int, int]]:
    """(start time, lane, step) of the first step each engine after the first one ran."""
    ex = run.executions
    out = []
    for lane in range(2, run.incarnation + 1):
        mine = np.flatnonzero((ex["lane"] == lane) & (ex["seq"] >= 0))
        if len(mine):
            first = mine[np.argmin(ex["start"][mine])]
            out.append((float(ex["start"][first]), lane, int(ex["seq"][first])))
    return out


def describe_naive(run: RunState, i: int, now: float) -> str:
    """Hover text for a naive bar: what it did, and that nothing of it was kept."""
    return hover_lines(
        run,
        i,
        now,
        title="#{seq} {name} (naive: counted by its own trace)",
        outcome=NAIVE_OUTCOMES.get(int(run.executions["outcome"][i]), "?"),
        lane="process",
        phase=False,
    )


class CompareLane(TimelineView):
    """The timeline of one run of the comparison."""

    def __init__(self, monitor: Monitor, *, naive: bool, parent: QWidget | None = None) -> None:
        super().__init__(monitor, parent)
        self.naive = naive
        for widget in (self.axis_choice, self.filter, self.overview):
            widget.hide()
        self.plot.setLabel("bottom", "seconds since the comparison started")
        self.plot.setLabel("left", "process" if naive else "engine")
        self._restart_labels: list[pg.TextItem] = []
        self._restart_key: object = None

    def set_axis(self, *, by_step: bool) -> None:
        """Always time: the lanes and the charts share one time axis."""
        super().set_axis(by_step=False)

    def refresh(self) -> None:
        super().refresh()
        self._draw_restarts(self.run())

    def restart_texts(self) -> list[str]:
        return [label.toPlainText() for label in self._restart_labels]

    def _draw_restarts(self, run: RunState | None) -> None:
        marks = restarts(run) if run is not None else []
        key = (tuple(marks), run.created if run is not None else None, id(self._palette))
        if key == self._restart_key:
            return
        self._restart_key = key
        for label in self._restart_labels:
            self.plot.removeItem(label)
        self._restart_labels = []
        if run is None:
            return
        for start, lane, seq in marks:
            text = (
                "starts over at step 1 ▸" if self.naive and seq == 1 else f"resumes at step {seq} ▸"
            )
            # Left of the lane's first bar: that lane is empty before its engine started.
            label = pg.TextItem(text, color=self._palette.foreground, anchor=(1, 0.5))
            label.setPos(start - run.created, lane)
            self.plot.addItem(label)
            self._restart_labels.append(label)

    def _hover(self, scene_pos: QPointF) -> None:
        if not self.naive:
            super()._hover(scene_pos)
            return
        i = self._execution_at(scene_pos)
        run = self.run()
        if i is None or run is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), describe_naive(run, i, time.time()), self.plot)
