"""The Costs window: what the runs in the log spent, per model or agent, over time.

A stacked bar per local hour (last 24 hours) or day, one colour per group, most expensive at the
bottom; the totals of every group with its share; the most expensive runs (double-click one to
show it in the main window). Read off the GUI thread (``jobs``) through the log's read API
(``steplog.log.cost.read_costs``: one query, no connection kept), again when the log changes
(at most every ``REFRESH_MS``) and on demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from steplog.log.cost import CostReport, read_costs
from steplog_gui import jobs, theme
from steplog_gui.model.costs import PERIODS, Stacks, money, share, stacks

REFRESH_MS = 2000
"""Soonest a change of the log is read again while the window is open."""

COLOURS = ("#2f74d0", "#e8930c", "#2e9d4f", "#8a5cc2", "#d03030", "#00838f", "#b27300", "#7a7a7a")
"""One per stack, in rank order; the last is "other"'s."""

GROUPINGS = (("Model", "model"), ("Agent", "agent"))


def _item(text: str, *, right: bool = False, sort: float | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if sort is not None:
        item.setData(Qt.ItemDataRole.UserRole, sort)
    return item


def _table(headers: list[str], stretch: int = 0) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setAlternatingRowColors(True)
    header = table.horizontalHeader()
    for col in range(len(headers)):
        mode = (
            QHeaderView.ResizeMode.Stretch
            if col == stretch
            else QHeaderView.ResizeMode.ResizeToContents
        )
        header.setSectionResizeMode(col, mode)
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    return table


def short_agent(spec: str) -> str:
    """An agent as a list shows it: ``triage`` for ``path/to/agents.py:triage`` or
    ``pkg.mod:triage``; a built-in name as it is."""
    return spec.rpartition(":")[2] or spec


class CostsView(QWidget):
    """The Costs window over the log at ``location``."""

    loaded = Signal()
    """A report was read and drawn (tests wait for it)."""
    run_chosen = Signal(str)
    """A run of the most expensive ones was double-clicked."""

    def __init__(
        self,
        location: Any,
        parent: QWidget | None = None,
        *,
        read: Callable[..., CostReport] = read_costs,
    ) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Costs — steplog")
        self.location = location
        self._read = read
        self._reading = False
        self._again = False
        self.report: CostReport | None = None
        self.drawn: Stacks | None = None

        self.group_box = QComboBox()
        for label, by in GROUPINGS:
            self.group_box.addItem(label, by)
        self.period_box = QComboBox()
        for label, _span, _bucket in PERIODS:
            self.period_box.addItem(label)
        self.period_box.setCurrentIndex(1)
        self.measure_box = QComboBox()
        self.measure_box.addItems(["Cost", "Tokens"])
        self.refresh_button = QPushButton("Refresh")
        self.summary = QLabel("reading the log…")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        bar = QHBoxLayout()
        for label, box in (
            ("Group by", self.group_box),
            ("Period", self.period_box),
            ("Show", self.measure_box),
        ):
            bar.addWidget(QLabel(label))
            bar.addWidget(box)
            bar.addSpacing(12)
        bar.addWidget(self.refresh_button)
        bar.addSpacing(12)
        bar.addWidget(self.summary, 1)

        self.plot = pg.PlotWidget(axisItems={"bottom": pg.DateAxisItem()})
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=False, y=True, alpha=0.25)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.legend = self.plot.addLegend(offset=(10, 10))
        self.bars: list[pg.BarGraphItem] = []

        self.totals = _table(["Group", "Tokens", "Cost", "Share", "Runs", "Steps"])
        self.runs = _table(["Run", "Agent", "Model", "Tokens", "Cost"], stretch=1)
        self.runs.cellDoubleClicked.connect(lambda row, _col: self._choose(row))
        tables = QSplitter(Qt.Orientation.Horizontal)
        for title, table in (("Totals", self.totals), ("Most expensive runs", self.runs)):
            pane = QWidget()
            lay = QVBoxLayout(pane)
            lay.setContentsMargins(0, 0, 0, 0)
            lay.addWidget(QLabel(title))
            lay.addWidget(table)
            tables.addWidget(pane)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.plot)
        split.addWidget(tables)
        split.setSizes([380, 260])

        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(split, 1)
        self.resize(1100, 720)

        self._later = QTimer(self)
        self._later.setSingleShot(True)
        self._later.setInterval(REFRESH_MS)
        self._later.timeout.connect(self.refresh)
        for box in (self.group_box, self.period_box):
            box.currentIndexChanged.connect(lambda _i: self.refresh())
        self.measure_box.currentIndexChanged.connect(lambda _i: self._draw())
        self.refresh_button.clicked.connect(self.refresh)
        self.apply_palette(theme.current())

    def _choose(self, row: int) -> None:
        item = self.runs.item(row, 0)
        if item is not None:
            self.run_chosen.emit(item.text())

    @property
    def by(self) -> str:
        return str(self.group_box.currentData())

    def log_changed(self) -> None:
        """The log changed: read it again soon (once per ``REFRESH_MS`` however often)."""
        if self.isVisible() and not self._later.isActive():
            self._later.start()

    def refresh(self) -> None:
        """Read the report again off the GUI thread; a call while one read runs queues one."""
        if self._reading:
            self._again = True
            return
        self._reading = True
        _label, span, bucket = PERIODS[self.period_box.currentIndex()]
        since = None if span is None else time.time() - span
        location, by, read = self.location, self.by, self._read
        started = time.monotonic()

        def work() -> tuple[CostReport, float]:
            return read(location, by, since=since, bucket=bucket), time.monotonic() - started

        jobs.submit(work, self._got, self._failed, owner=self)

    def _got(self, result: tuple[CostReport, float]) -> None:
        self.report, seconds = result
        self._finished()
        self._draw()
        totals = self.report.totals
        usd = sum(r.cost_usd for r in totals)
        tokens = sum(r.tokens for r in totals)
        runs = len(set().union(*(r.run_ids for r in totals))) if totals else 0
        self.summary.setText(
            f"{money(usd)} and {tokens:,} tokens over {runs:,} runs"
            f"  ·  read in {seconds * 1000:,.0f} ms at {time.strftime('%H:%M:%S')}"
        )
        self.loaded.emit()

    def _failed(self, exc: BaseException) -> None:
        self._finished()
        self.summary.setText(f"cannot read the log: {exc}")

    def _finished(self) -> None:
        self._reading = False
        if self._again:
            self._again = False
            QTimer.singleShot(0, self.refresh)

    def _draw(self) -> None:
        if self.report is None:
            return
        tokens = self.measure_box.currentText() == "Tokens"
        drawn = stacks(self.report, tokens=tokens)
        self.drawn = drawn
        for item in self.bars:
            self.plot.removeItem(item)
            self.legend.removeItem(item)
        self.bars = []
        if not drawn.empty:
            centres = drawn.starts  # a bar stands on its day's (or hour's) tick
            for g, name in enumerate(drawn.groups):
                colour = COLOURS[min(g, len(COLOURS) - 1)]
                item = pg.BarGraphItem(
                    x=centres,
                    width=drawn.width * 0.8,
                    y0=drawn.base[g],
                    height=drawn.height[g],
                    brush=pg.mkBrush(colour),
                    pen=pg.mkPen(None),
                    name=name,
                )
                self.plot.addItem(item)
                self.bars.append(item)
            pad = drawn.width * 0.7
            self.plot.setXRange(drawn.starts[0] - pad, drawn.starts[-1] + pad)
            top = float((drawn.base[-1] + drawn.height[-1]).max()) if len(drawn.groups) else 0.0
            self.plot.setYRange(0, top * 1.1 or 1.0)
        self.plot.setLabel("left", "tokens" if tokens else "US$")
        self._fill_tables()

    def _fill_tables(self) -> None:
        assert self.report is not None
        totals = self.report.totals
        self.totals.setSortingEnabled(False)
        self.totals.setRowCount(len(totals))
        for i, r in enumerate(totals):
            cells = (
                _item(r.key),
                _item(f"{r.tokens:,}", right=True),
                _item(money(r.cost_usd), right=True),
                _item(f"{share(r, totals):.0%}", right=True),
                _item(f"{r.runs:,}", right=True),
                _item(f"{r.steps:,}", right=True),
            )
            for col, cell in enumerate(cells):
                self.totals.setItem(i, col, cell)
        self.runs.setRowCount(len(self.report.runs))
        for i, r in enumerate(self.report.runs):
            row = (
                _item(r.key),
                _item(short_agent(r.agent)),
                _item(r.model),
                _item(f"{r.tokens:,}", right=True),
                _item(money(r.cost_usd), right=True),
            )
            row[1].setToolTip(r.agent)
            for col, cell in enumerate(row):
                self.runs.setItem(i, col, cell)

    def apply_palette(self, pal: theme.Palette) -> None:
        self.plot.setBackground(pal.background)
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setPen(pal.grid)
            axis.setTextPen(pal.foreground)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.refresh()
