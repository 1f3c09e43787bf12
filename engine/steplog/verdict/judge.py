"""Did a run survive its kills? The one verdict, for ``steplog killtest`` and the monitor alike.

Judged by evidence the engine does not write about itself: the outbox's own ledger (what the
outside world received, and every attempt), the workdir compared with an uninterrupted reference
run (files byte for byte, SQLite tables row by row), and the log's own counters
(``step_executions - steps_committed`` is work redone). Two calls::

    from steplog.verdict import collect, judge

    evidence = collect(db, run_id, ledger=outbox.ledger(), kill_times=[t1, t2])  # read-only, cheap
    verdict = judge(evidence)                                                    # pure
    verdict.passed      # True / False once the run is terminal; None while it is still going
    verdict.checks      # [Check(name, ok, detail)]: ok None = "not checked" (no reference, no
    outbox,
                        #  or the run not finished yet), never a silent pass
    verdict.kills       # [Kill(at, seq, step_name, phase, resume_latency, redone, ...)]
    verdict.duplicates, verdict.missing, verdict.different   # [Finding(kind, subject, detail)]
    verdict.to_json()

For the live monitor: call ``collect`` with the kill times you made (``time.time()`` just before
``killpg``) and the outbox ledger if there is one, and no ``reference``; checks that need the
reference say "not checked". ``Verdict.failing`` is True as soon as any check has failed, even
while the run is still going (a duplicate delivery cannot be undone). Nothing here imports Qt,
starts a process or writes anything; the log is opened read-only and no transaction is held.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from steplog.log.db import location, open_readonly
from steplog.log.events import EventKind
from steplog.log.ledger import completed_post_keys, post_count
from steplog.log.location import LogLocation
from steplog.log.logread import Event, iter_events
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL, run_status
from steplog.log.steps import step_name, steps_in_order
from steplog.outbox.ledger import Delivery, Ledger, canonical_json
from steplog.verdict.evidence import read_ledger
from steplog.verdict.kills import Account, account
from steplog.verdict.outputs import Finding, Outputs, compare, snapshot
from steplog.verdict.trail import Trail

__all__ = [
    "Check",
    "Evidence",
    "Finding",
    "Kill",
    "KillMark",
    "Reference",
    "Verdict",
    "collect",
    "judge",
    "latency_stats",
    "message_label",
    "redone_histogram",
]

PHASES: dict[
    str, str
] = {  # the last event an engine wrote before it died → where in the step the kill landed
    EventKind.LEASE_ACQUIRED: "resuming",
    EventKind.STEP_STARTED: "running",
    EventKind.DECISION_RECORDED: "decided",
    EventKind.EFFECT_STARTED: "acting",
    EventKind.EFFECT_COMPLETED: "acted",
    EventKind.STEP_COMMITTED: "recorded",
    EventKind.STEP_ATTEMPT_FAILED: "retrying",
    EventKind.RUN_FINISHED: "finished",
    EventKind.LEASE_RELEASED: "finished",
}
"""Phases besides these: ``start-up`` (killed before taking the lease) and ``deciding`` (a chat
step started, its answer not committed)."""


@dataclass(frozen=True)
class KillMark:
    """A kill as its maker knows it: when, and for a crash-point kill, which point and the proof."""

    at: float
    point: str | None = None
    """``"after_effect_started@5"`` for a crash-point kill (``STEPLOG_CRASH_AT``)."""
    proved: bool | None = None
    """The engine printed that it reached ``point`` (``None``: not a crash-point kill)."""


@dataclass(frozen=True)
class Kill:
    """One kill as the log shows it."""

    at: float
    """Unix time of the kill."""
    seq: int | None
    """The step it landed in (or just after, in phase ``recorded``); ``None`` in start-up."""
    step_name: str | None
    phase: str
    incarnation: int | None
    """The engine killed; ``None`` when it died before taking the lease."""
    resume_latency: float | None
    """Kill → first step committed by the next engine; ``None`` if that engine committed none."""
    redone: int
    """Steps the next engine ran again that had started before the kill."""
    point: str | None = None
    proved: bool | None = None
    in_flight: int = 1
    """Steps the killed engine had started and not committed: 1 for a sequential agent, up to
    the concurrency for parallel steps. A kill may cost at most these (and at least 1 is
    allowed)."""

    @property
    def may_redo(self) -> int:
        return max(1, self.in_flight)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None
    """``None``: not checked (and why is in ``detail``)."""
    detail: str
    source: str = "log"
    """Where the evidence came from: ``log``, ``outbox ledger (…)``, ``reference run``,
    ``workdir``."""


@dataclass(frozen=True)
class Reference:
    """What an uninterrupted run of the same agent and params produced."""

    status: str
    outputs: Outputs
    messages: tuple[dict[str, Any], ...]
    redone: int
    resends: int
    steps: tuple[tuple[int, str, str], ...]
    """(seq, name, kind) of each step, in order."""
    duration: float = 0.0
    """Seconds from launch to exit, start-up included."""
    startup: float = 0.0
    """Seconds from launch to the engine taking the lease."""

    @classmethod
    def capture(
        cls,
        db: LogLocation,
        run_id: str,
        *,
        ledger: Ledger | None,
        duration: float = 0.0,
        startup: float = 0.0,
    ) -> Reference:
        conn = open_readonly(db)
        try:
            s = run_status(conn, run_id, db=db)
            steps = tuple(steps_in_order(conn, run_id))
        finally:
            conn.close()
        return cls(
            status=s["status"],
            outputs=snapshot(Path(s["workdir"])),
            messages=tuple(d.body for d in ledger.deliveries) if ledger else (),
            redone=s["step_executions"] - s["steps_committed"],
            resends=_resends(ledger) if ledger else 0,
            steps=steps,
            duration=duration,
            startup=startup,
        )


@dataclass
class Evidence:
    """Everything the verdict looks at, gathered by ``collect``."""

    status: dict[str, Any]
    """``steplog status --json`` of the run."""
    kills: list[Kill]
    ledger: Ledger | None
    reference: Reference | None
    outputs: Outputs | None
    """The workdir's outputs (read only when there is a reference and the run is terminal)."""
    lease_refusals: int | None = None
    """Relaunches refused with exit 75 after a kill (``None``: nobody counted)."""
    ledger_source: str = "outbox ledger"
    """Where ``ledger`` was read (a URL or an outbox file), for the checks' evidence."""
    ledger_problem: str | None = None
    """Why no ledger could be read, when the run did post messages."""
    posts: int = 0
    """``http_post`` effects the run made (0: no outbox evidence is needed)."""
    completed_posts: set[str] | None = None
    """Keys of the posts the log records as completed; each must be a delivery in the ledger
    (checked when there is no reference run to compare with)."""
    account: Account = field(default_factory=Account)
    """Deaths and re-runs as the log shows them (``steplog.verdict.kills``): what counts as
    redone."""


