"""The runs list as a Qt item model over ``Monitor`` (newest first)."""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, QTimer

from steplog.log.runstatus import RunStatus
from steplog_gui import theme
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import RunState
from steplog_gui.views.table_model import Index, TableModel

COLUMNS = ("Run", "Status", "Steps", "Agent", "Budget use", "Started", "Duration", "Host")
"""The columns a person needs first come first: a narrow Runs dock still shows run, status, steps.
Host is the machine that works (or last worked) the run: a log on a server serves a fleet."""
RUN, STATUS, STEPS, AGENT, BUDGET, STARTED, DURATION, HOST = range(len(COLUMNS))
RUN_ID_ROLE = Qt.ItemDataRole.UserRole + 1


def budget_use(run: RunState) -> tuple[float, str]:
    """The most used budget as (fraction, text), e.g. (0.43, "43% tokens")."""
    best, label = -1.0, ""
    for name, used_key in (
        ("steps", "steps"),
        ("tokens", "tokens"),
        ("seconds", "seconds"),
        ("cost_usd", "cost_usd"),
    ):
        limit = run.limits.get(name)
        if not limit:
            continue
        frac = float(run.usage.get(used_key, 0)) / float(limit)
        if frac > best:
            best, label = frac, f"{frac:.0%} {name.replace('_usd', '')}"
    return (best, label) if best >= 0 else (math.nan, "no limits")


def family(run: RunState) -> str:
    """Where a fork comes from, for the run's tooltip ("" for a run that is not a fork)."""
    if run.forked_from is None:
        return ""
    parent, step = run.forked_from
    return (
        f"\nforked from {parent} at step {step}: steps 1–{step - 1} copied from it, not run again"
    )


def status_text(run: RunState) -> tuple[str, str | None]:
    """The status as shown, and why: a "running" run whose engine is gone reads "stopped"."""
    if run.status == RunStatus.WAITING:
        since = (
            time.strftime("%H:%M:%S", time.localtime(run.waiting_since))
            if run.waiting_since
            else "?"
        )
        engine = (
            "its engine waits with it"
            if not run.engine_gone()
            else "no engine: a signal, then Resume run"
        )
        if run.sleeping_until is not None:
            wakes = time.strftime("%H:%M:%S", time.localtime(run.sleeping_until))
            return RunStatus.WAITING, f"asleep since {since}, wakes at {wakes}"
        if run.waiting_for is None:
            return RunStatus.WAITING, f"waiting for a message since {since}"
        return (
            RunStatus.WAITING,
            f"waiting for the signal {run.waiting_for!r} since {since}; {engine}",
        )
    if run.status == RunStatus.QUEUED:
        if run.worker_active and run.worker is not None:
            return (
                RunStatus.QUEUED,
                f"claimed by worker pid {run.worker[1]} on {run.worker[0]}; its engine starts next",
            )
        return RunStatus.QUEUED, "waits for a worker (steplog worker) to start it, or Resume run"
    if run.status != RunStatus.RUNNING:
        return run.status.replace("_", " "), run.reason
    if run.cancel_requested:
        return (
            "cancelling",
            f"cancel requested ({run.cancel_requested});"
            " the engine stops at its next step boundary",
        )
    if run.pid is None:
        return "stopped", "no engine holds it (stopped or released); Resume run continues it"
    if run.engine_gone():
        return (
            "stopped",
            f"its engine (pid {run.pid}) is gone; Resume run continues it from its last checkpoint",
        )
    by = (
        f", started by worker pid {run.worker[1]} on {run.worker[0]}"
        if run.worker_active and run.worker
        else ""
    )
    return RunStatus.RUNNING, f"engine pid {run.pid} on {run.host}{by}"


