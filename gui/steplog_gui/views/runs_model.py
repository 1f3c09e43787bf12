"""The runs list as a Qt item model: the rows of a ``RunsList`` (newest first, a page at a time,
one ``RunQuery``), each drawn from the ``Monitor``'s state of that run when it has one (live),
else from what the log's read API said of it."""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, QTimer

from steplog.log.find import RunQuery
from steplog.log.runstatus import RunStatus
from steplog_gui import theme
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.model.run_state import RunState
from steplog_gui.model.runs_list import LogRunsSource, RunsList, RunsSource, summary_state
from steplog_gui.views.table_model import Index, TableModel

COLUMNS = (
    "Run",
    "Status",
    "Steps",
    "Agent",
    "Budget use",
    "Started",
    "Duration",
    "Host",
    "Tokens",
    "Cost",
    "Tags",
)
"""The columns a person needs first come first: a narrow Runs dock still shows run, status, steps.
Host is the machine that works (or last worked) the run: a log on a server serves a fleet."""
RUN, STATUS, STEPS, AGENT, BUDGET, STARTED, DURATION, HOST, TOKENS, COST, TAGS = range(len(COLUMNS))
SORT_ROLE = Qt.ItemDataRole.UserRole + 2
"""A cell's value for sorting (numbers as numbers)."""
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
    """One row per run the query selects, read a page at a time (``fetchMore`` as the view
    scrolls); refreshes live: a run new to the log is admitted at its place, a changed one
    redrawn, a pruned one dropped."""

    def __init__(
        self, monitor: Monitor, parent: Any = None, *, source: RunsSource | None = None
    ) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self._list = RunsList(source or LogRunsSource(monitor.path))
        self._own_source = source is None
        self._summaries: dict[str, RunState] = {}
        self._sort: tuple[int, Qt.SortOrder] | None = None
        self._list.reload()
        monitor.runs_added.connect(self._on_added)
        monitor.runs_changed.connect(self._on_changed)
        monitor.state_reset.connect(self._on_reset)
        monitor.runs_removed.connect(self._on_removed)
        self._clock = QTimer(self)  # durations of running runs tick
        self._clock.setInterval(1000)
        self._clock.timeout.connect(self._tick)
        self._clock.start()

    # -- the query -------------------------------------------------------------------------------

    @property
    def query(self) -> RunQuery:
        return self._list.query

    @property
    def problem(self) -> str:
        """Why the runs could not be read ('' when they could)."""
        return self._list.problem

    def set_query(self, query: RunQuery) -> None:
        """Show the runs ``query`` selects (its first page)."""
        self.beginResetModel()
        self._summaries.clear()
        self._list.reload(query)
        self._sort_ids()
        self.endResetModel()

    # -- model API --------------------------------------------------------------------------

    headers = COLUMNS

    def row_count(self) -> int:
        return len(self._list)

    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008, N802 (Qt's name)
        return not parent.isValid() and self._list.more

    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008, N802 (Qt's name)
        if parent.isValid() or not self._list.more:
            return
        try:
            page = self._list.read_more()
        except Exception:  # noqa: BLE001 (the log went away: nothing more to show now)
            return
        fresh = [r for r in page.runs if r["run_id"] not in self._list.runs]
        first = len(self._list)
        if fresh:
            self.beginInsertRows(QModelIndex(), first, first + len(fresh) - 1)
        self._list.take(page)
        if fresh:
            self.endInsertRows()
            self._resort()  # a sorted list: the page's runs go to their places

    def run(self, row: int) -> RunState | None:
        """What is drawn in ``row``: the monitor's live state of the run, else the log's."""
        rid = self._list.ids[row]
        live = self._monitor.run(rid)
        if live is not None:
            return live
        summary = self._summaries.get(rid)
        if summary is None:
            summary = self._summaries[rid] = summary_state(self._list.runs[rid])
        return summary

    def tags(self, row: int) -> dict[str, str]:
        return dict(self._list.runs[self._list.ids[row]].get("tags") or {})

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = self.row_at(index)
        if row is None:
            return None
        run = self.run(row)
        if run is None:
            return None
        col = index.column()
        if role == RUN_ID_ROLE:
            return run.run_id
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(run, row, col)
        if role == SORT_ROLE:
            return self._sort_value(run, row, col)
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
            if col == TAGS:
                return "\n".join(f"{k} = {v}" for k, v in self.tags(row).items()) or None
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (
            STEPS,
            BUDGET,
            DURATION,
            TOKENS,
            COST,
        ):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _display(self, run: RunState, row: int, col: int) -> str:
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
        if col == TOKENS:
            return f"{int(run.usage.get('tokens', 0)):,}"
        if col == COST:
            return f"${run.usage.get('cost_usd', 0.0):.4f}"
        if col == TAGS:
            return " ".join(f"{k}={v}" for k, v in self.tags(row).items())
        return fmt_duration(run.duration(time.time()))

    def _sort_value(self, run: RunState, row: int, col: int) -> Any:
        if col == STARTED:
            return (run.created, run.run_id)
        if col == DURATION:
            return run.duration(time.time())
        if col == STEPS:
            return run.steps_committed
        if col == TOKENS:
            return run.usage.get("tokens", 0.0)
        if col == COST:
            return run.usage.get("cost_usd", 0.0)
        if col == BUDGET:
            frac = budget_use(run)[0]
            return -1.0 if math.isnan(frac) else frac
        return self._display(run, row, col).lower()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Order the runs read so far by ``column`` (the view's header); -1: newest first, as
        read. Pages read later go to their places."""
        self.layoutAboutToBeChanged.emit()
        self._sort = None if column < 0 else (column, order)
        self._sort_ids()
        self.layoutChanged.emit()

    def _resort(self) -> None:
        if self._sort is not None:
            self.layoutAboutToBeChanged.emit()
            self._sort_ids()
            self.layoutChanged.emit()

    def _sort_ids(self) -> None:
        if self._sort is None:
            from steplog_gui.model.runs_list import key_of

            self._list.ids.sort(key=lambda r: key_of(self._list.runs[r]), reverse=True)
            return
        column, order = self._sort
        index = {rid: i for i, rid in enumerate(self._list.ids)}
        values = {
            rid: self._sort_value(
                self.run(index[rid]) or summary_state(self._list.runs[rid]), index[rid], column
            )
            for rid in self._list.ids
        }
        self._list.ids.sort(key=lambda r: values[r], reverse=order == Qt.SortOrder.DescendingOrder)

    def run_id(self, row: int) -> str:
        return self._list.ids[row]

    def row_of(self, run_id: str) -> int:
        return self._list.row_of(run_id)

    # -- updates ----------------------------------------------------------------------------

    def _on_added(self, run_ids: list[str]) -> None:
        """Runs new to the monitor: those the query selects take their rows now (before the
        window's own handler selects one of them). A bulk load of an old log hands over its runs
        oldest first, thousands at a time: the ones older than every run read are not even
        asked for (they come with their pages)."""
        if self._list.problem:
            self.set_query(self._list.query)
            return
        bottom = self._list.oldest_read() if self._list.more else None
        wanted = []
        for rid in run_ids:
            if rid in self._list.runs:
                continue
            live = self._monitor.run(rid)
            if bottom is not None and live is not None and live.created < bottom:
                continue
            wanted.append(rid)
        if not wanted:
            return
        try:
            runs = self._list.admissible(wanted)
        except Exception:  # noqa: BLE001 (the log is away: the next change tries again)
            return
        for run in runs:
            row = self._list.place(run)
            self.beginInsertRows(QModelIndex(), row, row)
            self._list.insert(run)
            self.endInsertRows()
        self._resort()

    def _on_removed(self, run_ids: list[str]) -> None:
        for rid in run_ids:
            self._summaries.pop(rid, None)
        for row in self._list.rows_of(run_ids):  # descending
            self.beginRemoveRows(QModelIndex(), row, row)
            self._list.remove([self._list.ids[row]])
            self.endRemoveRows()

    def _on_changed(self, run_ids: set[str]) -> None:
        rows = [self._list.row_of(r) for r in run_ids if r in self._list.runs]
        for r in run_ids:
            self._summaries.pop(r, None)
        if rows:
            self.dataChanged.emit(self.index(min(rows), 0), self.index(max(rows), len(COLUMNS) - 1))

    def _on_reset(self) -> None:
        if self._own_source:
            self._list.source.close()
            self._list.source = LogRunsSource(self._monitor.path)
        self.set_query(self._list.query)

    def _tick(self) -> None:
        running = [
            i for i in range(len(self._list)) if (r := self.run(i)) is not None and not r.terminal
        ]
        if running:
            self.dataChanged.emit(
                self.index(min(running), STATUS), self.index(max(running), DURATION)
            )