@dataclass
class Verdict:
    run_id: str
    status: str
    """The run's outcome (``succeeded``, ``failed``, ``gave_up``, ``cancelled``) or its state while
    it goes on: shown beside the verdict, never folded into it."""
    reason: str | None
    passed: bool | None
    """``None`` while the run is not terminal."""
    checks: list[Check]
    kills: list[Kill]
    duplicates: list[Finding] = field(default_factory=list)
    missing: list[Finding] = field(default_factory=list)
    different: list[Finding] = field(default_factory=list)
    steps_committed: int = 0
    step_executions: int = 0
    redone_steps: int = 0
    """Step executions repeated because an engine was killed (``steplog.verdict.kills``): not
    retries after
    an error, nor steps interrupted by a stop, a cancel or a wait."""
    incarnations: int = 0
    deliveries: int | None = None
    attempts: int | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    engine: str = "none"
    """``steplog status``'s ``engine``: ``live``, ``gone``, ``none`` or ``remote``."""
    waiting_for: str | None = None
    account: Account = field(default_factory=Account)

    @property
    def failing(self) -> bool:
        """Some check has failed already (true before the run ends, too)."""
        return any(c.ok is False for c in self.checks)

    @property
    def label(self) -> str:
        """``FAIL``, ``RUNNING``, ``UNTESTED`` or ``PASS`` (CONTRACT ``steplog verdict``).

        PASS and FAIL come from kills only: a run never killed is ``UNTESTED`` once it ends
        (``RUNNING`` before), whatever its outcome, retries, stops, waits or cancels. A killed
        run is FAIL as soon as a check failed (a duplicate cannot be undone; a live verdict makes
        no check it could take back), RUNNING while it goes on, UNTESTED when evidence is
        missing (``unchecked`` says which), and PASS when it ended and every check passed.
        """
        if not self.kills:
            return "RUNNING" if self.passed is None else "UNTESTED"
        if self.failing:
            return "FAIL"
        if self.passed is None:
            return "RUNNING"
        return "UNTESTED" if self.unchecked else "PASS"

    @property
    def unchecked(self) -> list[Check]:
        return [c for c in self.checks if c.ok is None]

    @property
    def explanation(self) -> str:
        """One line saying why the label is what it is."""
        label = self.label
        bad = "; ".join(f"{c.name}: {c.detail}" for c in self.checks if c.ok is False)
        if label == "FAIL":
            return bad
        but = f"; but {bad}" if bad else ""
        kills = f" ({len(self.kills)} kill(s) so far)" if self.kills else ""
        if label == "RUNNING":
            return self._state() + kills + but
        if not self.kills:
            return (
                f"not kill-tested: the run {self.status} without being "
                f"killed{self._not_redone()}{but}"
            )
        if self.unchecked:
            return "; ".join(f"{c.name}: {c.detail}" for c in self.unchecked)
        return f"{len(self.kills)} kill(s), nothing duplicated, at most one step redone per kill"

    def _state(self) -> str:
        """What a run that has not ended is doing."""
        if self.status == RunStatus.WAITING:
            return (
                f"the run waits for signal {self.waiting_for!r}"
                if self.waiting_for
                else "the run waits"
            )
        if self.status == RunStatus.QUEUED:
            return (
                "the run is queued: no engine works on it yet; a worker or `steplog run` starts it"
            )
        if self.engine == "none":
            return (
                "stopped: no engine works on the run; Resume (or the same `steplog run` command) "
                "continues it from its last checkpoint"
            )
        if self.engine == "gone":
            return (
                "its engine died and none has resumed the run yet; Resume (or the same `steplog "
                "run` command) continues it from its last checkpoint"
            )
        if self.engine == "remote":
            return "an engine on another host works on the run"
        return "the run is still going"

    def _not_redone(self) -> str:
        """Steps that ran again for reasons other than a kill, said as such (or nothing)."""
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.account.count("retry"), "retried after an error"),
                (self.account.count("stop"), "run again after a stop or cancel"),
                (self.account.count("wait"), "wait(s) taken up again"),
            )
            if n
        ]
        return f" ({', '.join(parts)}: not redone work)" if parts else ""

    def summary_json(self) -> dict[str, Any]:
        """The ``steplog verdict --json`` object (CONTRACT.md)."""
        return {
            "run_id": self.run_id,
            "verdict": self.label,
            "explanation": self.explanation,
            "status": self.status,
            "outcome": self.status,
            "kills": len(self.kills),
            "redone": self.redone_steps,
            "duplicates": len(self.duplicates),
            "missing": len(self.missing),
            "deliveries": self.deliveries,
            "checks": [
                {"name": c.name, "passed": c.ok, "evidence": c.detail, "source": c.source}
                for c in self.checks
            ],
            "resume_latency": self.latency_stats(),
        }

    @property
    def latencies(self) -> list[float]:
        return [k.resume_latency for k in self.kills if k.resume_latency is not None]

    def latency_stats(self) -> dict[str, float | None]:
        """Median, p95 and max resume latency in seconds (``None`` without measurements)."""
        return latency_stats(self.kills)

    def redone_histogram(self) -> dict[int, int]:
        """Redone steps per kill → number of kills."""
        return redone_histogram(self.kills)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
            "kills": [asdict(k) for k in self.kills],
            "duplicates": [f.to_json() for f in self.duplicates],
            "missing": [f.to_json() for f in self.missing],
            "different": [f.to_json() for f in self.different],
            "steps_committed": self.steps_committed,
            "step_executions": self.step_executions,
            "redone_steps": self.redone_steps,
            "incarnations": self.incarnations,
            "deliveries": self.deliveries,
            "attempts": self.attempts,
            "budget": self.budget,
            "resume_latency": self.latency_stats(),
            "redone_per_kill": {str(k): v for k, v in self.redone_histogram().items()},
            "reruns": {
                c: self.account.count(c)
                for c in ("kill", "retry", "stop", "wait", "committed", "unexplained")
            },
        }


