"""What the monitor knows of each run, folded from the event stream; Qt-free.

``LogState.apply(events)`` consumes events in id order (the tailer's since-bookmark batches) and
keeps, per run: the run's summary (agent, status, limits, latest usage), one record per *step
execution* in growable numpy columns (the timeline's bars), the usage series (the budget charts)
and the kills (lease takeovers from a dead holder) with their resume latency.

Who died is not decided here: every event goes through ``steplog.verdict.kills.Deaths``, the
rule ``steplog verdict`` reads the log with (a takeover from a holder that never let go, dated by
the killer's ``killed_at`` or the dead engine's last event), so the timeline, the strip and the
verdict show the same kills, live and reopened. Whether an engine is alive is the lease's
question (``steplog.log.lease``), asked with what the events say of the holder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from steplog.log.events import EventKind
from steplog.log.lease import holder_seen, me
from steplog.log.logread import Event
from steplog.log.reader import USAGE_KEYS
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL
from steplog.verdict.kills import Death, Deaths
from steplog_gui.model.step_names import StepNames

ALIVE_CHECK_S = 0.5
"""How long an answer to "is the engine's process alive" is kept (see ``RunState.engine_gone``)."""
# Outcome of one step execution (a bar's colour).
RUNNING, COMMITTED, REDONE, FAILED, GAVE_UP, COPIED, INTERRUPTED = range(7)
OUTCOME_NAMES = (
    "in progress",
    "committed",
    "redone (interrupted by a kill)",
    "failed",
    "gave up",
    "copied from the parent run (not run again)",
    "interrupted by a stop (run again on resume: not redone work)",
)
# Phase reached by one execution (engine's step.phase).
PHASES = ("started", "decided", "acting", "recorded")
EXECUTION_FIELDS = {
    "start": "f8",
    "end": "f8",
    "lane": "i4",
    "outcome": "i1",
    "seq": "i8",
    "phase": "i1",
    "tokens": "i8",
    "estimated": "?",
}
"""One row per step execution: the timeline's bars."""
USAGE_FIELDS = {"ts": "f8", **{key: "f8" for key in USAGE_KEYS}}
"""One row per usage report: the budget charts' points."""


class Columns:
    """Parallel growable numpy columns (amortised O(1) append, views without copying).

    One structured array underneath: an append is one row assignment, not one numpy call per
    column (measured 2.2x faster; opening a 100k-step run appends 200k rows)."""

    def __init__(self, **dtypes: str) -> None:
        self._cap = 256
        self._n = 0
        self._names = tuple(dtypes)
        self._rows: npt.NDArray[Any] = np.zeros(self._cap, dtype=np.dtype(list(dtypes.items())))

    @classmethod
    def of(cls, rows: npt.NDArray[Any]) -> Columns:
        """Columns holding ``rows`` (a structured array, e.g. from a bulk load), growable from
        there."""
        return cls.adopt(rows, len(rows))  # no copy: it grows by an eighth when it must

    @classmethod
    def adopt(cls, buffer: npt.NDArray[Any], n: int) -> Columns:
        """Columns over ``buffer`` (a structured array, its first ``n`` rows filled, the rest
        room to grow), without a copy: a 1M-step run's bars are 40 MB."""
        self = cls.__new__(cls)
        self._names = tuple(buffer.dtype.names or ())
        self._n, self._cap, self._rows = n, len(buffer), buffer
        return self

    def __len__(self) -> int:
        return self._n

    def append(self, **values: Any) -> int:
        """Append one row; columns not given are 0."""
        if self._n == self._cap:
            # Double while small; a big history (a bulk-loaded 1M-step run) grows by an eighth,
            # not by another copy of itself.
            self._cap = max(
                256, self._cap * 2 if self._cap < 1 << 16 else self._cap + self._cap // 8
            )
            grown = np.zeros(self._cap, dtype=self._rows.dtype)
            grown[: self._n] = self._rows[: self._n]
            self._rows = grown
        i = self._n
        self._rows[i] = tuple(values.get(name, 0) for name in self._names)
        self._n += 1
        return i

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        """A view of the filled part of column ``name`` (writable; do not keep across appends)."""
        return self._rows[name][: self._n]


