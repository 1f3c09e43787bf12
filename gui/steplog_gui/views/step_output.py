"""The output pane: what the selected step (else the step writing now) streamed, as it comes.

Each attempt under a line saying what became of it; an attempt cut short by a kill stays visible,
dimmed and struck through, above the attempt that was redone. Model output is inserted as plain
text (``QTextCursor.insertText``): markup in it is shown, never interpreted.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QTextEdit, QVBoxLayout, QWidget

from steplog.log.reader import LogRepository
from steplog_gui import jobs, theme
from steplog_gui.model.run_state import COPIED
from steplog_gui.model.step_output import (
    CUT,
    LIVE,
    AttemptText,
    Writing,
    attempts_of,
    merge_progress,
)

POLL_MS = 100
"""How often the pane reads the step's entries while a run is shown (off the GUI thread)."""


def _read(
    path: Any, run_id: str, seq: int | None, after: int
) -> tuple[int | None, list[AttemptText], int, list[Any]]:
    """The shown step's attempts, and when the run's newer entries came (for the timeline)."""
    repo = LogRepository(path)
    try:
        shown, entries = repo.step_stream(run_id, seq)
        last, progress = repo.stream_progress(run_id, after)
    finally:
        repo.close()
    return shown, attempts_of(entries), last, progress


class StepOutputFeed(QObject):
    """Reads the shown step's entries every ``POLL_MS`` while a run is selected, one read at a
    time; says so only when something changed."""

    changed = Signal(object, object)
    """(the step shown or ``None``, its ``AttemptText`` list)."""
    writing_changed = Signal(str, object)
    """(run id, ``step_output.Writing``): when its step attempts' entries came, for the
    timeline's bars of model calls in progress (a copy: the receiver may keep it)."""

    def __init__(
        self, path_of: Any, is_over: Any = lambda _run: False, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._path_of = path_of
        self._is_over = is_over  # run id -> has it ended (the monitor's fold knows)
        self._run: str | None = None
        self._seq: int | None = None
        self._busy = False
        self._last: tuple[Any, ...] | None = None
        self._final: tuple[str | None, int | None] | None = None
        self._writing: Writing = {}
        self._after = -1
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    def show(self, run_id: str | None, seq: int | None = None) -> None:
        """Follow ``run_id``'s step ``seq`` (``None``: whichever step writes)."""
        if run_id != self._run:
            self._writing, self._after = {}, -1
        self._run, self._seq, self._last, self._final = run_id, seq, None, None
        if run_id is None:
            self._timer.stop()
            self.changed.emit(None, [])
            return
        self._timer.start()
        self._poll()

    def _poll(self) -> None:
        if self._busy or self._run is None:
            return
        if self._final == (self._run, self._seq):
            return  # read once after its run had ended: nothing more will be written
        self._busy = True
        wanted = (self._run, self._seq)
        over = self._is_over(self._run)  # judged before the read: that read is then the last
        path = self._path_of()
        after = self._after

        def done(found: tuple[int | None, list[AttemptText], int, list[Any]]) -> None:
            self._busy = False
            shown, attempts, last, progress = found
            if wanted[0] == self._run and after == self._after:
                self._after = last
                if merge_progress(self._writing, progress):
                    self.writing_changed.emit(wanted[0], dict(self._writing))
            if wanted != (self._run, self._seq):
                return
            if over:
                self._final = wanted
            key = (shown, tuple(attempts))
            if key != self._last:
                self._last = key
                self.changed.emit(shown, attempts)

        def failed(_exc: BaseException) -> None:
            self._busy = False  # a log being replaced or a lost server: the next poll tries

        jobs.submit(lambda: _read(path, *wanted, after), done, failed, owner=self)


class StepOutputView(QWidget):
    def __init__(self, feed: StepOutputFeed, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.header = QLabel("Output: the steps' streamed text appears here as it is written.")
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.header.setWordWrap(True)
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        self.text.setAcceptRichText(False)
        self.text.setPlaceholderText("nothing streamed yet")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(self.text, 1)
        self.attempts: list[AttemptText] = []
        feed.changed.connect(self.show_attempts)

    def show_attempts(self, seq: int | None, attempts: list[AttemptText]) -> None:
        bar = self.text.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        if seq is None:
            self.header.setText("Output: nothing streamed in this run yet.")
        else:
            live = any(a.state == LIVE for a in attempts)
            self.header.setText(f"Output of step {seq}" + (" (writing now)" if live else ""))
        grew = (
            len(attempts) == len(self.attempts)
            and attempts[:-1] == self.attempts[:-1]
            and attempts
            and attempts[-1].state == self.attempts[-1].state
            and attempts[-1].text.startswith(self.attempts[-1].text)
        )
        cursor = QTextCursor(self.text.document())
        if grew:  # the usual case: the last attempt wrote more; append, nothing redrawn
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(attempts[-1].text[len(self.attempts[-1].text) :], self._body(LIVE))
        else:
            self.text.clear()
            cursor = QTextCursor(self.text.document())
            for i, a in enumerate(attempts):
                head = QTextCharFormat()
                head.setFontWeight(QFont.Weight.Bold)
                if a.state == CUT:
                    head.setForeground(theme.qcolor(theme.current().kill))
                cursor.insertText(("\n\n" if i else "") + a.headline() + "\n", head)
                cursor.insertText(a.text, self._body(a.state))
        self.attempts = list(attempts)
        if at_end:
            bar.setValue(bar.maximum())

    def _body(self, state: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        if state == CUT:
            fmt.setForeground(theme.qcolor(theme.current().outcome[COPIED]))
            fmt.setFontStrikeOut(True)
        return fmt