def latency_stats(kills: Sequence[Kill]) -> dict[str, float | None]:
    """Median, p95 and max resume latency over ``kills`` (``None`` where nothing was measured)."""
    xs = sorted(k.resume_latency for k in kills if k.resume_latency is not None)
    if not xs:
        return {"median": None, "p95": None, "max": None}
    return {
        "median": statistics.median(xs),
        "p95": xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)],
        "max": xs[-1],
    }


def redone_histogram(kills: Sequence[Kill]) -> dict[int, int]:
    """Redone steps per kill → how many kills redid that many."""
    hist: dict[int, int] = {}
    for k in kills:
        hist[k.redone] = hist.get(k.redone, 0) + 1
    return dict(sorted(hist.items()))


def collect(
    db: LogLocation,
    run_id: str,
    *,
    ledger: Ledger | None = None,
    kill_times: Sequence[float | KillMark] | None = None,
    reference: Reference | None = None,
    lease_refusals: int | None = None,
    ledger_source: str = "outbox ledger",
    ledger_problem: str | None = None,
    one_shot: bool = False,
) -> Evidence:
    """Read the evidence for ``run_id`` from the log (read-only) and, with a reference, the workdir.

    ``kill_times``: the kills as their maker knows them; by default the ones the log records
    (``logged_kills``), so a run reopened later is judged exactly as it was live. ``one_shot``:
    the caller is a command that reads once (``db.connect_readonly``: no -wal or -shm left
    beside an idle log), not the monitor.

    The log is read status first, then events, then effects: each read sees at least what the
    one before it saw. A ``ledger`` must have been read *after* this call (``verdict_of`` does):
    an outbox read earlier can lack a post the log already records as completed.
    """
    db = location(db)
    conn = open_readonly(db, one_shot=one_shot)
    try:
        status = run_status(conn, run_id, db=db)
        trail = Trail()  # the events streamed once: folded as they pass, a few numbers kept
        found = account(trail.record(iter_events(conn, run_id)))
        posts = post_count(conn, run_id)
        completed = completed_post_keys(conn, run_id)
        given = [KillMark(d.at) for d in found.deaths] if kill_times is None else kill_times
        marks = sorted(
            (m if isinstance(m, KillMark) else KillMark(float(m)) for m in given),
            key=lambda m: m.at,
        )
        kills = _kills(trail, marks, lambda seq: step_name(conn, run_id, seq), found)
    finally:
        conn.close()
    outputs = (
        snapshot(Path(status["workdir"]))
        if reference is not None and status["status"] in TERMINAL
        else None
    )
    return Evidence(
        status=status,
        kills=kills,
        ledger=ledger,
        reference=reference,
        outputs=outputs,
        lease_refusals=lease_refusals,
        ledger_source=ledger_source,
        ledger_problem=ledger_problem,
        posts=int(posts),
        completed_posts=completed,
        account=found,
    )


