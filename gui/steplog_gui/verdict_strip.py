"""The verdict strip: kills, steps redone, duplicates, last resume latency, PASS/FAIL, live.

A view over ``steplog.verdict.Verdict`` (delivered by ``VerdictWatcher``): it shows the engine's
one verdict and decides nothing itself.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from . import theme
from .verdict_watcher import VerdictWatcher


def decision(verdict: Any) -> str:
    """PASS / FAIL / running… / '' for a ``steplog.verdict.Verdict`` (or ``None``)."""
    if verdict is None:
        return ""
    if verdict.passed is None:  # live: FAIL as soon as a check failed (a duplicate cannot be undone)
        return "FAIL" if verdict.failing else "running…"
    return "PASS" if verdict.passed else "FAIL"


class VerdictStrip(QFrame):
    def __init__(self, watcher: VerdictWatcher, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.labels: dict[str, QLabel] = {}
        layout = QHBoxLayout(self)
        for key in ("kills", "redone", "duplicates", "latency", "deliveries", "verdict"):
            label = QLabel("")
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setObjectName(f"verdict_{key}")
            self.labels[key] = label
            layout.addWidget(label)
        self.hint = QLabel("No run selected: pick one under Runs, or start one with New run "
                           "(the demo: steplog demo).")
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.hint)
        layout.addStretch(1)
        self.labels["verdict"].setMinimumWidth(80)
        self._watcher = watcher
        watcher.verdict_changed.connect(self.show_verdict)
        self.show_verdict(None)

    def _in_progress(self) -> int:
        """Steps the engine is executing right now (counted by the verdict as executions)."""
        return self._watcher.in_progress()

    def show_verdict(self, v: Any) -> None:
        pal = theme.current()
        self.hint.setVisible(v is None)
        if v is None:
            for label in self.labels.values():
                label.setText("")
            self.labels["verdict"].setStyleSheet("")
            return
        self.labels["kills"].setText(f"Kills: {len(v.kills)}")
        redone = v.redone_steps if v.passed is not None else max(0, v.redone_steps - self._in_progress())
        self.labels["redone"].setText(f"Steps redone: {redone}")
        dup = "?" if v.deliveries is None else str(len(v.duplicates))
        self.labels["duplicates"].setText(f"Duplicates: {dup}")
        self.labels["duplicates"].setStyleSheet(f"color: {pal.duplicate}; font-weight: bold" if v.duplicates else "")
        latencies = v.latencies
        self.labels["latency"].setText("Last resume latency: "
                                       + (f"{latencies[-1] * 1000:.0f} ms" if latencies else "—"))
        self.labels["deliveries"].setText("" if v.deliveries is None else
                                          f"Outbox: {v.deliveries} delivered / {v.attempts} attempts")
        text = decision(v)
        colour = {"PASS": pal.status["succeeded"], "FAIL": pal.status["failed"]}.get(text, pal.foreground)
        self.labels["verdict"].setText(text)
        self.labels["verdict"].setStyleSheet(f"color: {colour}; font-weight: bold; font-size: 14pt")
        self.labels["verdict"].setToolTip("\n".join(
            f"{'✔' if c.ok else '✘' if c.ok is False else '·'} {c.name}: {c.detail}" for c in v.checks))