@dataclass
class Kill:
    """One engine process that died holding the lease, and how fast the next one got going."""

    killed_incarnation: int
    ts: float
    """When it died: the killer's clock when known, else the dead engine's last event."""
    exact: bool
    resumed_at: float
    """The next incarnation's lease_acquired."""
    first_commit: float | None = None
    """The first step a later incarnation committed."""
    waiting_again: float | None = None
    """A later incarnation's first ``waiting``: the wait the kill cut short, taken up again."""

    @classmethod
    def of(cls, death: Death) -> Kill:
        """The kill of an engine whose death ``steplog.verdict.kills`` read from the log."""
        return cls(death.incarnation, death.at, death.exact, death.taken_over_at)

    @property
    def back_at(self) -> float | None:
        """When the relaunched engine was back at work: its first step committed, or its wait
        taken up again if that came first (from then on only a person's answer is awaited,
        and minutes of it are no resume latency)."""
        times = [t for t in (self.first_commit, self.waiting_again) if t is not None]
        return min(times) if times else None

    @property
    def back_waiting(self) -> bool:
        """The engine was back at work waiting (``back_at`` is a ``waiting``, not a commit)."""
        return self.waiting_again is not None and self.back_at == self.waiting_again

    @property
    def latency(self) -> float | None:
        """The resume latency: the kill → ``back_at``."""
        back = self.back_at
        return None if back is None else back - self.ts


