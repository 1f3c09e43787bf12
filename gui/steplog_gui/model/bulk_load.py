"""Open a run's history in one columnar pass instead of folding its events one by one; Qt-free.

``LogState.apply`` folds events as they come (live tailing: a few per commit). Opening a
100,000-step run that way parses 200k JSON payloads and runs 200k Python method calls: ~5.9 s
here. ``load_run`` builds the same ``RunState`` from the run's events as numpy columns (id, ts,
incarnation, kind coded in SQL, seq: no payload read), reading payloads only for the few events
that need them (run created, budgets, leases, finish, decisions), and computes every step
execution's end, outcome and phase with array operations. Who died is read from those few
events by ``steplog.verdict.kills.Deaths``, as the fold does, told each dead engine's last event
from the columns. ``load_details`` adds what only the detail views need (step names, the budget
charts' series) as a second pass.

The result must be exactly what folding the same events gives, so that live tailing continues
from it with ``RunState.apply``: ``tests/gui/test_bulk_load.py`` holds the two to each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from steplog.log.events import EventKind
from steplog.log.logread import Event
from steplog.log.reader import KIND_CODES, NULL_SEQ, LogRepository, NameColumns
from steplog.log.runstatus import RunStatus
from steplog_gui.model.run_state import (
    COMMITTED,
    COPIED,
    EXECUTION_FIELDS,
    FAILED,
    GAVE_UP,
    INTERRUPTED,
    REDONE,
    RUNNING,
    Columns,
    Kill,
    RunState,
)
from steplog_gui.model.step_names import StepNames

Positions = npt.NDArray[np.int64]
"""Positions in a run's event columns."""


def _code(kind: EventKind) -> int:
    return KIND_CODES.index(kind) + 1


STARTED, COMMIT, DECIDED = (
    _code(EventKind.STEP_STARTED),
    _code(EventKind.STEP_COMMITTED),
    _code(EventKind.DECISION_RECORDED),
)
EFFECT_STARTED, EFFECT_DONE = _code(EventKind.EFFECT_STARTED), _code(EventKind.EFFECT_COMPLETED)
ATTEMPT_FAILED, LEASE, FINISHED = (
    _code(EventKind.STEP_ATTEMPT_FAILED),
    _code(EventKind.LEASE_ACQUIRED),
    _code(EventKind.RUN_FINISHED),
)
FOLDED = (
    EventKind.WAITING,
    EventKind.CANCEL_REQUESTED,
    EventKind.RETRIED,
    EventKind.WORKER_CLAIMED,
    EventKind.WORKER_RELEASED,
    EventKind.RESUME_REFUSED,
)
"""Run control's, the queue's and a refused resume's kinds: folded by ``RunState.apply`` itself
(few per run; it owns their meaning)."""
COPIED_STEP = _code(EventKind.STEP_COPIED)
CONTROL = tuple(
    _code(k)
    for k in (
        EventKind.RUN_CREATED,
        EventKind.BUDGET_CHANGED,
        EventKind.LEASE_ACQUIRED,
        EventKind.LEASE_RELEASED,
        EventKind.RUN_FINISHED,
        *FOLDED,
        EventKind.STEP_COPIED,
    )
)
"""Kinds whose payload the summary needs: few per run (a fork's copied steps aside), read and
folded one by one."""
STEP_KINDS = (STARTED, COMMIT, DECIDED, EFFECT_STARTED, EFFECT_DONE, ATTEMPT_FAILED)


@dataclass(frozen=True)
class RunDetails:
    """The second pass for one run: what the step detail, hover and charts need."""

    run_id: str
    step_names: NameColumns
    usage_series: npt.NDArray[Any]


