"""Run control in the monitor: Cancel run, Retry, Fork from this step…, Send signal…, and the
banner of a run that waits for a person (Approve / Reject / Send data…).

The monitor never writes the log: every action is a ``steplog`` command run as a subprocess off
the GUI thread (``steplog cancel``, ``signal``, ``retry --no-start``, ``fork --no-start``); a
retried or forked run is then started like any other run, by the window's engine host, so Kill
now works on it. What the command printed on failure is shown as it is: one plain line.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QStyle,
    QWidget,
)

from steplog.control.procs import child_env, python_argv, without_secrets
from steplog.log.location import LogLocation
from steplog.log.reader import LogRepository
from steplog.log.runstatus import RunStatus
from steplog.log.steps import StepRecord
from steplog_gui import jobs
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import RunState

COMMAND_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CommandResult:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def message(self) -> str:
        """The command's own words (stderr first: that is where refusals go), one line."""
        text = (self.err.strip() or self.out.strip()).splitlines()
        return text[-1].removeprefix("steplog: ") if text else f"exit {self.code}"


def run_command(
    db: LogLocation, args: tuple[str, ...], env: dict[str, str] | None = None
) -> CommandResult:
    """``steplog ARGS --db DB`` to completion (blocking: call it through ``jobs.submit``)."""
    argv, full_env = without_secrets(python_argv("steplog", *args, "--db", str(db)), child_env(env))
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=full_env,
        timeout=COMMAND_TIMEOUT_S,
    )
    return CommandResult(args, done.returncode, done.stdout, done.stderr)


def new_fork_id(parent: str) -> str:
    return f"{parent[:80]}-fork-{time.strftime('%H%M%S')}"


def _fits(edit: QLineEdit, text: str) -> int:
    """A line edit's width for ``text`` whole (its frame and margins included), at most most of
    the screen: a long id (a fork of a fork) is not cut at the dialog's default width."""
    margins = edit.textMargins()
    frame = edit.style().pixelMetric(QStyle.PixelMetric.PM_DefaultFrameWidth, None, edit)
    wanted = (
        edit.fontMetrics().horizontalAdvance(text)
        + margins.left()
        + margins.right()
        + 2 * frame
        + 16
    )
    screen = edit.screen().availableGeometry().width() if edit.screen() is not None else 1600
    return min(wanted, int(screen * 0.8))