def verdict_of(
    db: LogLocation,
    run_id: str,
    *,
    outbox: str | None = None,
    transport: Any = None,
    one_shot: bool = False,
) -> Verdict:
    """One run's verdict as the monitor's strip and ``steplog verdict`` show it: kills as the log
    records them, and this run's own deliveries from its outbox (read by
    ``steplog.verdict.evidence.read_ledger``: ``outbox``, the recorded URL, the outbox file beside
    the
    log). No reference run: the checks that need one are not made.

    The log is read first and the outbox after it, so the verdict sees the outbox at least as
    late as the log: every post the log records as completed had reached the outbox by then.
    ``transport``: an ``httpx`` transport to reuse for the outbox's URL (the monitor polls often).
    """
    evidence = collect(db, run_id, one_shot=one_shot)
    found = read_ledger(
        run_id,
        outbox=outbox,
        recorded_url=evidence.status["outbox"],
        log=location(db),
        completed=evidence.completed_posts or set(),
        transport=transport,
    )
    return judge(
        replace(
            evidence, ledger=found.ledger, ledger_source=found.source, ledger_problem=found.problem
        )
    )


def logged_kills(events: Sequence[Event]) -> list[KillMark]:
    """The kills a log records (``steplog.verdict.kills``): every takeover of an engine that died
    holding
    the lease, dated by ``killed_at`` when the killer handed the time to the engine it relaunched
    (``steplog run --killed-at``: Kill now, auto-kill, killtest), else by the dead engine's last
    event. ``events``: the run's, oldest first."""
    return [KillMark(d.at) for d in account(events).deaths]