def load_run(repo: LogRepository, run_id: str, upto: int) -> RunState:
    """The run as ``LogState.apply`` would leave it after its events up to id ``upto``, minus
    the details (step names, usage series: ``load_details``)."""
    cols = _with_deferred_starts(repo.event_columns(run_id, upto))
    run = RunState(run_id)
    if not len(cols["id"]):
        return run
    code, seq, ts = cols["code"], cols["seq"], cols["ts"]
    inc = cols["incarnation"]
    n = len(cols["id"])
    last_before = _LastOfIncarnation(inc)
    controls = repo.events_by_id(cols["id"][np.isin(code, CONTROL)])
    lease_end: dict[
        int, float
    ] = {}  # position of a lease_acquired -> where the steps it interrupts end
    finishes: dict[int, Event] = {}  # position of a run_finished -> the event
    kill_at: list[tuple[int, Kill]] = []
    dead_last: dict[int, float] = {}  # position of a kill's takeover -> the dead's last event
    copied: list[tuple[int, Event]] = []  # a fork's copied steps: bars of their own (lane 0)
    waited_at = -1
    positions = np.searchsorted(cols["id"], [ev.id for ev in controls])
    for p, ev in zip(positions.tolist(), controls, strict=True):
        d = ev.data
        if ev.kind in (EventKind.RUN_CREATED, *FOLDED):
            run.apply(ev)  # the run's identity, a fork's parent, waiting, a cancel asked, a retry
            if ev.kind == EventKind.WAITING:
                waited_at = p
        elif ev.kind == EventKind.STEP_COPIED:
            copied.append((p, ev))
        elif ev.kind == EventKind.BUDGET_CHANGED:
            run.limits.update(
                {
                    k: d.get(k)
                    for k in ("steps", "tokens", "seconds", "cost_usd", "retries", "recoveries")
                }
            )
            if d.get("reopened"):
                run.status, run.reason, run.finished = RunStatus.RUNNING, None, None
        elif ev.kind == EventKind.LEASE_ACQUIRED:
            previous = run.incarnation
            dead_end = last_before(previous, p, ts, default=ev.ts)
            run._deaths.heard(previous, dead_end)
            death = run._deaths.see(ev)
            if death is not None:
                kill = Kill.of(death)
                run.kills.append(kill)
                kill_at.append((p, kill))
                dead_last[p] = dead_end
                dead_end = death.at
            lease_end[p] = dead_end
            run.incarnation = ev.incarnation
            run.blocked = None
            if run.status == RunStatus.QUEUED:
                run.status = RunStatus.RUNNING
            run.pid = d.get("pid")
            run.host = d.get("host")
        elif ev.kind == EventKind.RUN_FINISHED:
            run._deaths.see(ev)
            run.status = str(d.get("status", RunStatus.FAILED))
            run.reason = d.get("reason")
            run.finished = ev.ts
            run.blocked = None
            run.pid = None
            run.waiting_for = run.waiting_since = None
            finishes[p] = ev
        elif ev.kind == EventKind.LEASE_RELEASED:
            run._deaths.see(ev)
            run.pid = None
    run.last_ts = float(ts[-1])
    run._deaths.last_ts = last_before.final(ts)
    usage = repo.last_usage(run_id, upto)
    if usage is not None:
        run.usage = usage

    has_seq = seq != NULL_SEQ
    commits = np.flatnonzero((code == COMMIT) & has_seq)
    if (
        run.status == RunStatus.WAITING and len(commits) and commits[-1] > waited_at
    ):  # the wait was answered
        run.status, run.waiting_for, run.waiting_since = RunStatus.RUNNING, None, None
    for p, kill in kill_at:  # the first step a later incarnation committed after the takeover
        j = int(np.searchsorted(commits, p, side="right"))
        while j < len(commits) and inc[commits[j]] <= kill.killed_incarnation:
            j += 1
        if j < len(commits):
            kill.first_commit = float(ts[commits[j]])

    decisions = np.flatnonzero((code == DECIDED) & has_seq)
    tokens = repo.decision_tokens(cols["id"][decisions])
    _executions(run, cols, n, lease_end, finishes, decisions, tokens, copied, kill_at, dead_last)
    return run


EventCols = dict[str, npt.NDArray[Any]]
"""A run's event columns by ``EVENT_ARRAY`` field name, each one contiguous array (operations on
the fields of a structured array stride over whole rows: several times slower at 1M events)."""


def _with_deferred_starts(rows: EventCols) -> EventCols:
    """A commit that is its step's start too (``started`` set: a deferred start) as the two
    events the fold makes of it: a start at ``started``, then the commit. Each start is put
    just before its commit by computing every row's new position (no ``np.insert`` of a
    structured array: that doubled a 1M-event run's load time on its own).

    Most such commits are the only event of their step (a plain step, first time through): an
    execution whole, committed, that nothing else can touch. Those are left as they are and
    marked ``simple`` (``_executions`` makes their bars directly): the step-by-step matching
    that the others need cost a 1M-step run 200 MB and a second."""
    code, started, seq = rows["code"], rows["started"], rows["seq"]
    deferred = ~np.isnan(started) & (code == COMMIT)
    simple = deferred & _only_event_of_its_step(code, seq)
    both = np.flatnonzero(deferred & ~simple)
    if not len(both):
        return {**rows, "simple": simple}
    n, k = len(code), len(both)
    moved = np.zeros(n, dtype=np.int64)
    moved[both] = 1
    position = np.arange(n) + np.cumsum(moved)  # each row after the starts put before it
    at = both + np.arange(k)  # where each start goes: just before its commit
    cols = {}
    for name, col in rows.items():
        out = np.empty(n + k, dtype=col.dtype)
        out[position] = col
        out[at] = col[both]
        cols[name] = out
    cols["code"][at] = STARTED
    cols["ts"][at] = started[both]
    cols["simple"] = np.zeros(n + k, dtype=np.bool_)
    cols["simple"][position] = simple
    return cols