class SignalDialog(QDialog):
    """A signal's name and its JSON data, checked before it is sent."""

    def __init__(self, run_id: str, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Send a signal to {run_id}")
        self.name = QLineEdit(name)
        self.data = QPlainTextEdit('{"approved": true}')
        self.data.setFixedHeight(90)
        self.problem = QLabel("")
        self.problem.setTextFormat(Qt.TextFormat.PlainText)
        self.problem.setStyleSheet("color: #d03030")
        form = QFormLayout(self)
        form.addRow("Signal", self.name)
        form.addRow("Data (JSON)", self.data)
        form.addRow(self.problem)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def value(self) -> tuple[str, str]:
        return self.name.text().strip(), self.data.toPlainText().strip() or "null"

    def _accept(self) -> None:
        name, data = self.value()
        try:
            json.loads(data)
        except json.JSONDecodeError as exc:
            self.problem.setText(
                f"the data is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            )
            return
        if not name:
            self.problem.setText("a signal needs a name (the one the run waits for)")
            return
        self.accept()


def _read_step(path: LogLocation, run_id: str, seq: int) -> StepRecord | None:
    repo = LogRepository(path)
    try:
        return repo.step_detail(run_id, seq)
    finally:
        repo.close()


class ForkDialog(QDialog):
    """Fork a run from one of its steps: id, step, params and budgets prefilled from the parent.

    With the step's recorded row (``step``), the dialog also offers to record that step with an
    edited result instead of running it (``steplog fork --set-result``): the result is shown as
    JSON to edit, checked as it is typed, and the fork runs from the step after it."""

    def __init__(
        self,
        run: RunState,
        at_step: int,
        parent: QWidget | None = None,
        *,
        step: StepRecord | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Fork {run.run_id}")
        self.run_id = QLineEdit(new_fork_id(run.run_id))
        self.run_id.setMinimumWidth(_fits(self.run_id, self.run_id.text()))  # the whole id in view
        self.at_step = QSpinBox()
        self.at_step.setRange(1, max(1, run.steps_committed + 1))
        self.at_step.setValue(min(max(1, at_step), run.steps_committed + 1))
        self.at_step.setToolTip(
            "the first step the fork runs itself; the steps before it are copied, not run again"
        )
        self.params: dict[str, QLineEdit] = {}
        form = QFormLayout(self)
        note = QLabel(
            f"Steps before the chosen one are copied from {run.run_id} (their effects are not sent "
            "again); from it on the fork runs with its own idempotency keys. Its workdir starts "
            "as a copy of the parent's."
        )
        note.setWordWrap(True)
        note.setTextFormat(Qt.TextFormat.PlainText)
        form.addRow(note)
        form.addRow("New run id", self.run_id)
        form.addRow("Run it from step", self.at_step)
        for key, value in sorted(run.params.items()):
            edit = QLineEdit(value if isinstance(value, str) else json.dumps(value))
            self.params[key] = edit
            form.addRow(f"param {key}", edit)
        self._original = {k: e.text() for k, e in self.params.items()}
        self.extra = QLineEdit()
        self.extra.setPlaceholderText("KEY=VALUE …  (params the parent left at their defaults)")
        form.addRow("other params", self.extra)
        self.limits: dict[str, QSpinBox] = {}
        for name, option in (
            ("steps", "max-steps"),
            ("tokens", "max-tokens"),
            ("seconds", "max-seconds"),
        ):
            spin = QSpinBox()
            spin.setRange(0, 2_000_000_000)
            spin.setSpecialValueText("as the parent")
            limit = run.limits.get(name)
            spin.setValue(int(limit) if isinstance(limit, (int, float)) else 0)
            self.limits[option] = spin
            form.addRow(f"max {name}", spin)
        self._original_limits = {k: s.value() for k, s in self.limits.items()}
        self._step = step
        self.edit = QCheckBox("Record this step with an edited result instead of running it")
        self.result_edit = QPlainTextEdit()
        self.result_edit.setTabChangesFocus(True)
        self.result_problem = QLabel("")
        self.result_problem.setTextFormat(Qt.TextFormat.PlainText)
        self.result_problem.setStyleSheet("color: #d03030")
        if step is not None:
            self.edit.setToolTip(
                f"step {step.seq} ({step.name}) is recorded in the fork with the result below; "
                "the fork runs from the step after it"
            )
            self.result_edit.setPlainText(_pretty(step.result if step.result else step.decision))
            self.result_edit.setMinimumSize(460, 180)
            form.addRow(self.edit)
            form.addRow(f"result of step {step.seq}", self.result_edit)
            form.addRow(self.result_problem)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok.setText("Fork and run")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)
        self.edit.toggled.connect(self._check)
        self.result_edit.textChanged.connect(self._check)
        self.at_step.valueChanged.connect(self._check)
        self._check()

    def edited(self) -> str | None:
        """The edited result as compact JSON, when the edit is asked for and is JSON."""
        if self._step is None or not self.edit.isChecked():
            return None
        try:
            value = json.loads(self.result_edit.toPlainText())
        except json.JSONDecodeError:
            return None
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    def _check(self) -> None:
        """Enable what applies; say what is wrong with the edit (and refuse OK) as it is typed."""
        on = self._step is not None and self.edit.isChecked()
        self.result_edit.setEnabled(on)
        problem = ""
        if on and self._step is not None:
            if self.at_step.value() != self._step.seq:
                problem = f"an edited result is for step {self._step.seq}: fork from that step"
            else:
                try:
                    json.loads(self.result_edit.toPlainText())
                except json.JSONDecodeError as exc:
                    problem = f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        self.result_problem.setText(problem)
        self.ok.setEnabled(not problem)
        self.ok.setText("Fork with the edit and run" if on else "Fork and run")

    def arguments(self, parent_id: str) -> tuple[str, ...]:
        """``steplog fork`` arguments: only what the person changed overrides the parent."""
        args = [
            "fork",
            parent_id,
            "--at-step",
            str(self.at_step.value()),
            "--run-id",
            self.run_id.text().strip(),
            "--no-start",
        ]
        for key, edit in self.params.items():
            if edit.text() != self._original[key]:
                args += ["--param", f"{key}={edit.text()}"]
        for item in self.extra.text().split():
            args += ["--param", item]
        for option, spin in self.limits.items():
            if spin.value() != self._original_limits[option] and spin.value():
                args += [f"--{option}", str(spin.value())]
        edited = self.edited()
        if edited is not None:
            args += ["--set-result", edited]
        return tuple(args)


def _pretty(text: str | None) -> str:
    """A recorded result (JSON text) indented for a person to edit."""
    if not text:
        return "null"
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


class WaitingBanner(QFrame):
    """Shown while the selected run waits for a signal: what for, since when, and the answers."""

    answered = Signal(str, str, str, str)
    """(run_id, signal name, data JSON, idempotency key)"""
    custom = Signal()
    """Send data… was clicked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("waiting_banner")
        self.setStyleSheet(
            "#waiting_banner { background: #006f7a; border-radius: 4px }"
            " #waiting_banner QLabel { color: white; font-weight: bold }"
        )
        self.text = QLabel("")
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.approve = QPushButton("Approve")
        self.reject = QPushButton("Reject")
        self.send = QPushButton("Send data…")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.addWidget(self.text, 1)
        for b in (self.approve, self.reject, self.send):
            row.addWidget(b)
        self._run: RunState | None = None
        self.approve.clicked.connect(lambda: self._answer(True))
        self.reject.clicked.connect(lambda: self._answer(False))
        self.send.clicked.connect(self.custom)
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._update_text)
        self.hide()

    def show_run(self, run: RunState | None) -> None:
        waiting = (
            run is not None and run.status == RunStatus.WAITING and run.waiting_for is not None
        )
        self._run = run if waiting else None
        self.setVisible(waiting)
        if waiting:
            self._update_text()
            self._tick.start()
        else:
            self._tick.stop()

    def _update_text(self) -> None:
        run = self._run
        if run is None:
            return
        since = run.waiting_since or time.time()
        minutes, seconds = divmod(int(time.time() - since), 60)
        engine = "" if not run.engine_gone() else "  (no engine: Resume run after answering)"
        self.text.setText(
            f"{run.run_id} waits for “{run.waiting_for}” since "
            f"{time.strftime('%H:%M:%S', time.localtime(since))} ({minutes} min {seconds:02d} "
            f"s){engine}"
        )

    def _answer(self, approved: bool) -> None:
        run = self._run
        if run is None or run.waiting_for is None:
            return
        # One key per wait: a double click, or Approve then Reject, is one answer.
        key = f"monitor:{run.run_id}:{run.waiting_for}:{run.waiting_since}"
        self.answered.emit(run.run_id, run.waiting_for, json.dumps({"approved": approved}), key)


class BlockedBanner(QFrame):
    """Shown while the selected run is blocked: code that cannot replay its recorded steps was
    refused (docs/versions.md). The refusal's own line, and the way on: a fork that copies the
    steps before the divergence and runs the rest on the current code."""

    fork_at = Signal(int)
    """Fork from this step (the first the fork runs itself) was asked for."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("blocked_banner")
        self.setStyleSheet(
            "#blocked_banner { background: #8a5a00; border-radius: 4px }"
            " #blocked_banner QLabel { color: white; font-weight: bold }"
        )
        self.text = QLabel("")
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setWordWrap(True)
        self.fork = QPushButton("Fork")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.addWidget(self.text, 1)
        row.addWidget(self.fork)
        self._at = 1
        self.fork.clicked.connect(lambda: self.fork_at.emit(self._at))
        self.hide()

    def show_run(self, run: RunState | None) -> None:
        blocked = run.blocked if run is not None and not run.terminal else None
        self.setVisible(blocked is not None)
        if blocked is None:
            return
        line, at = blocked
        self._at = at
        self.text.setText(line)
        self.fork.setText(
            f"Fork from step {at - 1} on the current code"
            if at > 1
            else "Start anew on the current code"
        )


class RunControl(QObject):
    """The Run menu's control actions for the selected run, and what they launch."""

    notice = Signal(str)
    """One line for the status bar."""
    problem = Signal(str)
    """One line for the problem banner (a refused command, in its own words)."""
    launch = Signal(str, str)
    """(run_id, agent): start an engine on this run (after retry or fork), then show it."""

    def __init__(
        self,
        monitor: Monitor,
        window: QWidget,
        *,
        env: dict[str, str] | None = None,
        engine_busy: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(window)
        self._monitor = monitor
        self._window = window
        self._env = env
        self._engine_busy = engine_busy
        self._run_id: str | None = None
        self._step: int | None = None
        self.act_cancel = self._action(
            "&Cancel run…", self.cancel, "end the run as cancelled: it never runs again"
        )
        self.act_retry = self._action(
            "Re&try failed run", self.retry, "run a failed run again from its failed step"
        )
        self.act_fork = self._action(
            "&Fork from this step…",
            self.fork,
            "a new run: the steps before the selected one copied, the rest run anew",
        )
        self.act_signal = self._action(
            "Send &signal…", self.send_signal, "deliver a named signal to the run"
        )
        self.banner = WaitingBanner()
        self.banner.answered.connect(
            lambda rid, name, data, key: self._signal(rid, name, data, key)
        )
        self.banner.custom.connect(self.send_signal)
        self.blocked_banner = BlockedBanner()
        self.blocked_banner.fork_at.connect(self.fork_at)
        self.update()

    def _action(self, text: str, slot: Callable[[], None], tip: str) -> QAction:
        action = QAction(text, self)
        action.setToolTip(tip)
        action.setStatusTip(tip)
        action.triggered.connect(slot)
        return action

    @property
    def actions(self) -> tuple[QAction, ...]:
        return (self.act_cancel, self.act_retry, self.act_fork, self.act_signal)

    def set_run(self, run_id: str | None) -> None:
        if run_id != self._run_id:
            self._step = None
        self._run_id = run_id
        self.update()

    def set_step(self, run_id: str, seq: int) -> None:
        if run_id == self._run_id:
            self._step = seq

    def run(self) -> RunState | None:
        return self._monitor.run(self._run_id) if self._run_id else None

    def update(self) -> None:
        run = self.run()
        active = run is not None and not run.terminal
        self.act_cancel.setEnabled(active)
        self.act_signal.setEnabled(active)
        self.act_retry.setEnabled(run is not None and run.status == RunStatus.FAILED)
        self.act_fork.setEnabled(
            run is not None and run.steps_committed + 1 >= 1 and run.agent != "?"
        )
        self.banner.show_run(run)
        self.blocked_banner.show_run(run)

    # -- the actions ------------------------------------------------------------------------

    def cancel(self) -> None:
        run = self.run()
        if run is None:
            return
        answer = QMessageBox.question(
            self._window,
            "Cancel run",
            f"Cancel {run.run_id}? It ends as cancelled and never runs again; a running "
            "engine stops at its next step boundary.",
        )
        if answer == QMessageBox.StandardButton.Yes:
            self._command(
                ("cancel", run.run_id, "--reason", "cancelled from the monitor", "--wait", "0"),
                lambda r: self.notice.emit(r.message),
            )

    def send_signal(self) -> None:
        run = self.run()
        if run is None:
            return
        dialog = SignalDialog(run.run_id, run.waiting_for or "approve", self._window)
        if dialog.exec():
            name, data = dialog.value()
            self._signal(run.run_id, name, data, None)

    def _signal(self, run_id: str, name: str, data: str, key: str | None) -> None:
        args = ("signal", run_id, name, "--data", data, *(("--key", key) if key else ()))
        self._command(args, lambda r: self.notice.emit(r.out.strip() or r.message))

    def retry(self, *, force: bool = False) -> None:
        run = self.run()
        if run is None or self._engine_busy():
            return

        def refused(r: CommandResult) -> bool:
            if r.code == 2 and "--force" in r.err and not force:
                answer = QMessageBox.warning(
                    self._window,
                    "Retry anyway?",
                    f"{r.message}\n\nRetry anyway (--force)?",
                    QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                )
                if answer == QMessageBox.StandardButton.Yes:
                    self.retry(force=True)
                return True
            return False

        self._command(
            ("retry", run.run_id, "--no-start", *(("--force",) if force else ())),
            lambda _r: self.launch.emit(run.run_id, run.agent),
            refused=refused,
        )

    def fork(self) -> None:
        """Fork from the selected step: its recorded row is read first (off the GUI thread), so
        the dialog can offer to edit its result."""
        run = self.run()
        if run is None:
            return
        self.fork_at(self._step or run.steps_committed + 1)

    def fork_at(self, at: int) -> None:
        """The fork dialog for a fork that runs from step ``at`` (the blocked banner's way on:
        the step where the code and the log differ)."""
        run = self.run()
        if run is None or self._engine_busy():
            return
        path = self._monitor.path
        jobs.submit(
            lambda: _read_step(path, run.run_id, at),
            lambda step: self._fork_dialog(run, at, step),
            lambda _exc: self._fork_dialog(run, at, None),
            owner=self,
        )

    def _fork_dialog(self, run: RunState, at: int, step: StepRecord | None) -> None:
        dialog = ForkDialog(run, at, self._window, step=step)
        self.fork_dialog = dialog
        if not dialog.exec():
            return
        args = dialog.arguments(run.run_id)
        new_id = args[args.index("--run-id") + 1]
        self._command(args, lambda _r: self.launch.emit(new_id, run.agent))

    # -- plumbing ---------------------------------------------------------------------------

    def _command(
        self,
        args: tuple[str, ...],
        on_ok: Callable[[CommandResult], None],
        *,
        refused: Callable[[CommandResult], bool] | None = None,
    ) -> None:
        path = self._monitor.path
        self.notice.emit(f"steplog {' '.join(args[:2])}…")

        def done(r: CommandResult) -> None:
            if r.code == 0:
                self.problem.emit("")
                on_ok(r)
            elif refused is None or not refused(r):
                self.problem.emit(f"steplog {args[0]} {args[1]}: {r.message}")

        jobs.submit(
            lambda: run_command(path, args, self._env),
            done,
            lambda exc: self.problem.emit(f"steplog {args[0]} did not run: {exc}"),
            owner=self,
        )


__all__ = [
    "BlockedBanner",
    "CommandResult",
    "ForkDialog",
    "RunControl",
    "SignalDialog",
    "WaitingBanner",
    "run_command",
]