def _kills(
    trail: Trail, marks: list[KillMark], name_of: Callable[[int], str | None], found: Account
) -> list[Kill]:
    """Where each kill landed and how soon a new engine was back, from the run's ``trail``."""
    out: list[Kill] = []
    lease = trail.of_kind(EventKind.LEASE_ACQUIRED)
    started = trail.of_kind(EventKind.STEP_STARTED)
    ended = trail.of_kind(EventKind.STEP_COMMITTED, EventKind.STEP_ATTEMPT_FAILED)
    back_kinds = trail.of_kind(EventKind.STEP_COMMITTED, EventKind.WAITING)
    for i, m in enumerate(marks):
        since = marks[i - 1].at if i else -math.inf
        window = (trail.ts > since) & (trail.ts <= m.at)
        leases = np.flatnonzero(window & lease)
        seq: int | None = None
        incarnation: int | None = None
        in_flight, redone = 0, 0
        if not len(leases):
            phase = "start-up"
        else:
            incarnation = int(trail.inc[leases[-1]])
            mine = window & (trail.inc == incarnation)
            last = int(np.flatnonzero(mine)[-1])
            kind = trail.kind_at(last)
            phase, seq = PHASES.get(kind, kind), trail.seq_at(last)
            if kind == EventKind.STEP_STARTED and trail.chat[last]:
                phase = "deciding"
            inside = found.inferred.get(incarnation)
            if inside is not None and kind in (
                EventKind.STEP_COMMITTED,
                EventKind.LEASE_ACQUIRED,
            ):
                # Inside a step whose start it never wrote (a deferred start), or just before it.
                phase, seq = PHASES[EventKind.STEP_STARTED], inside
            death = found.death_of(incarnation)
            if death is not None:
                in_flight = max(len(death.in_flight), int(inside is not None))
            else:  # not taken over yet (or it ended cleanly): what it had started and not finished
                in_flight = len(
                    set(trail.seq[mine & started].tolist()) - set(trail.seq[mine & ended].tolist())
                )
            redone = found.redone_after(incarnation)
        nexts = np.flatnonzero((trail.ts > m.at) & lease)
        latency = None
        if len(nexts):
            inc = int(trail.inc[nexts[0]])
            # Back where it was: its first step committed, or a wait taken up again (the time a
            # person then takes to answer is no resume latency).
            back = np.flatnonzero((trail.inc == inc) & back_kinds)
            latency = float(trail.ts[back[0]]) - m.at if len(back) else None
        out.append(
            Kill(
                at=m.at,
                seq=seq,
                step_name=name_of(seq) if seq is not None else None,
                phase=phase,
                incarnation=incarnation,
                resume_latency=latency,
                redone=redone,
                point=m.point,
                proved=m.proved,
                in_flight=in_flight,
            )
        )
    return out