def host_text(run: RunState) -> tuple[str, str]:
    """(host, tooltip): the worker's machine if a ``steplog worker`` ran it, else its engine's."""
    if run.worker is not None:
        host, pid = run.worker
        return host, f"worker pid {pid} on {host}" + ("" if run.worker_active else " (last had it)")
    if run.host:
        return run.host, f"engine on {run.host}" + (
            f", pid {run.pid}" if run.pid is not None else " (last)"
        )
    return "", ""


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class RunsModel(TableModel):
    """One row per run in the log; status is coloured text; refreshes live."""

    def __init__(self, monitor: Monitor, parent: Any = None) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._ids: list[str] = list(reversed(monitor.order))
        self._row: dict[str, int] = {}
        self._reindex()
        monitor.runs_added.connect(self._on_added)
        monitor.runs_changed.connect(self._on_changed)
        monitor.state_reset.connect(self._on_reset)
        monitor.runs_removed.connect(self._on_removed)
        self._clock = QTimer(self)  # durations of running runs tick
        self._clock.setInterval(1000)
        self._clock.timeout.connect(self._tick)
        self._clock.start()

    def _reindex(self) -> None:
        self._row = {rid: i for i, rid in enumerate(self._ids)}

    # -- model API --------------------------------------------------------------------------

    headers = COLUMNS

    def row_count(self) -> int:
        return len(self._ids)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = self.row_at(index)
        if row is None:
            return None
        run = self._monitor.run(self._ids[row])
        if run is None:
            return None
        col = index.column()
        if role == RUN_ID_ROLE:
            return run.run_id
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(run, col)
        if role == Qt.ItemDataRole.ForegroundRole and col == STATUS:
            shown = status_text(run)[0].replace(" ", "_")
            return theme.qcolor(theme.current().status.get(shown, theme.current().foreground))
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == STATUS:
                return status_text(run)[1]
            if col == AGENT:
                return run.agent
            if col == RUN:
                return run.run_id + family(run)
            if col == HOST:
                return host_text(run)[1]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (STEPS, BUDGET, DURATION):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _display(self, run: RunState, col: int) -> str:
        if col == RUN:
            return f"↳ {run.run_id}" if run.forked_from else run.run_id
        if col == AGENT:
            return run.agent.rsplit("/", 1)[-1]
        if col == STATUS:
            return status_text(run)[0]
        if col == STEPS:
            limit = run.limits.get("steps")
            return f"{run.steps_committed}" + (f" / {limit}" if limit else "")
        if col == BUDGET:
            return budget_use(run)[1]
        if col == HOST:
            return host_text(run)[0]
        if col == STARTED:
            return (
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created))
                if not math.isnan(run.created)
                else ""
            )
        return fmt_duration(run.duration(time.time()))

    def run_id(self, row: int) -> str:
        return self._ids[row]

    def row_of(self, run_id: str) -> int:
        return self._row.get(run_id, -1)

    # -- updates ----------------------------------------------------------------------------

    def _on_added(self, run_ids: list[str]) -> None:
        fresh = [r for r in run_ids if r not in self._row]
        if not fresh:
            return
        self.beginInsertRows(QModelIndex(), 0, len(fresh) - 1)
        self._ids[0:0] = list(reversed(fresh))
        self._reindex()
        self.endInsertRows()

    def _on_removed(self, run_ids: list[str]) -> None:
        for row in sorted((self._row[r] for r in run_ids if r in self._row), reverse=True):
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._ids[row]
            self._reindex()
            self.endRemoveRows()

    def _on_changed(self, run_ids: set[str]) -> None:
        rows = [self._row[r] for r in run_ids if r in self._row]
        if rows:
            self.dataChanged.emit(self.index(min(rows), 0), self.index(max(rows), len(COLUMNS) - 1))

    def _on_reset(self) -> None:
        self.beginResetModel()
        self._ids = list(reversed(self._monitor.order))
        self._reindex()
        self.endResetModel()

    def _tick(self) -> None:
        running = [
            i for i, rid in enumerate(self._ids) if (r := self._monitor.run(rid)) and not r.terminal
        ]
        if running:
            self.dataChanged.emit(
                self.index(min(running), STATUS), self.index(max(running), DURATION)
            )
