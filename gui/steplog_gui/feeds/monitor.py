"""The monitor's shared state: a ``LogState`` fed by the ``Tailer``, with Qt signals for the views.

Views and item models receive a ``Monitor`` in their constructors and subscribe to it; none of
them reads the log themselves.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Signal

from steplog.log.location import LogLocation, parse
from steplog.log.logread import Event
from steplog_gui.feeds.tailer import Tailer
from steplog_gui.model.bulk_load import RunDetails, add_details
from steplog_gui.model.run_state import LogState, RunState

CATCH_UP_REDRAW_S = 1.0
"""While a backlog is read, a view redraws about this often: each batch would cost seconds."""


class Monitor(QObject):
    """The runs of one log, kept current by a tailer."""

    runs_added = Signal(list)
    """Run ids seen for the first time, oldest first."""
    runs_changed = Signal(set)
    """Run ids whose state changed in the last batch of events."""
    events_applied = Signal(list)
    """The batch of ``Event`` just folded (for controllers that react to kinds, e.g.
    kill-at-window)."""
    runs_removed = Signal(list)
    """Run ids ``steplog prune`` removed from the log (``steplog import`` may bring them
    back)."""
    state_reset = Signal()
    """Everything was dropped (the log file was replaced or another one opened)."""
    problem_changed = Signal(str)
    """Why the log cannot be read ('' when it can)."""

    def __init__(
        self, path: LogLocation, parent: QObject | None = None, *, use_watchdog: bool = True
    ) -> None:
        super().__init__(parent)
        self.path: LogLocation = parse(path)
        self.state = LogState()
        self.order: list[str] = []
        self.problem = ""
        self.catching_up = False
        """A backlog is being read (opening a big log): views redraw about once a second, then
        once at the end, instead of after every batch."""
        self.history_upto = 0
        """The event id the log's history was bulk-loaded up to when opened (0: none yet)."""
        self._use_watchdog = use_watchdog
        self._tailer: Tailer | None = None

    def start(self) -> None:
        self._tailer = Tailer(self.path, self, use_watchdog=self._use_watchdog)
        self._tailer.events_arrived.connect(self.apply)
        self._tailer.log_reset.connect(self._reset)
        self._tailer.history_started.connect(self._history_started)
        self._tailer.runs_loaded.connect(self.adopt)
        self._tailer.details_loaded.connect(self.adopt_details)
        self._tailer.run_loaded.connect(self.adopt_late)
        self._tailer.problem_changed.connect(self._problem)
        self._tailer.start()

    def stop(self) -> None:
        if self._tailer is not None:
            self._tailer.stop()
            self._tailer.deleteLater()
            self._tailer = None

    def switch_to(self, path: LogLocation) -> None:
        """Monitor another log (a file or a database URL)."""
        self.stop()
        self.path = parse(path)
        self._reset()
        self._problem("")
        self.start()

    def run(self, run_id: str) -> RunState | None:
        return self.state.runs.get(run_id)

    def may_redraw(self, last_redraw: float) -> bool:
        """Whether a view last redrawn at ``last_redraw`` (``time.monotonic()``) may redraw now:
        at once, but while a backlog is read (``catching_up``) once a ``CATCH_UP_REDRAW_S``, and
        once more at its end."""
        return not self.catching_up or time.monotonic() - last_redraw >= CATCH_UP_REDRAW_S

    def apply(self, events: list[Event], more: bool = False) -> None:
        self.catching_up = more
        known = set(self.state.runs)
        touched = self.state.apply(events)
        if (
            self.state.removed
        ):  # before the additions: a pruned run may be imported back in the same batch
            gone = set(self.state.removed)
            self.order = [r for r in self.order if r not in gone]
            known -= gone
            self.runs_removed.emit(list(self.state.removed))
        new = [
            rid
            for rid in dict.fromkeys(e.run_id for e in events)
            if rid not in known and rid in touched
        ]
        if new:
            self.order.extend(new)
            self.runs_added.emit(new)
        if touched:
            self.runs_changed.emit(touched)
        self.events_applied.emit(events)

    def _history_started(self) -> None:
        if self.state.runs:
            self._reset()
        self.catching_up = True

    def adopt(self, runs: list[RunState], upto: int) -> None:
        """Runs bulk-loaded from the history up to event ``upto`` (``bulk_load.load_run``)."""
        self.catching_up = True
        new = [r.run_id for r in runs if r.run_id not in self.state.runs]
        for run in runs:
            self.state.runs[run.run_id] = run
        self.state.bookmark = max(self.state.bookmark, upto)
        self.history_upto = upto
        if new:
            self.order.extend(new)
            self.runs_added.emit(new)
        if runs:
            self.runs_changed.emit({r.run_id for r in runs})

    def adopt_details(self, details: list[RunDetails], more: bool) -> None:
        """The second pass of a bulk load; ``more`` False: the history is in (every view
        redraws)."""
        self.catching_up = more
        touched = set()
        for d in details:
            run = self.state.runs.get(d.run_id)
            if run is not None:
                add_details(run, d)
                touched.add(d.run_id)
        if not more:
            touched = set(self.state.runs)
        if touched:
            self.runs_changed.emit(touched)

    def want(self, run_id: str) -> None:
        """Have run ``run_id``'s state (an old run a person selected): at once if it is held,
        else loaded off the GUI thread (``runs_added`` and ``runs_changed`` then say so)."""
        if run_id not in self.state.runs and self._tailer is not None:
            self._tailer.want(run_id)

    def adopt_late(self, run: RunState, details: RunDetails) -> None:
        """One run older than the history kept, loaded when it was wanted or changed."""
        if run.run_id in self.state.runs:
            return
        add_details(run, details)
        self.state.runs[run.run_id] = run
        self.order.append(run.run_id)
        self.runs_added.emit([run.run_id])
        self.runs_changed.emit({run.run_id})

    def _reset(self) -> None:
        self.state = LogState()
        self.order = []
        self.history_upto = 0
        self.catching_up = False  # a load cut short by the reset does not leave the views throttled
        self.state_reset.emit()

    def _problem(self, text: str) -> None:
        self.problem = text
        self.problem_changed.emit(text)
