"""The outbox panel: deliveries and attempts as the outbox's own ledger records them.

A repeated attempt the outbox deduplicated (same key and body: 200, nothing delivered) reads
"deduplicated"; a delivery that belongs to a ``Ledger.duplicates()`` group, a real duplicate
the outside world received, is shown in red (there should never be one).
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from steplog_gui import theme
from steplog_gui.feeds.outbox_watcher import OutboxWatcher
from steplog_gui.views.records_model import RecordsModel, records_table

OUTCOME_TEXT = {
    "delivered": "delivered",
    "replayed": "deduplicated (replayed, nothing sent)",
    "conflict": "conflict (same key, other body)",
    "in_flight": "in flight",
    "rejected": "rejected",
    "error": "outbox error",
}


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def delivery_records(ledger: Any) -> list[dict[str, Any]]:
    dup_ids = {d.id for group in ledger.duplicates() for d in group[1:]}
    return [
        {
            "id": d.id,
            "key": d.key,
            "what": d.body.get("ticket_id") or ("digest" if d.body.get("digest") else ""),
            "time": _clock(d.ts),
            "duplicate": d.id in dup_ids,
            "note": "DUPLICATE DELIVERY" if d.id in dup_ids else "",
        }
        for d in ledger.deliveries
    ]


def attempt_records(ledger: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": a.id,
            "key": a.key or "(no key)",
            "status": a.status,
            "outcome": OUTCOME_TEXT.get(a.outcome, a.outcome),
            "time": _clock(a.ts),
        }
        for a in ledger.attempts
    ]


class OutboxPanel(QWidget):
    def __init__(self, watcher: OutboxWatcher, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._watcher = watcher
        self.summary = QLabel("no outbox for this run")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)

        def red(record: dict[str, Any]) -> Any:
            return theme.qcolor(theme.current().duplicate) if record.get("duplicate") else None

        def dedup(record: dict[str, Any]) -> Any:
            return (
                theme.qcolor(theme.current().outcome[2])
                if str(record.get("outcome", "")).startswith("dedup")
                else None
            )

        self.deliveries = RecordsModel(
            [
                ("#", "id"),
                ("Idempotency key", "key"),
                ("Ticket", "what"),
                ("Delivered", "time"),
                ("", "note"),
            ],
            self,
            colour=red,
        )
        self.attempts = RecordsModel(
            [
                ("#", "id"),
                ("Idempotency key", "key"),
                ("HTTP", "status"),
                ("Outcome", "outcome"),
                ("Time", "time"),
            ],
            self,
            colour=dedup,
        )
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(records_table(self.deliveries))
        split.addWidget(records_table(self.attempts))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(split)
        watcher.ledger_changed.connect(lambda ledger: self._show(ledger, watcher.problem))
        watcher.problem_changed.connect(lambda text: self._show(watcher.shown, text))

    def _show(self, ledger: Any, problem: str = "") -> None:
        if ledger is None:
            self.deliveries.set_records([])
            self.attempts.set_records([])
            self.summary.setText(
                problem
                or (
                    f"outbox {self._watcher.url}: waiting"
                    if self._watcher.url
                    else "no outbox for this run"
                )
            )
            return
        dups = sum(len(g) - 1 for g in ledger.duplicates())
        replayed = sum(1 for a in ledger.attempts if a.outcome == "replayed")
        self.deliveries.set_records(delivery_records(ledger))
        self.attempts.set_records(attempt_records(ledger))
        self.summary.setText(
            f"{self._watcher.source or self._watcher.url}: {len(ledger.deliveries)} deliveries, "
            f"{len(ledger.attempts)} attempts, {replayed} deduplicated repeats, "
            f"{dups} duplicate deliveries" + (f" — {problem}" if problem else "")
        )
