"""The verdict strip: kills, steps redone, duplicates, last resume latency, PASS/FAIL, live.

A view over ``VerdictInput`` (gathered from the run's events and the outbox's ledger) and the one
decision function ``verdict_input.judge``; it decides nothing itself.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from . import theme
from .monitor import Monitor
from .outbox_watcher import OutboxWatcher
from .verdict_input import OutboxCounts, Verdict, VerdictInput, judge


class VerdictStrip(QFrame):
    def __init__(self, monitor: Monitor, watcher: OutboxWatcher, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._watcher = watcher
        self._run_id: str | None = None
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.labels: dict[str, QLabel] = {}
        layout = QHBoxLayout(self)
        for key in ("kills", "redone", "duplicates", "latency", "deliveries", "verdict"):
            label = QLabel("")
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setObjectName(f"verdict_{key}")
            self.labels[key] = label
            layout.addWidget(label)
        layout.addStretch(1)
        self.labels["verdict"].setMinimumWidth(80)
        self.last: tuple[VerdictInput, Verdict] | None = None
        monitor.runs_changed.connect(lambda ids: self.refresh() if self._run_id in ids else None)
        monitor.state_reset.connect(lambda: self.set_run(None))
        watcher.ledger_changed.connect(lambda _l: self.refresh())
        self.refresh()

    def set_run(self, run_id: str | None) -> None:
        self._run_id = run_id
        self.refresh()

    def refresh(self) -> None:
        run = self._monitor.run(self._run_id) if self._run_id else None
        if run is None:
            for label in self.labels.values():
                label.setText("")
            self.labels["verdict"].setText("no run selected")
            self.last = None
            return
        ledger = self._watcher.ledger
        counts = OutboxCounts.from_ledger(ledger) if ledger is not None else None
        vin = VerdictInput.gather(run, counts)
        verdict = judge(vin)
        self.last = (vin, verdict)
        pal = theme.current()
        self.labels["kills"].setText(f"Kills: {vin.kills}")
        self.labels["redone"].setText(f"Steps redone: {vin.steps_redone}")
        dup = "?" if counts is None else str(counts.duplicates)
        self.labels["duplicates"].setText(f"Duplicates: {dup}")
        self.labels["duplicates"].setStyleSheet(f"color: {pal.duplicate}; font-weight: bold"
                                                if counts is not None and counts.duplicates else "")
        latency = f"{vin.resume_latencies[-1] * 1000:.0f} ms" if vin.resume_latencies else "—"
        self.labels["latency"].setText(f"Last resume latency: {latency}")
        self.labels["deliveries"].setText("" if counts is None else
                                          f"Outbox: {counts.deliveries} delivered / {counts.attempts} attempts "
                                          f"({counts.replayed} deduplicated)")
        colour = {"PASS": pal.status["succeeded"], "FAIL": pal.status["failed"]}.get(verdict.decision, pal.foreground)
        self.labels["verdict"].setText(verdict.decision if verdict.decision != "RUNNING" else "running…")
        self.labels["verdict"].setStyleSheet(f"color: {colour}; font-weight: bold; font-size: 14pt")
        self.labels["verdict"].setToolTip("\n".join(verdict.reasons) or "every effect once, at most one step redone per kill")
