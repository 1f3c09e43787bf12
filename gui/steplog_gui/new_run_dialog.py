"""The "New run" dialog: an agent (built-in, ``pkg.mod:fn`` or ``file.py:fn``), params and budgets."""

from __future__ import annotations

import time

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLineEdit, QPushButton, QSpinBox, QWidget)

from .demo import DEMO_AGENTS, DEMO_PACE
from .engine_process import LaunchSpec

BUILTIN_AGENTS = ("demo", "naive", "flaky")


def _optional_spin(maximum: float, decimals: int = 0) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setDecimals(decimals)
    spin.setRange(0, maximum)
    spin.setSpecialValueText("agent default")
    return spin


class NewRunDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, *, outbox: str | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Start a new run")
        self.agent = QComboBox()
        self.agent.setEditable(True)
        self.agent.addItems(BUILTIN_AGENTS)
        self.agent.setToolTip("a built-in name, package.module:function or path/to/file.py:function")
        browse = QPushButton("File…")
        browse.clicked.connect(self._browse)
        agent_row = QHBoxLayout()
        agent_row.addWidget(self.agent, 1)
        agent_row.addWidget(browse)
        self.run_id = QLineEdit(time.strftime("run-%Y%m%d-%H%M%S"))
        self.params = QLineEdit()
        self.params.setPlaceholderText("KEY=VALUE KEY=VALUE …  (e.g. tickets=4)")
        self.pace = QDoubleSpinBox()
        self.pace.setRange(0, 60)
        self.pace.setSingleStep(0.25)
        self.pace.setValue(DEMO_PACE)  # the demo's pace: long enough to press Kill now mid-step
        self.agent.currentTextChanged.connect(
            lambda name: self.pace.setValue(DEMO_PACE if name in DEMO_AGENTS else 0.0))
        self.max_steps = QSpinBox()
        self.max_steps.setRange(0, 10_000_000)
        self.max_steps.setSpecialValueText("agent default")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 2_000_000_000)
        self.max_tokens.setSpecialValueText("agent default")
        self.max_seconds = _optional_spin(1e7)
        self.max_cost = _optional_spin(1e6, 4)
        self.outbox = QLineEdit(outbox or "")
        self.outbox.setPlaceholderText("empty for demo/naive: the demo outbox; else http://127.0.0.1:PORT")
        form = QFormLayout(self)
        form.addRow("Agent", agent_row)
        form.addRow("Run id", self.run_id)
        form.addRow("Params", self.params)
        form.addRow("Pace (s per model call)", self.pace)
        form.addRow("Max steps", self.max_steps)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Max active seconds", self.max_seconds)
        form.addRow("Max cost (USD)", self.max_cost)
        form.addRow("Outbox URL", self.outbox)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Agent file", "", "Python (*.py)")
        if path:
            self.agent.setEditText(f"{path}:")

    def spec(self, db: object) -> LaunchSpec:
        params = dict(p.split("=", 1) for p in self.params.text().split() if "=" in p)
        limits: dict[str, float] = {}
        if self.max_steps.value():
            limits["max-steps"] = self.max_steps.value()
        if self.max_tokens.value():
            limits["max-tokens"] = self.max_tokens.value()
        if self.max_seconds.value():
            limits["max-seconds"] = self.max_seconds.value()
        if self.max_cost.value():
            limits["max-cost"] = self.max_cost.value()
        from pathlib import Path

        return LaunchSpec(agent=self.agent.currentText().strip(), run_id=self.run_id.text().strip(), db=Path(str(db)),
                          outbox=self.outbox.text().strip() or None, pace=self.pace.value(), params=params,
                          limits=limits)
