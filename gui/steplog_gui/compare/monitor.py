"""A ``Monitor`` over compare mode's two runs, so the ordinary views can draw them.

It holds two ``RunState``s built by ``compare_state.compare`` (the naive one from its log events
and its trace, the durable one from its log events, both on one clock) and emits the usual
``runs_changed``: a ``TimelineView``, a ``VerdictWatcher`` or the compare charts take it like
any monitor. It reads no log of its own accord: the window's monitor says when either run has new
events, and a timer watches the naive run's trace file grow. Each rebuild runs off the GUI thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.agents.trace import TRACE_FILE, read_trace
from steplog.log.location import LogLocation
from steplog.log.logread import Event
from steplog.log.reader import LogNotReady, LogRepository
from steplog_gui import jobs
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.compare_state import ComparedRuns, compare

POLL_MS = 200
"""How often the trace file's size is looked at (a ``stat``), and the longest a change waits."""


def _events(repo: LogRepository, run_id: str) -> list[Event]:
    out: list[Event] = []
    while True:
        batch = repo.events_since(out[-1].id if out else 0, run_id=run_id)
        out.extend(batch)
        if len(batch) < 5000:
            return out


def _read(
    path: LogLocation, naive_id: str, durable_id: str, trace: Path | None
) -> tuple[ComparedRuns, Path | None]:
    repo = LogRepository(path)
    try:
        naive_events, durable_events = _events(repo, naive_id), _events(repo, durable_id)
        if trace is None:
            row = repo.run_row(naive_id)
            trace = Path(row["workdir"]) / TRACE_FILE if row and row.get("workdir") else None
    finally:
        repo.close()
    records = read_trace(trace) if trace is not None else []
    return compare(naive_id, naive_events, records, durable_id, durable_events), trace


class CompareMonitor(Monitor):
    """The naive and the durable run of one comparison, kept current."""

    compared = Signal(object)
    """The latest ``ComparedRuns`` (figures read it: the naive trace's sums come with it)."""

    def __init__(self, source: Monitor, parent: QObject | None = None) -> None:
        super().__init__(source.path, parent)
        self._source = source
        self.naive_id: str | None = None
        self.durable_id: str | None = None
        self.result: ComparedRuns | None = None
        self._trace: Path | None = None
        self._trace_size = -1
        self._changed = False
        self._busy = False
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._tick)
        # Bound methods, not lambdas: Qt drops these connections when this monitor goes (with its
        # window) while the source lives on.
        source.runs_changed.connect(self._on_source_changed)
        source.state_reset.connect(self._on_source_reset)

    def start(self) -> None:
        """Nothing to tail: the source monitor and the trace file drive this one."""

    def stop(self) -> None:
        self._timer.stop()

    def set_runs(self, naive_id: str | None, durable_id: str | None) -> None:
        self.naive_id, self.durable_id = naive_id, durable_id
        self.path = self._source.path
        self._trace, self._trace_size, self.result = None, -1, None
        self._reset()
        if naive_id and durable_id:
            self._changed = True
            self._timer.start()
            self._tick()
        else:
            self._timer.stop()

    def _on_source_reset(self) -> None:
        self.set_runs(None, None)  # another log was opened: this comparison is not in it

    def _on_source_changed(self, run_ids: set[str]) -> None:
        if self.naive_id in run_ids or self.durable_id in run_ids:
            self._changed = True
            if not self._busy:
                self._tick()

    def _tick(self) -> None:
        if self._busy or not self.naive_id or not self.durable_id:
            return
        size = self._trace_size
        if self._trace is not None:
            try:
                size = self._trace.stat().st_size
            except OSError:
                size = -1
        if not self._changed and size == self._trace_size:
            return
        self._changed, self._trace_size, self._busy = False, size, True
        path, naive_id, durable_id, trace = self.path, self.naive_id, self.durable_id, self._trace
        jobs.submit(
            lambda: _read(path, naive_id, durable_id, trace),
            lambda out: self._done(naive_id, durable_id, out),
            self._failed,
            owner=self,
        )

    def _failed(self, exc: BaseException) -> None:
        self._busy = False
        self._changed = True  # try again at the next tick
        if isinstance(exc, LogNotReady) or not self.path.exists():
            return  # the engines are creating the log right now
        self._problem(f"compare mode cannot read the runs: {exc}")

    def _done(self, naive_id: str, durable_id: str, out: Any) -> None:
        self._busy = False
        result, trace = out
        if (naive_id, durable_id) != (self.naive_id, self.durable_id):
            return  # a new comparison started meanwhile
        self._trace = self._trace or trace
        if self.problem:
            self._problem("")
        self.result = result
        known = set(self.state.runs)
        self.state.runs = {naive_id: result.naive, durable_id: result.durable}
        new = [rid for rid in (naive_id, durable_id) if rid not in known]
        if new:
            self.order.extend(new)
            self.runs_added.emit(new)
        self.runs_changed.emit({naive_id, durable_id})
        self.compared.emit(result)