def _only_event_of_its_step(code: npt.NDArray[Any], seq: npt.NDArray[np.int64]) -> Any:
    """Whether each event is the only step event (``STEP_KINDS``) of its step number."""
    of_step = np.isin(code, STEP_KINDS) & (seq != NULL_SEQ)
    steps = seq[of_step]
    if not len(steps):
        return np.zeros(len(code), dtype=np.bool_)
    low, high = int(steps.min()), int(steps.max())
    if low >= 0 and high <= 4 * len(code) + 1024:  # step numbers are small: count by number
        counts = np.bincount(steps, minlength=high + 1)
        return of_step & (counts[np.where(of_step, seq, 0)] == 1)
    values, inverse, counts = np.unique(steps, return_inverse=True, return_counts=True)
    once = np.zeros(len(code), dtype=np.bool_)
    once[of_step] = counts[inverse] == 1
    return once


def _executions(
    run: RunState,
    cols: EventCols,
    n: int,
    lease_end: dict[int, float],
    finishes: dict[int, Event],
    decisions: Positions,
    tokens: npt.NDArray[Any],
    copied: list[tuple[int, Event]],
    kill_at: list[tuple[int, Kill]],
    dead_last: dict[int, float],
) -> None:
    """Every step execution's bar, with array operations. Positions index ``cols`` (id order);
    ``n`` stands for "never"."""
    code, seq, ts, inc = cols["code"], cols["seq"], cols["ts"], cols["incarnation"]
    has_seq = seq != NULL_SEQ
    starts = np.flatnonzero((code == STARTED) & has_seq)
    m = len(starts)
    exec_of = np.full(n + 1, -1, dtype=np.int64)
    exec_of[starts] = np.arange(m)

    # 1. A takeover or the run's end closes whatever is open: the first one after each start.
    closers = np.flatnonzero((code == LEASE) | (code == FINISHED))
    k = np.searchsorted(closers, starts, side="right")
    global_close = np.append(closers, n)[k]
    del closers, k

    # 2. Per step number, in id order: each event belongs to the latest start before it.
    simple = cols["simple"]
    step_events = np.flatnonzero(np.isin(code, STEP_KINDS) & has_seq & ~simple)
    order = step_events[np.lexsort((step_events, seq[step_events]))]
    del step_events
    is_start = code[order] == STARTED
    last_start = (
        np.maximum.accumulate(np.where(is_start, np.arange(len(order)), -1))
        if len(order)
        else order
    )
    owner_pos = order[np.maximum(last_start, 0)] if len(order) else order
    owned = (last_start >= 0) & (seq[owner_pos] == seq[order]) & ~is_start
    ev_pos, owner = order[owned], exec_of[owner_pos[owned]]
    del last_start, owner_pos, owned  # a 1M-step run's arrays are 16 MB each: freed as used
    # A start again with the step still open (no end in between) leaves the first one running
    # forever, out of the open set, as the fold does.
    s_sorted = order[is_start]
    next_start = np.full(m, n, dtype=np.int64)
    same = seq[s_sorted[1:]] == seq[s_sorted[:-1]]
    next_start[exec_of[s_sorted[:-1][same]]] = s_sorted[1:][same]
    del order, is_start, s_sorted, same

    ends = np.isin(code[ev_pos], (COMMIT, ATTEMPT_FAILED))
    seq_close = np.full(m, n, dtype=np.int64)
    np.minimum.at(seq_close, owner[ends], ev_pos[ends])
    # Whatever comes first ends the attempt (so a late event after a takeover ends nothing).
    close = np.minimum(np.minimum(seq_close, global_close), next_start)

    outcome = np.full(m, RUNNING, dtype=np.int8)
    end = np.full(m, math.nan)
    phase = np.zeros(m, dtype=np.int8)
    by_step = (close == seq_close) & (close < n)
    committed = by_step & (code[np.minimum(close, n - 1)] == COMMIT)
    failed = by_step & ~committed
    outcome[committed], outcome[failed] = COMMITTED, FAILED
    end[by_step] = ts[close[by_step]]
    closing_outcome = np.full(n + 1, RUNNING, dtype=np.int8)  # by position of a takeover or finish
    closing_end = np.full(n + 1, math.nan)
    kills = {p for p, _kill in kill_at}
    for p, dead_end in lease_end.items():  # lost to a kill, or put down by a stop
        closing_outcome[p], closing_end[p] = REDONE if p in kills else INTERRUPTED, dead_end
    for p, ev in finishes.items():
        closing_outcome[p] = (
            GAVE_UP
            if ev.data.get("status", RunStatus.FAILED) in (RunStatus.GAVE_UP, RunStatus.CANCELLED)
            else FAILED
        )
        closing_end[p] = ev.ts
    taken = np.flatnonzero((close == global_close) & (close < n))
    outcome[taken], end[taken] = closing_outcome[close[taken]], closing_end[close[taken]]
    del closing_outcome, closing_end, exec_of, next_start

    # 3. Phase and tokens: the last decision or effect event inside the attempt sets them.
    inside = ev_pos < close[owner]
    marks = inside & np.isin(code[ev_pos], (DECIDED, EFFECT_STARTED, EFFECT_DONE))
    last_mark = np.full(m, -1, dtype=np.int64)
    np.maximum.at(last_mark, owner[marks], ev_pos[marks])
    marked = last_mark >= 0
    phase[marked] = np.where(code[last_mark[marked]] == DECIDED, 1, 2)
    phase[committed] = 3
    tok = np.zeros(m, dtype=np.int64)
    est = np.zeros(m, dtype=np.bool_)
    decided = inside & (code[ev_pos] == DECIDED)
    last_decision = np.full(m, -1, dtype=np.int64)
    np.maximum.at(last_decision, owner[decided], ev_pos[decided])
    with_tokens = np.flatnonzero(last_decision >= 0)
    if len(with_tokens) and len(tokens):
        row = np.searchsorted(tokens["id"], cols["id"][last_decision[with_tokens]])
        tok[with_tokens] = tokens["tokens"][row]
        est[with_tokens] = tokens["estimated"][row]

    # 4. A run that gave up between steps gets a short marker bar where it stopped.
    created_at = [starts]
    closed_by_finish = set(close[taken].tolist())
    markers = [
        p
        for p, ev in finishes.items()
        if ev.data.get("status") == RunStatus.GAVE_UP and p not in closed_by_finish
    ]
    rows = np.zeros(m + len(markers) + len(copied), dtype=np.dtype(list(EXECUTION_FIELDS.items())))
    began = cols["started"][starts]  # a deferred start written late began before its event
    rows["start"][:m] = np.where(np.isnan(began), ts[starts], began)
    rows["end"][:m], rows["lane"][:m] = end, inc[starts]
    rows["outcome"][:m], rows["seq"][:m], rows["phase"][:m] = outcome, seq[starts], phase
    rows["tokens"][:m], rows["estimated"][:m] = tok, est
    for j, p in enumerate(markers):
        ev = finishes[p]
        rows[m + j] = (ev.ts, ev.ts + 0.05, ev.incarnation, GAVE_UP, -1, 0, 0, False)
        run.step_names[-1] = (f"gave up: {ev.data.get('reason') or ''}", "budget")
        created_at.append(np.array([p]))
    for j, (p, ev) in enumerate(copied, start=m + len(markers)):
        first, last = run.copied_span(ev)
        rows[j] = (first, last, 0, COPIED, ev.seq, 3, 0, False)
        created_at.append(np.array([p]))
    whole = np.flatnonzero(simple)  # commits that are an execution on their own
    opened = np.flatnonzero(simple | ((code == STARTED) & has_seq))  # every start, written or not
    unseen = _unseen_bars(run, cols, kill_at, dead_last, set(close[taken].tolist()), opened)
    if unseen:
        extra = np.zeros(len(unseen), dtype=rows.dtype)
        for j, (_at, bar) in enumerate(unseen):
            extra[j] = bar
        rows = np.concatenate([rows, extra])
        created_at.append(np.array([q - 0.5 for q, _ in unseen]))  # just before the start at q
    # The bars of the rest, in the order the fold makes them (where their start is), merged
    # into the simple ones' (in order already: each just before its commit, at p - 0.25).
    at = np.concatenate([a.astype(np.float64) for a in created_at])
    order = np.argsort(at, kind="stable")
    slots = np.searchsorted(whole - 0.25, at[order]) + np.arange(len(order))
    total = len(whole) + len(order)
    buffer = np.zeros(total + max(256, total // 8), dtype=rows.dtype)  # room to grow live
    filled = buffer[:total]
    filled[slots] = rows[order]
    plain = np.ones(total, dtype=np.bool_)
    plain[slots] = False
    del opened
    for name, source in (("start", cols["started"]), ("end", ts), ("lane", inc), ("seq", seq)):
        filled[name][plain] = source[whole]  # one field at a time: 8 MB, not 32, at 1M steps
    filled["outcome"][plain], filled["phase"][plain] = COMMITTED, 3
    run.executions = Columns.adopt(buffer, total)
    still_open = (close == n) & (outcome == RUNNING)
    position = np.empty(len(order), dtype=np.int64)
    position[order] = slots
    run._open = {
        int(s): int(i)
        for s, i in zip(seq[starts[still_open]], position[:m][still_open], strict=True)
    }


def _unseen_bars(
    run: RunState,
    cols: EventCols,
    kill_at: list[tuple[int, Kill]],
    dead_last: dict[int, float],
    closing: set[int],
    starts: Positions,
) -> list[tuple[int, tuple[Any, ...]]]:
    """The redone bars of kills that found no step open (``RunState._unseen``): the dead engine
    was inside the step after the highest one committed, its start unwritten, if a later engine
    then ran that step with a deferred start. (position of that start, the bar's row). Kills
    whose step has not run again yet are left in ``run._unseen`` for the fold to go on from."""
    code, seq, inc, began = cols["code"], cols["seq"], cols["incarnation"], cols["started"]
    done = np.flatnonzero(np.isin(code, (COMMIT, COPIED_STEP)) & (seq != NULL_SEQ))
    highest = np.maximum.accumulate(seq[done]) if len(done) else done
    run._frontier = int(highest[-1]) if len(done) else 0
    out: list[tuple[int, tuple[Any, ...]]] = []
    for p, kill in kill_at:
        if p in closing:
            continue  # it had a step open: that bar is redone already
        j = int(np.searchsorted(done, p)) - 1
        step = (int(highest[j]) if j >= 0 else 0) + 1
        later = starts[(starts > p) & (seq[starts] == step)]
        if not len(later):
            run._unseen.setdefault(step, []).append(
                (kill.killed_incarnation, dead_last[p], kill.ts)
            )
            continue
        q = int(later[0])
        if np.isnan(began[q]) or int(inc[q]) == kill.killed_incarnation:
            continue
        out.append((q, (dead_last[p], kill.ts, kill.killed_incarnation, REDONE, step, 0, 0, False)))
    return out


class _LastOfIncarnation:
    """The last event of an incarnation before a position, by binary search (no per-event loop)."""

    def __init__(self, inc: npt.NDArray[np.int64]) -> None:
        self._span = len(inc) + 1
        keys = inc.astype(np.int64) * self._span + np.arange(len(inc))
        in_order = bool(np.all(keys[1:] >= keys[:-1]))  # one engine after another: sorted
        self._keys = keys if in_order else np.sort(keys)

    def __call__(
        self, incarnation: int, before: int, ts: npt.NDArray[np.float64], *, default: float
    ) -> float:
        j = int(np.searchsorted(self._keys, incarnation * self._span + before)) - 1
        if j >= 0 and self._keys[j] // self._span == incarnation:
            return float(ts[self._keys[j] % self._span])
        return default

    def final(self, ts: npt.NDArray[np.float64]) -> dict[int, float]:
        """incarnation -> ts of its last event."""
        inc, pos = np.divmod(self._keys, self._span)
        last = np.append(inc[1:] != inc[:-1], True)
        return {int(i): float(ts[p]) for i, p in zip(inc[last], pos[last], strict=True)}


def load_details(repo: LogRepository, run_id: str, upto: int) -> RunDetails:
    """Step names and the budget charts' series of one run, up to id ``upto``."""
    return RunDetails(run_id, repo.step_names(run_id, upto), repo.usage_columns(run_id, upto))


def add_details(run: RunState, details: RunDetails) -> None:
    """Fill in the second pass (before any live event of the run is folded)."""
    names = StepNames(details.step_names)
    names.update(run.step_names)  # the few the first pass named (a gave-up marker)
    run.step_names = names
    run.usage_series = Columns.of(details.usage_series)
