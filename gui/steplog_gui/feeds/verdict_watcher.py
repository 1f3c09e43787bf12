"""Keep ``steplog.verdict`` current for the selected run, off the GUI thread.

DESIGN.md "The verdict": one implementation, three faces. ``steplog verdict``, ``steplog killtest``
and this strip call ``steplog.verdict``; the strip adds only the outbox ledger it polls already
(this run's part of it). Kills come from the log, so a reopened run reads as it did live.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.log.location import LogLocation
from steplog_gui import jobs
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.feeds.outbox_watcher import OutboxWatcher

DEBOUNCE_MS = 150


def _evaluate(db: LogLocation, run_id: str, outbox: str | None, transport: Any) -> Any:
    from steplog.verdict.judge import verdict_of

    return verdict_of(db, run_id, outbox=outbox, transport=transport)


class VerdictWatcher(QObject):
    """Re-judges the selected run when its events or the outbox ledger change (one job at a
    time)."""

    verdict_changed = Signal(object)
    """A ``steplog.verdict.Verdict`` for the selected run, or ``None`` (no run / not readable)."""

    def __init__(
        self, monitor: Monitor, outbox: OutboxWatcher, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._outbox = outbox
        self.run_id: str | None = None
        self.verdict: Any = None
        self._busy = False
        self._again = False
        self._cost = 0.0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._start)
        monitor.runs_changed.connect(lambda ids: self.schedule() if self.run_id in ids else None)
        monitor.state_reset.connect(lambda: self.set_run(None))
        outbox.ledger_changed.connect(lambda _l: self.schedule())

    def set_run(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.verdict = None
        self.verdict_changed.emit(None)
        self.schedule()

    def schedule(self) -> None:
        if self.run_id is None or self._monitor.catching_up:
            return  # a backlog is being read: judged once it is in (the last batch schedules again)
        if self._busy:
            self._again = True
            return
        if not self._timer.isActive():  # a big log costs more to judge: judge it less often
            self._timer.start(int(max(DEBOUNCE_MS, 3000 * self._cost)))

    def _start(self) -> None:
        if self.run_id is None or self._monitor.run(self.run_id) is None:
            return
        if not self._outbox.settled:
            return  # judged once the outbox's first poll is back (its ledger_changed schedules)
        self._busy, self._again = True, False
        run_id, db = self.run_id, self._monitor.path
        # The outbox the panel polls (the window points it at the selected run's outbox), read by
        # verdict_of *after* the log: the panel's last poll may predate posts the log already
        # records as completed, and judging with it flashed "not in the outbox". Without an
        # answering URL verdict_of finds the ledger (the outbox file beside the log) or says why
        # not.
        outbox = self._outbox.url if self._outbox.problem == "" else None
        transport = self._outbox.transport
        t0 = time.monotonic()

        def done(verdict: Any) -> None:
            self._cost = time.monotonic() - t0
            self._finish()
            if run_id == self.run_id:
                self.verdict = verdict
                self.verdict_changed.emit(verdict)

        jobs.submit(
            lambda: _evaluate(db, run_id, outbox, transport),
            done,
            lambda _exc: self._finish(),
            owner=self,
        )

    def _finish(self) -> None:
        self._busy = False
        if self._again:
            self.schedule()