def message_label(body: dict[str, Any]) -> str:
    """A message's logical identity, as people name it: by ticket, digest, or its canonical body."""
    if "ticket_id" in body:
        return f"message for ticket {body['ticket_id']}"
    if body.get("digest"):
        return "digest message"
    return f"message {canonical_json(body)[:80]}"


def _resends(ledger: Ledger) -> int:
    return sum(1 for a in ledger.attempts if a.outcome in ("replayed", "in_flight", "error"))


def _messages(
    ledger: Ledger, ref: Reference | None
) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """Deliveries of one logical message beyond what the reference had (or beyond one)."""
    got: dict[str, list[Delivery]] = {}
    for d in ledger.deliveries:
        got.setdefault(message_label(d.body), []).append(d)
    want: dict[str, list[str]] = {}
    for body in ref.messages if ref else ():
        want.setdefault(message_label(body), []).append(canonical_json(body))
    dup, missing, different = [], [], []
    for label in sorted(got.keys() | want.keys()):
        g, w = got.get(label, []), want.get(label, [])
        expected = len(w) if ref else 1
        if len(g) > expected and (ref is None or w):
            # The end of a key tells keys apart (they all start with the run id).
            keys = ", ".join(d.key if len(d.key) <= 24 else "…" + d.key[-14:] for d in g[:4]) + (
                ", …" if len(g) > 4 else ""
            )
            dup.append(
                Finding(
                    "message",
                    label,
                    f"delivered {len(g)} times (keys {keys})"
                    + (f"; the reference {expected}" if expected != 1 else ""),
                )
            )
        elif ref is not None and len(g) > expected:
            different.append(
                Finding("message", label, "delivered, but the reference sent no such message")
            )
        elif ref is not None and len(g) < expected:
            missing.append(
                Finding(
                    "message",
                    label,
                    "never delivered" if not g else f"delivered {len(g)} of {expected} times",
                )
            )
        elif ref is not None and sorted(canonical_json(d.body) for d in g) != sorted(w):
            different.append(Finding("message", label, "body differs from the reference's"))
    for a in ledger.attempts:
        if a.outcome == "conflict":
            different.append(
                Finding("message", f"key {a.key}", "sent again with a different body (422)")
            )
    return dup, missing, different


