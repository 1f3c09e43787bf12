"""Keep ``steplog.verdict`` current for the selected run, off the GUI thread.

DESIGN.md "The verdict": one implementation, two faces. ``steplog killtest`` and this strip call
the same ``steplog.verdict.collect`` + ``judge``; the monitor adds only what it alone knows: the
exact time of each kill it made (others are dated by the dead engine's last event) and the
outbox ledger it polls.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from . import jobs
from .monitor import Monitor
from .outbox_watcher import OutboxWatcher

DEBOUNCE_MS = 150


def _evaluate(db: Path, run_id: str, ledger: Any, kill_times: list[float]) -> Any:
    from steplog.verdict import collect, judge

    return judge(collect(db, run_id, ledger=ledger, kill_times=kill_times))


class VerdictWatcher(QObject):
    """Re-judges the selected run when its events or the outbox ledger change (one job at a time)."""

    verdict_changed = Signal(object)
    """A ``steplog.verdict.Verdict`` for the selected run, or ``None`` (no run / not readable)."""

    def __init__(self, monitor: Monitor, outbox: OutboxWatcher, parent: QObject | None = None) -> None:
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

    def kill_times(self) -> list[float]:
        run = self._monitor.run(self.run_id) if self.run_id else None
        if run is None:
            return []
        exact = list(run._kill_hints)  # the kills this monitor made, to the millisecond
        estimated = [k.ts for k in run.kills if not k.exact]  # takeovers of engines killed elsewhere
        return sorted(exact + estimated)

    def in_progress(self) -> int:
        run = self._monitor.run(self.run_id) if self.run_id else None
        return run.in_progress if run is not None else 0

    def schedule(self) -> None:
        if self.run_id is None:
            return
        if self._busy:
            self._again = True
            return
        if not self._timer.isActive():  # a big log costs more to judge: judge it less often
            self._timer.start(int(max(DEBOUNCE_MS, 3000 * self._cost)))

    def _start(self) -> None:
        if self.run_id is None or self._monitor.run(self.run_id) is None:
            return
        self._busy, self._again = True, False
        run_id, db, ledger, kills = self.run_id, self._monitor.path, self._outbox.ledger, self.kill_times()
        t0 = time.monotonic()

        def done(verdict: Any) -> None:
            self._cost = time.monotonic() - t0
            self._finish()
            if run_id == self.run_id:
                self.verdict = verdict
                self.verdict_changed.emit(verdict)

        jobs.submit(lambda: _evaluate(db, run_id, ledger, kills), done, lambda _exc: self._finish(), owner=self)

    def _finish(self) -> None:
        self._busy = False
        if self._again:
            self.schedule()
