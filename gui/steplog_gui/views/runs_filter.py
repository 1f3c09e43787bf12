"""The filter bar above the runs list: status, agent, tag and text, as ``steplog runs`` takes them.

What is typed becomes one ``RunQuery`` (``steplog.log.find.query_from_options``: the command
line's own reading, so the bar and ``steplog runs`` never disagree on what a filter means), sent
``query_changed`` a moment after the person stops typing. A field that cannot be read (a tag
without ``=``) is marked and says why; the list keeps its last good filter.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QLineEdit, QWidget

from steplog.errors import UsageError
from steplog.log.find import RunQuery, query_from_options
from steplog.log.runstatus import ACTIVE, TERMINAL, RunStatus

ANY_STATUS = "any status"
STATUS_CHOICES: tuple[tuple[str, str], ...] = (
    (ANY_STATUS, ""),
    ("not finished", ",".join(s.value for s in RunStatus if s in ACTIVE)),
    ("finished", ",".join(s.value for s in RunStatus if s in TERMINAL)),
    ("failed or gave up", f"{RunStatus.FAILED},{RunStatus.GAVE_UP}"),
    *((s.value.replace("_", " "), s.value) for s in RunStatus),
)
"""(label, ``--status`` text) of the status menu."""

TYPING_PAUSE_MS = 150
"""How long after the last key the filter applies."""


class RunsFilterBar(QWidget):
    """Status menu, agent, tags (``KEY=VALUE``, several separated by spaces) and search text."""

    query_changed = Signal(object)
    """A new ``RunQuery`` to show (only a readable one)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status = QComboBox()
        for label, value in STATUS_CHOICES:
            self.status.addItem(label, value)
        self.status.setToolTip("Runs in this status")
        self.agent = QLineEdit()
        self.agent.setPlaceholderText("agent")
        self.agent.setToolTip("Runs of this agent, as the log names it (`steplog runs --agent`)")
        self.tags = QLineEdit()
        self.tags.setPlaceholderText("tag KEY=VALUE")
        self.status.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.tags.setToolTip("Runs with these tags: KEY=VALUE, several separated by spaces")
        self.search = QLineEdit()
        self.search.setPlaceholderText("search runs")
        self.search.setToolTip("Runs whose id, agent, params, reason or tags contain this text")
        self.search.setClearButtonEnabled(True)
        # Two rows: the Runs dock is narrow (run, status and steps fit), and four fields side by
        # side there would each be too short to read what is typed.
        grid = QGridLayout(self)
        grid.setContentsMargins(2, 2, 2, 2)
        grid.setSpacing(3)
        grid.addWidget(self.search, 0, 0, 1, 2)
        grid.addWidget(self.status, 0, 2)
        grid.addWidget(self.agent, 1, 0)
        grid.addWidget(self.tags, 1, 1, 1, 2)
        for column, stretch in enumerate((2, 2, 1)):
            grid.setColumnStretch(column, stretch)
        self.problem = ""
        """Why the typed filter cannot be read ('' when it can)."""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(TYPING_PAUSE_MS)
        self._timer.timeout.connect(self.apply)
        self.status.currentIndexChanged.connect(lambda _i: self.apply())
        for edit in (self.agent, self.tags, self.search):
            edit.textChanged.connect(lambda _t: self._timer.start())
            edit.returnPressed.connect(self.apply)

    def query(self) -> RunQuery:
        """The filter as typed; ``UsageError`` saying what is wrong with it."""
        return query_from_options(
            status=self.status.currentData() or None,
            agent=self.agent.text().strip() or None,
            tags=self.tags.text().split(),
            search=self.search.text().strip() or None,
        )

    def apply(self) -> None:
        self._timer.stop()
        try:
            query = self.query()
        except UsageError as exc:
            self._show_problem(str(exc))
            return
        self._show_problem("")
        self.query_changed.emit(query)

    def _show_problem(self, text: str) -> None:
        self.problem = text
        bad = "--tag" in text
        self.tags.setStyleSheet("border: 1px solid #d9534f;" if bad else "")
        self.tags.setToolTip(
            text if bad else "Runs with these tags: KEY=VALUE, several separated by spaces"
        )


__all__ = ["ANY_STATUS", "STATUS_CHOICES", "RunsFilterBar"]
