"""Which engine deaths were kills, and what each one cost: the one reading of the log for it.

A **kill** is an engine that died without a clean exit. The log shows it when the next engine
takes the lease over from a holder that never let go (``lease_acquired`` with ``previous_pid``);
an engine that stopped cleanly wrote ``lease_released`` (SIGTERM, cancel, exit while waiting) or
``run_finished`` first, and the next one takes over with ``previous_pid`` unset.

**Redone work** is a step execution repeated *because* an engine was killed, and nothing else.
Every time a step starts again, ``account`` names why, from what the log holds about the
attempt before it:

``retry``      the attempt before failed (``step_attempt_failed``): the retry policy or
               ``steplog retry`` ran it again, as it should;
``stop``       the engine running it let go cleanly (a stop, a cancel, an exit while waiting):
               the step was interrupted on purpose, not lost;
``wait``       a wait step taken up again (it redoes nothing);
``kill``       the engine running it was killed: redone work, charged to that kill;
``committed``  the step had committed and ran again: a checkpoint not honoured (never right);
``unexplained`` the same engine started it again with no failure between (never right).

A plain step's start is deferred (``steplog.log.journal``): a step that commits first has no
``step_started``, its ``step_committed`` (with ``started``) is its start too, and a kill inside it
leaves no trace of it. So a killed engine with no step open in the log was inside the step after
its last commit, or just before it: when a later engine runs that step with a deferred start, it
is counted a ``kill`` re-run (``inferred``), the upper bound the log allows. A step whose start is
never deferred (a model call, a wait, a retry) would have shown had the dead engine begun it.

The verdict counts ``kill`` re-runs as redone and fails on ``committed`` and ``unexplained``
ones; the rest is the run working as designed. Pure: it reads a list of events, nothing else.
``Deaths`` is the death rule alone, event by event, for a reader that folds a run as it grows
(the monitor).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from steplog.log.events import EventKind
from steplog.log.logread import Event
from steplog.log.steps import WAIT_KINDS

Cause = Literal["retry", "stop", "wait", "kill", "committed", "unexplained"]
FAULTY: frozenset[str] = frozenset({"committed", "unexplained"})
"""Causes that mean the engine broke a promise (a checkpoint, or its own bookkeeping)."""

_CLEAN_ENDS = frozenset({EventKind.LEASE_RELEASED, EventKind.RUN_FINISHED})


@dataclass(frozen=True)
class Death:
    """An engine that died holding the lease, as the engine that took over saw it."""

    incarnation: int
    """The engine that died."""
    at: float
    """When: the killer's clock when it said (``--killed-at``), else the dead engine's last
    event."""
    exact: bool
    """``at`` is the killer's own time, not an estimate from the log."""
    taken_over_at: float
    """When the next engine took the lease (the ``lease_acquired`` that saw the death)."""
    in_flight: frozenset[int]
    """Steps the dead engine had started and neither committed nor failed."""


@dataclass(frozen=True)
class Rerun:
    """A step that started again, and why."""

    seq: int
    incarnation: int
    """The engine that started it again."""
    ts: float
    cause: Cause
    previous_incarnation: int
    """The engine that ran the attempt before."""
    name: str = ""
    inferred: bool = False
    """The killed engine left no start of it (a deferred start): it may have begun it or not."""


@dataclass
class Account:
    """Every death and every re-run of one run's steps, in log order."""

    deaths: list[Death] = field(default_factory=list)
    reruns: list[Rerun] = field(default_factory=list)
    resends: dict[str, int] = field(default_factory=dict)
    """Effect starts per idempotency key (``effect_started``): how often the engine sent each."""
    resend_causes: dict[str, int] = field(default_factory=dict)
    """Effects sent again (``again``), counted by the cause of the step execution that sent them."""
    inferred: dict[int, int] = field(default_factory=dict)
    """Killed engine -> the step it was inside, its start unwritten (known once a later engine
    ran that step with a deferred start)."""

    @property
    def redone(self) -> int:
        """Step executions repeated because an engine was killed."""
        return sum(1 for r in self.reruns if r.cause == "kill")

    def redone_after(self, incarnation: int) -> int:
        """Steps the killed engine ``incarnation`` had in flight that a later engine ran again."""
        return sum(
            1 for r in self.reruns if r.cause == "kill" and r.previous_incarnation == incarnation
        )

    def faulty(self) -> list[Rerun]:
        return [r for r in self.reruns if r.cause in FAULTY]

    def death_of(self, incarnation: int) -> Death | None:
        return next((d for d in self.deaths if d.incarnation == incarnation), None)

    def count(self, cause: Cause) -> int:
        return sum(1 for r in self.reruns if r.cause == cause)


@dataclass
class Deaths:
    """Who holds the lease and who let go cleanly, event by event: ``see`` returns the
    ``Death`` a takeover reveals. Feed it every event of one run, oldest first; a reader that
    skips events (a columnar load) says when an engine was last heard of (``heard``) instead."""

    holder: int = 0
    """The incarnation that took the lease last (0: none yet)."""
    ended_cleanly: set[int] = field(default_factory=set)
    last_ts: dict[int, float] = field(default_factory=dict)
    """Each incarnation's last event."""

    def see(self, e: Event, in_flight: Iterable[int] = ()) -> Death | None:
        """Take ``e`` in; a ``lease_acquired`` from a holder that died returns its ``Death``
        (``in_flight``: the steps it had open, if the caller tracks them)."""
        found = None
        if e.kind == EventKind.LEASE_ACQUIRED:
            holder, killed_at = self.holder, e.data.get("killed_at")
            died = holder != 0 and holder not in self.ended_cleanly  # a takeover, not a handover
            if died and e.data.get("previous_pid") is not None:
                exact = isinstance(killed_at, (int, float))
                at = (
                    float(killed_at)
                    if isinstance(killed_at, (int, float))
                    else self.last_ts.get(holder, e.ts)
                )
                found = Death(holder, at, exact, e.ts, frozenset(in_flight))
            self.holder = e.incarnation
        elif e.kind in _CLEAN_ENDS:
            self.ended_cleanly.add(e.incarnation)
        self.last_ts[e.incarnation] = e.ts
        return found

    def heard(self, incarnation: int, ts: float) -> None:
        """Engine ``incarnation``'s last event so far was at ``ts``."""
        self.last_ts[incarnation] = ts