def judge(ev: Evidence) -> Verdict:
    """Apply the PASS rules to the evidence. Pure: no I/O.

    A check is ``False`` only on evidence that cannot change later (a duplicate delivery, a post
    recorded as sent that the outbox never got, a committed step run again, a budget overrun);
    checks that compare what may still be in motion wait for the run to end (``None`` until
    then), so a live verdict never shows a FAIL it takes back.
    """
    s, ref, ledger, kills, acct = ev.status, ev.reference, ev.ledger, ev.kills, ev.account
    terminal = s["status"] in TERMINAL
    dup: list[Finding] = []
    missing: list[Finding] = []
    different: list[Finding] = []
    if ledger is not None:
        dup, late_missing, late_different = _messages(ledger, ref)
        if terminal:  # before the end, "missing" only means "not sent yet"
            missing, different = late_missing, late_different
    if ref is not None and ev.outputs is not None:
        diff = compare(ref.outputs, ev.outputs)
        dup, missing, different = (
            dup + diff.duplicates,
            missing + diff.missing,
            different + diff.different,
        )
    pending = "not checked: the run is still going"
    src = ev.ledger_source
    checks = [
        Check(
            "terminal state",
            True if terminal else None,
            f"the run ended {s['status']}" + (f": {s['reason']}" if s["reason"] else "")
            if terminal
            else pending,
        )
    ]
    if (
        ref is not None
    ):  # kills must not change how a run ends; on its own, an outcome is no verdict
        checks.append(
            Check(
                "outcome as the uninterrupted reference's",
                s["status"] == ref.status if terminal else None,
                f"{s['status']}, the reference {ref.status}" if terminal else pending,
                "log, reference run",
            )
        )
    if ledger is not None or ev.outputs is not None:
        sources = ", ".join(
            x for x in (src if ledger is not None else "", "workdir" if ev.outputs else "") if x
        )
        checks.append(
            Check(
                "no duplicate effects",
                not dup,
                f"{len(dup)} duplicated, e.g. {dup[0]}"
                if dup
                else "nothing delivered, written or inserted twice",
                sources,
            )
        )
    elif ev.posts:
        checks.append(
            Check(
                "no duplicate effects",
                None,
                f"not checked: the run posted {ev.posts} message(s) but "
                + (ev.ledger_problem or "no outbox ledger was given"),
                src,
            )
        )
    else:
        checks.append(
            Check(
                "no duplicate effects",
                True,
                "the run posted no messages; its file and row effects are written under stable "
                "names and keys",
                "log",
            )
        )
    if ref is None and ledger is not None and ev.completed_posts:
        lost = sorted(ev.completed_posts - {d.key for d in ledger.deliveries})
        checks.append(
            Check(
                "every sent message delivered",
                not lost,
                f"{len(lost)} post(s) the log records as sent are not in the outbox, e.g. {lost[0]}"
                if lost
                else f"all {len(ev.completed_posts)} posts the log records are delivered",
                f"log, {src}",
            )
        )
        missing = missing + [
            Finding("message", f"key {k}", "recorded as sent, never delivered") for k in lost
        ]
    if ref is not None:  # without a reference there is nothing to compare with: no check at all
        checks.append(
            Check(
                "nothing missing",
                not missing if ev.outputs is not None else None,
                pending
                if ev.outputs is None
                else f"{len(missing)} missing, e.g. {missing[0]}"
                if missing
                else "every message, file and row of the reference is there",
                "reference run, workdir",
            )
        )
        off = len(dup) + len(missing) + len(different)
        checks.append(
            Check(
                "outputs identical to the reference",
                not off if ev.outputs is not None else None,
                pending
                if ev.outputs is None
                else f"{len(dup)} duplicated, {len(missing)} missing, {len(different)} different"
                + (f", e.g. {different[0]}" if different else "")
                if off
                else "files byte for byte, tables row for row, message bodies",
                "reference run, workdir",
            )
        )
    checks.append(_redone_check(ev, terminal))
    checks.append(_resend_check(ev, terminal))
    over = [
        f"{name} {b['used']} > {b['limit']}"
        for name, b in s["budget"].items()
        if b.get("limit") is not None and b["used"] > b["limit"]
    ]
    checks.append(
        Check("budgets not exceeded", not over, "; ".join(over) or "every budget within its limit")
    )
    if ev.lease_refusals is not None:
        checks.append(
            Check(
                "relaunch resumes at once",
                ev.lease_refusals == 0,
                f"{ev.lease_refusals} relaunch(es) refused with exit 75: the dead engine's lease "
                "was not seen as vacant"
                if ev.lease_refusals
                else "no relaunch was refused (exit 75)",
            )
        )
    pointed = [k for k in kills if k.point is not None]
    if pointed:
        unproved = [k.point or "" for k in pointed if not k.proved]
        checks.append(
            Check(
                "crash points reached",
                not unproved,
                "not reached: " + ", ".join(unproved)
                if unproved
                else ", ".join(k.point or "" for k in pointed) + " reached (the engine said so)",
            )
        )
    failed = any(c.ok is False for c in checks)
    return Verdict(
        run_id=s["run_id"],
        status=s["status"],
        reason=s["reason"],
        passed=(not failed) if terminal else None,
        checks=checks,
        kills=kills,
        duplicates=dup,
        missing=missing,
        different=different,
        steps_committed=s["steps_committed"],
        step_executions=s["step_executions"],
        redone_steps=acct.redone,
        incarnations=s["incarnations"],
        deliveries=len(ledger.deliveries) if ledger else None,
        attempts=len(ledger.attempts) if ledger else None,
        budget=s["budget"],
        engine=s.get("engine", "none"),
        waiting_for=s.get("waiting_for"),
        account=acct,
    )


