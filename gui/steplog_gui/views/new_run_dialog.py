"""The "New run" dialog: an agent (built-in, ``pkg.mod:fn`` or ``file.py:fn``), the Python that
runs it, params and budgets."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QWidget,
)

from steplog.log.location import LogLocation, parse
from steplog_gui import jobs
from steplog_gui.processes import interpreter
from steplog_gui.processes.demo import DEMO_AGENTS, DEMO_PACE
from steplog_gui.processes.engine_process import LaunchSpec
from steplog_gui.settings import Settings

BUILTIN_AGENTS = ("demo", "naive", "flaky")


def _optional_spin(maximum: float, decimals: int = 0) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setDecimals(decimals)
    spin.setRange(0, maximum)
    spin.setSpecialValueText("agent default")
    return spin


OWN_PYTHON = "the monitor's own"


def _with_button(
    field: QWidget, text: str, slot: Callable[[], object]
) -> tuple[QHBoxLayout, QPushButton]:
    """``field`` and a button beside it (``text``, calling ``slot``), in one row."""
    button = QPushButton(text)
    button.clicked.connect(slot)
    row = QHBoxLayout()
    row.addWidget(field, 1)
    row.addWidget(button)
    return row, button


class NewRunDialog(QDialog):
    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        outbox: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Start a new run")
        self.setMinimumWidth(560)  # agent specs and interpreter paths are long
        self._settings = settings
        self.agent = QComboBox()
        self.agent.setEditable(True)
        self.agent.addItems(BUILTIN_AGENTS)
        self.agent.setToolTip(
            "a built-in name, package.module:function or path/to/file.py:function"
        )
        agent_row, _ = _with_button(self.agent, "File…", self._browse)
        self.python = QComboBox()
        self.python.setEditable(True)
        self.python.addItem(OWN_PYTHON)
        self.python.addItems(settings.interpreters if settings is not None else [])
        self.python.setToolTip(
            "the Python environment your agent's packages are installed in (it needs steplog "
            "too); built-in agents always run on the monitor's own"
        )
        python_row, pick_python = _with_button(self.python, "Choose…", self._browse_python)
        self._python_widgets = (self.python, pick_python)
        self.python_note = QLabel()
        self.python_note.setTextFormat(
            Qt.TextFormat.PlainText
        )  # paths and tracebacks, never markup
        self.python_note.setWordWrap(True)
        self.agent.currentTextChanged.connect(self._agent_changed)
        self.run_id = QLineEdit(time.strftime("run-%Y%m%d-%H%M%S"))
        self.params = QLineEdit()
        self.params.setPlaceholderText("KEY=VALUE KEY=VALUE …  (e.g. tickets=4)")
        self.pace = QDoubleSpinBox()
        self.pace.setRange(0, 60)
        self.pace.setSingleStep(0.25)
        self.pace.setValue(DEMO_PACE)  # the demo's pace: long enough to press Kill now mid-step
        self.agent.currentTextChanged.connect(
            lambda name: self.pace.setValue(DEMO_PACE if name in DEMO_AGENTS else 0.0)
        )
        self.max_steps = QSpinBox()
        self.max_steps.setRange(0, 10_000_000)
        self.max_steps.setSpecialValueText("agent default")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 2_000_000_000)
        self.max_tokens.setSpecialValueText("agent default")
        self.max_seconds = _optional_spin(1e7)
        self.max_cost = _optional_spin(1e6, 4)
        self.outbox = QLineEdit(outbox or "")
        self.outbox.setPlaceholderText(
            "empty for demo/naive: the demo outbox; else http://127.0.0.1:PORT"
        )
        form = QFormLayout(self)
        form.addRow("Agent", agent_row)
        form.addRow("Python", python_row)
        form.addRow("", self.python_note)
        form.addRow("Run id", self.run_id)
        form.addRow("Params", self.params)
        form.addRow("Pace (s per model call)", self.pace)
        form.addRow("Max steps", self.max_steps)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Max active seconds", self.max_seconds)
        form.addRow("Max cost (USD)", self.max_cost)
        form.addRow("Outbox URL", self.outbox)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self._ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self._checking: tuple[str, str] | None = None
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self._agent_changed(self.agent.currentText())

    # -- the interpreter ----------------------------------------------------------------------

    def _agent_changed(self, text: str) -> None:
        """Built-in agents run on the monitor's own Python; an own agent on the one last chosen for
        it."""
        builtin = text.strip() in BUILTIN_AGENTS
        for widget in self._python_widgets:
            widget.setEnabled(not builtin)
        remembered = (
            None
            if builtin or self._settings is None
            else self._settings.interpreter_for(interpreter.canonical_agent(text))
        )
        self.python.setEditText(remembered or OWN_PYTHON)
        self._note("")

    def _note(self, text: str) -> None:
        """What the last check found, under the Python row; no empty row while there is nothing."""
        self.python_note.setText(text)
        self.python_note.setVisible(bool(text))
        self.adjustSize()  # a refusal wraps to several lines: the dialog grows to show all of them

    def _browse_python(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Python interpreter", str(Path(sys.executable).parent)
        )
        if path:
            self.python.setEditText(path)

    def chosen_python(self) -> str | None:
        """The interpreter chosen for this run; ``None``: the monitor's own."""
        text = self.python.currentText().strip()
        if not self.python.isEnabled() or text in ("", OWN_PYTHON):
            return None
        return str(Path(text).expanduser())

    @property
    def checking(self) -> bool:
        """A check of the chosen interpreter is under way (OK waits for it)."""
        return self._checking is not None

    def accept(self) -> None:
        """Check the chosen interpreter (and that the agent loads there) before the run starts.

        Off the GUI thread: an agent whose import hangs keeps the check busy for up to its
        timeout, and the window must go on drawing meanwhile. OK is disabled until it answers;
        Cancel still closes the dialog (the answer is then dropped)."""
        python = self.chosen_python()
        agent = self.agent.currentText().strip()
        if python is None:
            self._accepted(agent, None)
            return
        if self._checking is not None:
            return
        self._checking = (python, agent)
        self._ok.setEnabled(False)
        self._note("checking that this Python has steplog and imports the agent…")
        jobs.submit(
            lambda: interpreter.check(python, agent),
            self._checked,
            lambda exc: self._checked(interpreter.Check(False, f"checking {python} failed: {exc}")),
            owner=self,
        )

    def _checked(self, found: interpreter.Check) -> None:
        asked, self._checking = self._checking, None
        self._ok.setEnabled(True)
        if asked is None:  # cancelled meanwhile
            return
        self._note(found.message)
        if not found.ok:
            QMessageBox.warning(self, "This agent cannot run there", found.message)
            return
        self._accepted(asked[1], asked[0])

    def _accepted(self, agent: str, python: str | None) -> None:
        if self._settings is not None and agent not in BUILTIN_AGENTS:
            self._settings.remember_interpreter(interpreter.canonical_agent(agent), python)
        super().accept()

    def reject(self) -> None:
        self._checking = None
        super().reject()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Agent file", "", "Python (*.py)")
        if path:
            self.agent.setEditText(f"{path}:")

    def spec(self, db: LogLocation) -> LaunchSpec:
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
        return LaunchSpec(
            agent=self.agent.currentText().strip(),
            run_id=self.run_id.text().strip(),
            db=parse(db),
            outbox=self.outbox.text().strip() or None,
            pace=self.pace.value(),
            params=params,
            limits=limits,
            python=self.chosen_python(),
        )
