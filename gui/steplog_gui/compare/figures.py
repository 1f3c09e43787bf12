"""The figures side by side: what each agent sent twice, redid, spent, and how long it took.

Every number comes from a source that is named in its tooltip and defined elsewhere: duplicates
from each run's verdict (``steplog.verdict``, read from the outbox's own ledger), the durable
run's redone steps and tokens from its log, the naive run's from its trace (the log records none
of its steps), times and kills from the log.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from steplog_gui import theme
from steplog_gui.model.compare_state import ComparedRuns, spent
from steplog_gui.model.run_state import RunState


@dataclass(frozen=True)
class Figure:
    name: str
    naive: str
    durable: str
    tip: str
    naive_bad: bool = False
    """The naive value is a failure (drawn in the duplicate colour)."""


def _extra(ledger: Any) -> int:
    return sum(len(group) - 1 for group in ledger.duplicates()) if ledger is not None else 0


def _duplicates(verdict: Any, ledger: Any) -> str:
    if verdict is None or verdict.deliveries is None:
        return "—"
    extra = _extra(ledger)
    return f"{len(verdict.duplicates)}" + (f" ({extra} extra copies)" if extra else "")


def _time(run: RunState, created: float, now: float) -> str:
    if run.finished is not None:
        return f"{run.finished - created:.1f} s ({run.status})"
    return f"running, {now - created:.0f} s so far" if math.isfinite(created) else "—"


def _cost(value: float, model: str) -> str:
    return f"${value:.4f}" + (" (offline model)" if model == "offline" and not value else "")


def figures(
    result: ComparedRuns,
    naive_verdict: Any,
    durable_verdict: Any,
    naive_ledger: Any = None,
    durable_ledger: Any = None,
    now: float | None = None,
) -> list[Figure]:
    now = time.time() if now is None else now
    n, d, trace = result.naive, result.durable, result.trace
    tokens = {"naive": int(spent(n, "tokens")), "durable": int(spent(d, "tokens"))}
    said = {
        side: f"{tokens[side]:,}" + (" (est.)" if spent(run, "tokens_estimated") else "")
        for side, run in (("naive", n), ("durable", d))
    }
    return [
        Figure(
            "Messages duplicated",
            _duplicates(naive_verdict, naive_ledger),
            _duplicates(durable_verdict, durable_ledger),
            "messages the outside world received more than once: each run's verdict, from its "
            "part of the outbox's own ledger",
            naive_bad=bool(naive_verdict is not None and naive_verdict.duplicates),
        ),
        Figure(
            "Steps redone",
            f"{trace.redone}",
            f"{durable_verdict.redone_steps if durable_verdict is not None else d.redone}",
            "naive: actions it started again after a kill, counted from its trace (the log "
            "records none of its steps); durable: steps run again because an engine was killed, "
            "from the log (its verdict's count: retries after errors are not redone work)",
            naive_bad=trace.redone > len(n.kills),
        ),
        Figure(
            "Tokens spent",
            said["naive"],
            said["durable"],
            "every model call made, in every process; a call cut short by a kill is charged the "
            "most it could cost, as the provider may have billed it (naive: its trace; durable: "
            "the log); the Tokens spent chart's last point (compare_state.spent)",
            naive_bad=tokens["naive"] > tokens["durable"],
        ),
        Figure(
            "Cost",
            _cost(spent(n, "cost_usd"), n.model),
            _cost(spent(d, "cost_usd"), d.model),
            "USD at the model's list price (the offline scripted model costs nothing); token "
            "counts marked est. are estimated from text length, the model reported none",
        ),
        Figure(
            "Time to finish",
            _time(n, result.naive_created, now),
            _time(d, result.durable_created, now),
            "from the run's creation to its end, in the log",
        ),
        Figure(
            "Kills",
            f"{len(n.kills)}",
            f"{len(d.kills)}",
            "SIGKILLs of the engine's process group, in the log",
        ),
    ]


SIDES = ("naive", "durable")


class CompareFigures(QWidget):
    """A small table: one row per figure, a column per agent."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(8, 2, 8, 2)
        self._grid.setHorizontalSpacing(16)
        self._grid.setVerticalSpacing(1)
        bold = QFont(self.font())
        bold.setBold(True)
        for col, text in enumerate(("", "naive agent", "steplog (durable)")):
            head = QLabel(text)
            head.setFont(bold)
            self._grid.addWidget(head, 0, col)
        self.cells: dict[tuple[str, str], QLabel] = {}
        self._names: dict[str, QLabel] = {}
        self._rows: list[Figure] = []

    def show_figures(self, rows: list[Figure]) -> None:
        self._rows = rows
        for r, fig in enumerate(rows, start=1):
            if fig.name not in self._names:
                name = QLabel(fig.name)
                self._names[fig.name] = name
                self._grid.addWidget(name, r, 0)
                for col, side in enumerate(("naive", "durable"), start=1):
                    cell = QLabel("")
                    cell.setTextFormat(Qt.TextFormat.PlainText)
                    cell.setObjectName(f"figure_{side}_{fig.name.lower().replace(' ', '_')}")
                    self.cells[(fig.name, side)] = cell
                    self._grid.addWidget(cell, r, col)
            self._names[fig.name].setToolTip(fig.tip)
            for side, value in (("naive", fig.naive), ("durable", fig.durable)):
                cell = self.cells[(fig.name, side)]
                cell.setText(value)
                cell.setToolTip(fig.tip)
        self._colour()

    def _colour(self) -> None:
        """A naive figure that is a failure in the theme's duplicate colour; every other cell
        with no colour of its own (an empty palette: it inherits the window's text colour, so
        it follows a theme change; a copied colour stayed black on the dark theme's grey)."""
        pal = theme.current()
        for fig in self._rows:
            for side in SIDES:
                p = QPalette()
                if side == "naive" and fig.naive_bad:
                    p.setColor(QPalette.ColorRole.WindowText, theme.qcolor(pal.duplicate))
                self.cells[(fig.name, side)].setPalette(p)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._rows:
            self._colour()  # the duplicate colour of the new theme

    def value(self, name: str, side: str) -> str:
        return self.cells[(name, side)].text()
