"""The approvals inbox: every run in the log waiting for a signal, the longest waiting first,
with what it waits for and what it shows (its last step's result), and Approve / Reject.

A decision is the signal the run waits for, sent with ``steplog.signal`` (the log records it:
``signal`` row and event, with its time), its data ``{"approved": bool, "note": comment, "by":
user}``; its key is the run's and the wait's, so a second click never sends a second decision.
Reads and sends run off the GUI thread (``jobs``). Text from the run is shown as plain text.
"""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from steplog.log.inbox import Waiting, read_inbox
from steplog_gui import jobs

REFRESH_MS = 1000
"""Soonest a change of the log is read again."""


def _since(ts: float | None) -> str:
    if ts is None:
        return ""
    minutes = max(0, int(time.time() - ts) // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def shown_text(value: Any, limit: int = 4000) -> str:
    """A step result as the inbox shows it: text as it is, anything else as indented JSON."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "\n…"


def decision(approved: bool, note: str) -> dict[str, Any]:
    """The data of the signal a decision sends."""
    return {"approved": approved, "note": note or None, "by": getpass.getuser()}


class ApprovalsPanel(QWidget):
    """The inbox over the log at ``location`` (``set_location`` when another log is opened)."""

    loaded = Signal()
    """The list was read and shown (tests wait for it)."""
    decided = Signal(str, bool)
    """A decision was sent: run id, approved."""
    notice = Signal(str)
    """A line for the status bar."""

    def __init__(
        self,
        location: Any,
        parent: QWidget | None = None,
        *,
        send: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self.location = location
        self._send = send
        self.waiting: list[Waiting] = []
        self._reading = False
        self._again = False

        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Run", "Waits for", "Since", "Agent"])
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        for col in range(4):
            header.setSectionResizeMode(
                col,
                QHeaderView.ResizeMode.Stretch
                if col == 3
                else QHeaderView.ResizeMode.ResizeToContents,
            )
        self.table.itemSelectionChanged.connect(self._show_selected)
        self.shows_label = QLabel("")
        self.shows_label.setTextFormat(Qt.TextFormat.PlainText)
        self.shows = QPlainTextEdit()
        self.shows.setReadOnly(True)
        self.note = QLineEdit()
        self.note.setPlaceholderText("comment (optional), sent with the decision")
        self.approve_button = QPushButton("Approve")
        self.reject_button = QPushButton("Reject")
        self.approve_button.clicked.connect(lambda: self.decide(True))
        self.reject_button.clicked.connect(lambda: self.decide(False))
        self.empty = QLabel("No run waits for a signal.")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)

        buttons = QHBoxLayout()
        buttons.addWidget(self.note, 1)
        buttons.addWidget(self.approve_button)
        buttons.addWidget(self.reject_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.empty)
        layout.addWidget(self.table, 2)
        layout.addWidget(self.shows_label)
        layout.addWidget(self.shows, 3)
        layout.addLayout(buttons)

        self._later = QTimer(self)
        self._later.setSingleShot(True)
        self._later.setInterval(REFRESH_MS)
        self._later.timeout.connect(self.refresh)
        self._show_selected()

    def set_location(self, location: Any) -> None:
        self.location = location
        self.refresh()

    def log_changed(self) -> None:
        """The log changed: read the inbox again soon."""
        if not self._later.isActive():
            self._later.start()

    def refresh(self) -> None:
        if self._reading:
            self._again = True
            return
        self._reading = True
        location = self.location
        jobs.submit(lambda: read_inbox(location), self._got, self._failed, owner=self)

    def _got(self, waiting: list[Waiting]) -> None:
        chosen = self.selected()
        self.waiting = waiting
        self.table.setRowCount(len(waiting))
        for i, w in enumerate(waiting):
            cells = (w.run_id, w.signal, _since(w.since), w.agent.rpartition(":")[2] or w.agent)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 3:
                    item.setToolTip(w.agent)
                self.table.setItem(i, col, item)
        rows = [i for i, w in enumerate(waiting) if chosen and w.run_id == chosen.run_id]
        if rows or waiting:
            self.table.selectRow(rows[0] if rows else 0)
        self.empty.setText("No run waits for a signal.")
        self.empty.setVisible(not waiting)
        self.table.setVisible(bool(waiting))
        self._show_selected()
        self._done_reading()
        self.loaded.emit()

    def _failed(self, exc: BaseException) -> None:
        """A log that cannot be read (not made yet, foreign, gone): the window's problem banner
        says why; the inbox only says it has nothing to show."""
        self._done_reading()
        self.waiting = []
        self.table.setRowCount(0)
        self.table.setVisible(False)
        self.empty.setText("No run waits for a signal (the log cannot be read now).")
        self.empty.setVisible(True)
        self._show_selected()

    def _done_reading(self) -> None:
        self._reading = False
        if self._again:
            self._again = False
            QTimer.singleShot(0, self.refresh)

    def selected(self) -> Waiting | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.waiting):
            return None
        return self.waiting[rows[0].row()]

    def _show_selected(self) -> None:
        w = self.selected()
        for button in (self.approve_button, self.reject_button):
            button.setEnabled(w is not None)
        self.note.setEnabled(w is not None)
        if w is None:
            self.shows_label.setText("")
            self.shows.setPlainText("")
            return
        self.shows_label.setText(
            f"{w.run_id} waits for {w.signal!r}; its last step"
            + (f" ({w.step}) shows:" if w.step else ": none yet")
        )
        self.shows.setPlainText("" if w.step is None else shown_text(w.shows))

    def decide(self, approved: bool) -> None:
        """Send the selected run the signal it waits for, approving or rejecting it."""
        w = self.selected()
        if w is None:
            return
        data = decision(approved, self.note.text().strip())
        location, key = self.location, f"inbox:{w.run_id}:{w.signal}:{w.since}"
        send = self._send

        def work() -> int:
            if send is not None:
                return int(send(w.run_id, w.signal, data, db=location, key=key))
            import steplog

            return steplog.signal(w.run_id, w.signal, data, db=location, key=key)

        for button in (self.approve_button, self.reject_button):
            button.setEnabled(False)

        def sent(_id: int) -> None:
            self.note.clear()
            verb = "approved" if approved else "rejected"
            self.notice.emit(f"{w.run_id}: {verb} ({w.signal!r} sent)")
            self.decided.emit(w.run_id, approved)
            self.refresh()

        def failed(exc: BaseException) -> None:
            self.notice.emit(f"{w.run_id}: the decision was not sent: {exc}")
            self._show_selected()

        jobs.submit(work, sent, failed, owner=self)