@dataclass
class RunState:
    run_id: str
    agent: str = "?"
    params: dict[str, Any] = field(default_factory=dict)
    model: str = "offline"
    limits: dict[str, float | None] = field(default_factory=dict)
    status: str = RunStatus.RUNNING
    reason: str | None = None
    created: float = math.nan
    finished: float | None = None
    last_ts: float = math.nan
    usage: dict[str, float] = field(default_factory=dict)
    incarnation: int = 0
    pid: int | None = None
    """The engine holding the run (``None`` once it released the lease or finished)."""
    host: str | None = None
    forked_from: tuple[str, int] | None = None
    """(parent run id, first step the fork ran itself)."""
    blocked: tuple[str, int] | None = None
    """(the refusal's line, the first divergent step) while code that cannot replay the run's
    recorded steps was the last to try (``resume_refused``); cleared when an engine takes the run
    again or it ends (docs/versions.md)."""
    waiting_for: str | None = None
    waiting_since: float | None = None
    """When the wait began: the log's ``since`` (or the first ``waiting`` of that wait), not
    when an engine relaunched after a kill took it up again."""
    _wait_seq: int | None = None
    wakes: dict[int, float] = field(default_factory=dict)
    """Sleep step -> its wake-up time (``run.sleep``; the log's ``sleep_until``)."""
    cancel_requested: str | None = None
    worker: tuple[str, int] | None = None
    """(host, pid) of the ``steplog worker`` that has the run, or last had it."""
    worker_active: bool = False
    """Whether that worker still has it (claimed, not yet handed back)."""
    _copied_shift: float = 0.0
    """Copied steps are drawn just before the fork's start, keeping their own spacing."""
    kills: list[Kill] = field(default_factory=list)
    step_names: StepNames = field(default_factory=StepNames)
    """seq -> (name, kind)"""
    executions: Columns = field(default_factory=lambda: Columns(**EXECUTION_FIELDS))
    usage_series: Columns = field(default_factory=lambda: Columns(**USAGE_FIELDS))
    _open: dict[int, int] = field(default_factory=dict)  # seq -> execution index still running
    _frontier: int = 0  # the highest step committed (or copied) so far
    _unseen: dict[int, list[tuple[int, float, float]]] = field(default_factory=dict)
    """Step -> engines killed with no step open, that may have been inside it with its start
    unwritten (a deferred start): (engine, its last event, the kill). Drawn as redone bars when
    a later engine runs that step with a deferred start, as ``kills.account`` counts them."""
    _deaths: Deaths = field(default_factory=Deaths)
    """Who held the lease, who let go cleanly, each engine's last event (the verdict's rule)."""
    _alive: tuple[int | None, float, bool] = field(
        default=(None, 0.0, False), compare=False, repr=False
    )
    changes: int = field(default=0, compare=False, repr=False)
    """Events folded in so far: views keep what they computed from the executions until it
    moves (``timeline_data``)."""

    # -- derived ----------------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def waiting_step(self) -> int | None:
        """The step the run waits in, while it waits."""
        return self._wait_seq if self.status == RunStatus.WAITING else None

    @property
    def sleeping_until(self) -> float | None:
        """When the run wakes, while it sleeps (``run.sleep``); ``None`` otherwise."""
        if self.status != RunStatus.WAITING or self._wait_seq is None:
            return None
        return self.wakes.get(self._wait_seq)

    @property
    def steps_committed(self) -> int:
        return int(self.usage.get("steps", 0))

    @property
    def step_executions(self) -> int:
        return int(self.usage.get("executions", 0))

    @property
    def in_progress(self) -> int:
        return len(self._open)

    @property
    def redone(self) -> int:
        """Step executions a kill cut short: the timeline's redone bars (see ``_new_incarnation``
        for how they relate to the verdict's count). Retries after an error and steps put down
        by a stop are not redone work."""
        return int(np.count_nonzero(self.executions["outcome"] == REDONE))

    @property
    def engine_elsewhere(self) -> str | None:
        """The other machine whose engine (or worker, before its engine starts) works on this run,
        or ``None`` when the run is worked here, or nowhere. A kill from here cannot reach it: a
        process group is a process on this host (a log on a server is shared by a fleet)."""
        if self.terminal:
            return None
        host = (
            self.host
            if self.pid is not None
            else (self.worker[0] if self.worker_active and self.worker is not None else None)
        )
        return host if host and host != me().host else None

    def engine_gone(self) -> bool:
        """No engine works on this run now: it released the lease, or its holder is "gone" as
        ``steplog.log.lease.holder_seen`` (the answer ``steplog status`` gives) sees the pid
        and host the events name: a process on this host that is dead, killed from outside and
        not relaunched. A holder on another host counts as alive (only its lease speaks for it).

        The process check reads /proc: the runs list asks several times per row per repaint, so
        the answer is kept for ``ALIVE_CHECK_S`` per pid."""
        if self.terminal or self.pid is None:
            return True
        now = time.monotonic()
        pid, checked, alive = self._alive
        if pid != self.pid or now - checked > ALIVE_CHECK_S:
            alive = holder_seen(self.pid, self.host) != "gone"
            self._alive = (self.pid, now, alive)
        return not alive

    def open_until(self, now: float) -> float:
        """Where bars of steps in progress end: now while an engine works, else its last event."""
        return self.last_ts if self.engine_gone() else now

    def duration(self, now: float) -> float:
        end = (
            self.finished
            if self.finished is not None
            else (now if not self.terminal else self.last_ts)
        )
        return max(0.0, end - self.created) if not math.isnan(self.created) else 0.0

    def execution_at(self, x: float, lane: int, now: float) -> int | None:
        """The execution under time ``x`` in ``lane``, or ``None``."""
        ex = self.executions
        if not len(ex):
            return None
        end = np.where(np.isnan(ex["end"]), now, ex["end"])
        hit = np.nonzero((ex["lane"] == lane) & (ex["start"] <= x) & (end >= x))[0]
        return int(hit[-1]) if len(hit) else None

    # -- folding ----------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        self.changes += 1
        d = ev.data
        self.last_ts = ev.ts
        death = self._deaths.see(ev)
        kind = ev.kind
        if "usage" in d and isinstance(d["usage"], dict):
            self.usage = d["usage"]
            u = self.usage
            if (
                kind != EventKind.STEP_STARTED
            ):  # a start repeats the last commit's usage: no new chart point
                self.usage_series.append(ts=ev.ts, **{key: u.get(key, 0) for key in USAGE_KEYS})
        if kind == EventKind.RUN_CREATED:
            self.agent = str(d.get("agent", "?"))
            self.params = dict(d.get("params") or {})
            self.model = str(d.get("model") or "offline")
            self.limits = dict(d.get("budget") or {})
            self.created = ev.ts
            if d.get("queued"):
                self.status = (
                    RunStatus.QUEUED
                )  # submitted, or forked with --no-start: a worker starts it
            parent = d.get("forked_from")
            if isinstance(parent, dict):
                self.forked_from = (str(parent.get("run_id")), int(parent.get("at_step") or 0))
            span = d.get("copied_span")
            if isinstance(span, list) and len(span) == 2 and isinstance(span[1], (int, float)):
                self._copied_shift = ev.ts - float(span[1])
        elif kind == EventKind.BUDGET_CHANGED:
            self.limits.update(
                {
                    k: d.get(k)
                    for k in ("steps", "tokens", "seconds", "cost_usd", "retries", "recoveries")
                }
            )
            if d.get("reopened"):
                self.status, self.reason, self.finished = RunStatus.RUNNING, None, None
        elif kind == EventKind.LEASE_ACQUIRED:
            self._new_incarnation(ev, death)
            self.blocked = None
        elif kind == EventKind.RESUME_REFUSED:
            self.blocked = (str(d.get("reason", "")), int(d.get("at_step") or 1))
        elif kind == EventKind.STEP_STARTED and ev.seq is not None:
            self._start(ev)
        elif kind == EventKind.DECISION_RECORDED and ev.seq in self._open:
            i = self._open[ev.seq]
            ex = self.executions
            ex["phase"][i] = 1
            ex["tokens"][i] = int(d.get("tokens_in", 0)) + int(d.get("tokens_out", 0))
            ex["estimated"][i] = bool(d.get("estimated"))
        elif (
            kind in (EventKind.EFFECT_STARTED, EventKind.EFFECT_COMPLETED) and ev.seq in self._open
        ):
            self.executions["phase"][self._open[ev.seq]] = 2
        elif kind == EventKind.STEP_COPIED and ev.seq is not None:
            self._frontier = max(self._frontier, ev.seq)
            self.step_names[ev.seq] = (str(d.get("name", "")), str(d.get("kind", "")))
            start, end = self.copied_span(ev)
            self.executions.append(
                start=start, end=end, lane=0, outcome=COPIED, seq=ev.seq, phase=3
            )
        elif kind == EventKind.WAITING:
            said, since = d.get("signal"), d.get("since")
            signal = str(said) if said is not None else None
            if isinstance(d.get("sleep_until"), (int, float)) and ev.seq is not None:
                self.wakes[ev.seq] = float(d["sleep_until"])
            again = (
                self.status == RunStatus.WAITING
                and self.waiting_for == signal
                and self._wait_seq == ev.seq
            )
            if isinstance(since, (int, float)):
                self.waiting_since = float(since)
            elif not again or self.waiting_since is None:  # a log from before ``since``
                self.waiting_since = ev.ts
            self.status, self.waiting_for, self._wait_seq = RunStatus.WAITING, signal, ev.seq
            for k in self.kills:
                if k.waiting_again is None and k.killed_incarnation < ev.incarnation:
                    k.waiting_again = ev.ts
        elif kind == EventKind.CANCEL_REQUESTED:
            self.cancel_requested = str(d.get("reason") or "cancel requested")
        elif kind == EventKind.RETRIED:
            self.status, self.reason, self.finished = (
                RunStatus.QUEUED if d.get("queued") else RunStatus.RUNNING,
                None,
                None,
            )
        elif kind in (EventKind.WORKER_CLAIMED, EventKind.WORKER_RELEASED):
            w = d.get("worker")
            if isinstance(w, dict):
                self.worker = (str(w.get("host")), int(w.get("pid") or 0))
            self.worker_active = kind == EventKind.WORKER_CLAIMED
        elif kind == EventKind.STEP_COMMITTED and ev.seq is not None:
            if "started" in d:  # the step's start too (a deferred start)
                self._start(ev)
            self._frontier = max(self._frontier, ev.seq)
            if self.status == RunStatus.WAITING:
                self.status, self.waiting_for, self.waiting_since = RunStatus.RUNNING, None, None
            self._close(ev.seq, ev.ts, COMMITTED, phase=3)
            for k in self.kills:
                if k.first_commit is None and k.killed_incarnation < ev.incarnation:
                    k.first_commit = ev.ts
        elif kind == EventKind.STEP_ATTEMPT_FAILED and ev.seq is not None:
            self._close(ev.seq, ev.ts, FAILED)
        elif kind == EventKind.RUN_FINISHED:
            self.blocked = None
            self.status = str(d.get("status", RunStatus.FAILED))
            self.reason = d.get("reason")
            self.finished = ev.ts
            self.waiting_for = self.waiting_since = None
            outcome = GAVE_UP if self.status in (RunStatus.GAVE_UP, RunStatus.CANCELLED) else FAILED
            if self._open:
                for seq in list(self._open):
                    self._close(seq, ev.ts, outcome)
            elif (
                self.status == RunStatus.GAVE_UP
            ):  # stopped before starting the next step: a short marker bar
                self.executions.append(
                    start=ev.ts,
                    end=ev.ts + 0.05,
                    lane=ev.incarnation,
                    outcome=GAVE_UP,
                    seq=-1,
                    phase=0,
                )
                self.step_names[-1] = (f"gave up: {self.reason or ''}", "budget")
            self.pid = None
        elif kind == EventKind.LEASE_RELEASED:
            self.pid = None

    def _start(self, ev: Event) -> None:
        """A step attempt begins: at ``started`` when its start was deferred, else at the event."""
        d, seq = ev.data, ev.seq
        assert seq is not None
        self.step_names[seq] = (str(d.get("name", "")), str(d.get("kind", "")))
        began = d.get("started")
        for dead, last, killed in self._unseen.pop(seq, []):
            if began is not None and dead != ev.incarnation:  # the kill cut it short, unwritten
                self.executions.append(
                    start=last, end=killed, lane=dead, outcome=REDONE, seq=seq, phase=0
                )
        self._open[seq] = self.executions.append(
            start=float(began) if isinstance(began, (int, float)) else ev.ts,
            end=math.nan,
            lane=ev.incarnation,
            outcome=RUNNING,
            seq=seq,
            phase=0,
        )

    def copied_span(self, ev: Event) -> tuple[float, float]:
        """Where a fork's copied step is drawn: its own times in the parent, shifted to end at
        the fork's start (so a parent of last week does not stretch the axis)."""
        d = ev.data
        start, end = d.get("started_at"), d.get("finished_at")
        s = float(start) + self._copied_shift if isinstance(start, (int, float)) else ev.ts
        e = float(end) + self._copied_shift if isinstance(end, (int, float)) else s
        return s, e

    def _close(self, seq: int, ts: float, outcome: int, phase: int | None = None) -> None:
        i = self._open.pop(seq, None)
        if i is None:
            return
        ex = self.executions
        ex["end"][i] = ts
        ex["outcome"][i] = outcome
        if phase is not None:
            ex["phase"][i] = phase

    def _new_incarnation(self, ev: Event, death: Death | None) -> None:
        """An engine took the run; ``death``: the one before died holding it (``Deaths``).

        The previous engine's open steps end here and will run again: cut short by its death
        (redone bars, ending at the kill) or put down by a clean stop (interrupted bars: not
        redone work). A different question from the verdict's "redone", which counts re-runs
        *caused* by a kill (``kills.Account``) and is known only when a step starts again: a
        bar is coloured at the takeover, when the death is known and the re-run is not yet.
        Each redone bar is the attempt that the account charges to this death once its step
        runs again (``Account.redone_after``)."""
        d = ev.data
        dead_end = self._deaths.last_ts.get(self.incarnation, ev.ts)
        if death is not None:
            self.kills.append(Kill.of(death))
            if not self._open:  # inside a step whose start it never wrote, or just before it
                unseen = self._unseen.setdefault(self._frontier + 1, [])
                unseen.append((death.incarnation, dead_end, death.at))
            dead_end = death.at  # the interrupted step ran until the kill
        outcome = INTERRUPTED if death is None else REDONE
        for seq, i in list(self._open.items()):
            ex = self.executions
            ex["end"][i] = dead_end
            ex["outcome"][i] = outcome
            del self._open[seq]
        self.incarnation = ev.incarnation
        if self.status == RunStatus.QUEUED:
            self.status = RunStatus.RUNNING
        self.pid = d.get("pid")
        self.host = d.get("host")


class LogState:
    """Every run in one log, folded from its events; ``bookmark`` is the last event id applied."""

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self.bookmark = 0
        self.removed: list[str] = []
        """Runs the last ``apply`` dropped because ``steplog prune`` removed them from the log."""

    def apply(self, events: Iterable[Event]) -> set[str]:
        """Fold a batch (ids ascending, all above the bookmark); returns the run ids it touched."""
        touched: set[str] = set()
        self.removed = []
        for ev in events:
            if ev.id <= self.bookmark:
                continue
            if ev.kind == EventKind.RUNS_PRUNED:  # belongs to no run: it names the runs now gone
                gone = [r for r in ev.data.get("runs", []) if self.runs.pop(r, None) is not None]
                self.removed.extend(gone)
                touched.difference_update(gone)
                self.bookmark = ev.id
                continue
            run = self.runs.get(ev.run_id)
            if run is None:
                run = self.runs[ev.run_id] = RunState(ev.run_id)
            run.apply(ev)
            self.bookmark = ev.id
            touched.add(ev.run_id)
        return touched