@dataclass
class _Attempt:
    incarnation: int
    kind: str
    name: str
    state: Literal["open", "committed", "failed"] = "open"


def account(events: Iterable[Event]) -> Account:
    """Read one run's events (oldest first) into its deaths and re-runs."""
    out = Account()
    attempts: dict[int, _Attempt] = {}  # the latest attempt of each step
    open_by: dict[int, set[int]] = {}  # incarnation -> its steps started, not finished
    deaths = Deaths()
    ended_cleanly = deaths.ended_cleanly
    sent_by: dict[int, Cause | None] = {}  # step -> cause of its current execution (None: first)
    frontier = 0  # the highest step committed so far
    unseen: dict[int, list[int]] = {}  # step -> killed engines that may have been inside it
    for e in events:
        kind, inc = e.kind, e.incarnation
        if death := deaths.see(e, open_by.get(deaths.holder, ())):
            out.deaths.append(death)
            if not death.in_flight:
                unseen.setdefault(frontier + 1, []).append(death.incarnation)
        deferred = "started" in e.data and e.seq is not None
        if (kind == EventKind.STEP_STARTED or (kind == EventKind.STEP_COMMITTED and deferred)) and (
            e.seq is not None
        ):
            seq = e.seq
            name, step_kind = str(e.data.get("name", "")), str(e.data.get("kind", ""))
            before = attempts.get(seq)
            cause: Cause | None = None
            killed = unseen.pop(seq, [])
            if before is not None:
                cause = _cause(before, inc, ended_cleanly, step_kind)
                out.reruns.append(Rerun(seq, inc, e.ts, cause, before.incarnation, name))
                open_by.get(before.incarnation, set()).discard(seq)
            elif killed and deferred:
                cause = "kill"
                for dead in killed:  # each killed engine may have run it once
                    out.reruns.append(Rerun(seq, inc, e.ts, cause, dead, name, inferred=True))
                    out.inferred[dead] = seq
            if kind == EventKind.STEP_COMMITTED:  # started and committed at once
                attempts[seq] = _committed_in(inc)
                frontier = max(frontier, seq)
            else:
                attempts[seq] = _Attempt(inc, step_kind, name)
                open_by.setdefault(inc, set()).add(seq)
            if cause is None:  # the common case, kept as no entry (``sent_by.get``: None)
                sent_by.pop(seq, None)
            else:
                sent_by[seq] = cause
        elif kind == EventKind.STEP_COMMITTED and e.seq is not None:
            _finish(attempts, open_by, e.seq, "committed")
            frontier = max(frontier, e.seq)
        elif kind == EventKind.STEP_COPIED and e.seq is not None:
            attempts[e.seq] = _Attempt(
                inc, str(e.data.get("kind", "")), str(e.data.get("name", "")), "committed"
            )
            frontier = max(frontier, e.seq)
        elif kind == EventKind.STEP_ATTEMPT_FAILED and e.seq is not None:
            _finish(attempts, open_by, e.seq, "failed")
        elif kind == EventKind.EFFECT_STARTED:
            key = str(e.data.get("key", ""))
            out.resends[key] = out.resends.get(key, 0) + 1
            if e.data.get("again"):
                why = sent_by.get(e.seq) if e.seq is not None else None
                label = why or "retry"  # sent again within one execution: the retry policy
                out.resend_causes[label] = out.resend_causes.get(label, 0) + 1
    return out


def _cause(before: _Attempt, inc: int, ended_cleanly: set[int], kind: str) -> Cause:
    if before.state == "committed":
        return "committed"
    if before.state == "failed":
        return "retry"
    if before.kind in WAIT_KINDS and kind in WAIT_KINDS:
        return "wait"
    if before.incarnation == inc:
        return "unexplained"
    return "stop" if before.incarnation in ended_cleanly else "kill"


_COMMITTED: dict[int, _Attempt] = {}


def _committed_in(incarnation: int) -> _Attempt:
    """A committed attempt of engine ``incarnation``: one shared object per engine, not one per
    step (a 1M-step run's attempts were 250 MB of its verdict's memory). Never changed: a
    later end of its step replaces it (``_finish``). Its kind and name are not kept: a step
    committed is asked only its state and its engine (``_cause``, ``Rerun``)."""
    a = _COMMITTED.get(incarnation)
    if a is None:
        a = _COMMITTED[incarnation] = _Attempt(incarnation, "", "", "committed")
    return a


def _finish(
    attempts: dict[int, _Attempt],
    open_by: dict[int, set[int]],
    seq: int,
    state: Literal["committed", "failed"],
) -> None:
    a = attempts.get(seq)
    if a is not None:
        open_by.get(a.incarnation, set()).discard(seq)
        if state == "committed":
            attempts[seq] = _committed_in(a.incarnation)
        elif a.state == "committed":  # shared: replaced, never changed
            attempts[seq] = _Attempt(a.incarnation, a.kind, a.name, state)
        else:
            a.state = state