REDONE_CHECK = "at most one redone step per kill"


def _redone_check(ev: Evidence, terminal: bool) -> Check:
    """Work repeated because of kills, and only because of them: each kill may redo the steps it
    interrupted (one for a sequential agent), and no step runs again once it has committed."""
    kills, acct = ev.kills, ev.account
    faulty = acct.faulty()
    if faulty:
        r = faulty[0]
        why = (
            "after it had committed (its checkpoint was not honoured)"
            if r.cause == "committed"
            else "in the same engine with no failure before it"
        )
        return Check(
            REDONE_CHECK,
            False,
            f"{len(faulty)} step execution(s) repeated without a cause, e.g. step {r.seq} "
            f"{r.name!r} ran again {why}",
        )
    if not kills:
        return Check(
            REDONE_CHECK,
            None,
            "not checked: the run was never killed, so nothing was redone" + _others(acct),
        )
    if not ev.status["step_executions"] and terminal:
        # Nothing checkpointed (a naive agent): work redone after a kill is invisible to the log,
        # and "0 redone" would be a tick for the worst case.
        return Check(
            REDONE_CHECK,
            None,
            "not checked: the run records no steps, so the work it redid after each kill cannot "
            "be counted (the outputs show it)",
        )
    overdone = [
        k for k in kills if k.redone > k.may_redo
    ]  # parallel steps: each kill may cost its steps in flight
    worst = max((k.redone for k in kills), default=0)
    parallel = max((k.in_flight for k in kills), default=0) > 1
    return Check(
        REDONE_CHECK,
        not overdone,
        f"{acct.redone} step(s) redone after {len(kills)} kill(s); at most {worst} for one kill"
        + (
            " (parallel steps: each kill may redo the steps it interrupted, "
            f"up to {max(k.in_flight for k in kills)} at once)"
            if parallel
            else ""
        )
        + _others(acct),
    )


def _others(acct: Account) -> str:
    n = acct.count("retry") + acct.count("stop") + acct.count("wait")
    return (
        f"; {n} step execution(s) repeated after errors, stops or waits are not redone work"
        if n
        else ""
    )


def _resend_check(ev: Evidence, terminal: bool) -> Check:
    """Every request the outbox saw for this run is one the log records sending (each send is an
    ``effect_started`` first), under the key it recorded: nothing sent behind the log's back."""
    name, src, ledger = "every re-send recorded, under its own key", ev.ledger_source, ev.ledger
    if ledger is None:
        if not ev.posts:
            return Check(name, True, "the run posted no messages", "log")
        return Check(
            name, None, "not checked: " + (ev.ledger_problem or "no outbox ledger was given"), src
        )
    if (
        not terminal
    ):  # the log was read before the outbox: a send may be in the outbox and not in our read
        return Check(name, None, "not checked: the run is still going", src)
    seen: dict[str, int] = {}
    for a in ledger.attempts:
        if a.key is not None:
            seen[a.key] = seen.get(a.key, 0) + 1
    unrecorded = {k: n for k, n in seen.items() if n > ev.account.resends.get(k, 0)}
    if unrecorded:
        k, n = next(iter(sorted(unrecorded.items())))
        return Check(
            name,
            False,
            f"the outbox saw {len(unrecorded)} key(s) sent more often than the log records, e.g. "
            f"{k}: {n} request(s), {ev.account.resends.get(k, 0)} recorded",
            f"log, {src}",
        )
    resends = sum(n - 1 for n in seen.values())
    causes = ev.account.resend_causes
    words = {"kill": "kills", "retry": "errors", "stop": "stops or cancels", "wait": "waits"}
    why = ", ".join(f"{n} after {words.get(c, c)}" for c, n in sorted(causes.items()))
    return Check(
        name,
        True,
        f"{len(ledger.attempts)} attempts for {len(ledger.deliveries)} deliveries: {resends} "
        f"re-sent with the same key" + (f" ({why})" if resends and why else ""),
        f"log, {src}",
    )
