"""The verdict strip's input and the one PASS/FAIL decision; Qt-free.

DESIGN.md "The verdict": one implementation, two faces. The kill test's judge will live in the
engine as ``steplog.verdict``; until it lands, ``judge`` below is the only place the monitor
decides PASS or FAIL, with the kill test's rules (tests/engine/test_kills.py): the run
succeeded, the outside world received no message twice, and each kill cost at most one redone
step. When ``steplog.verdict`` exists, ``judge`` becomes a call to it and nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .run_state import RunState

Decision = Literal["PASS", "FAIL", "RUNNING"]


@dataclass(frozen=True)
class OutboxCounts:
    """What the outbox's own ledger says (``steplog.outbox.Ledger``), never the engine's word."""

    deliveries: int
    attempts: int
    replayed: int
    """Repeated attempts the outbox deduplicated (same key, same body: 200, nothing delivered)."""
    duplicates: int
    """Deliveries in ``Ledger.duplicates()`` groups beyond the first of each: real duplicates."""

    @classmethod
    def from_ledger(cls, ledger: object) -> OutboxCounts:
        deliveries = getattr(ledger, "deliveries", ())
        attempts = getattr(ledger, "attempts", ())
        groups = ledger.duplicates()  # type: ignore[attr-defined]
        return cls(deliveries=len(deliveries), attempts=len(attempts),
                   replayed=sum(1 for a in attempts if a.outcome == "replayed"),
                   duplicates=sum(len(g) - 1 for g in groups))


@dataclass(frozen=True)
class VerdictInput:
    run_id: str
    status: str
    """The run's status: running, succeeded, gave_up or failed."""
    reason: str | None
    kills: int
    kill_times: tuple[float, ...]
    resume_latencies: tuple[float, ...]
    """Kill -> first step committed by the next engine, seconds, oldest first."""
    steps_committed: int
    step_executions: int
    steps_redone: int
    outbox: OutboxCounts | None
    """``None`` when the run has no outbox (or it could not be read yet)."""

    @classmethod
    def gather(cls, run: RunState, outbox: OutboxCounts | None) -> VerdictInput:
        latencies = tuple(k.latency for k in run.kills if k.latency is not None)
        return cls(run_id=run.run_id, status=run.status, reason=run.reason, kills=len(run.kills),
                   kill_times=tuple(k.ts for k in run.kills), resume_latencies=latencies,
                   steps_committed=run.steps_committed, step_executions=run.step_executions,
                   steps_redone=run.redone, outbox=outbox)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: tuple[str, ...]
    """Why it failed (empty on PASS and while running)."""


def judge(v: VerdictInput) -> Verdict:
    """PASS/FAIL once the run is over; RUNNING before. The only place this is decided."""
    reasons: list[str] = []
    if v.outbox is not None and v.outbox.duplicates:
        reasons.append(f"{v.outbox.duplicates} message(s) delivered twice")
    if v.steps_redone > v.kills:
        reasons.append(f"{v.steps_redone} steps redone after {v.kills} kill(s) (at most one per kill)")
    if v.status == "running":
        return Verdict("FAIL" if v.outbox is not None and v.outbox.duplicates else "RUNNING", tuple(reasons))
    if v.status != "succeeded":
        reasons.append(f"the run ended {v.status}" + (f": {v.reason}" if v.reason else ""))
    return Verdict("FAIL" if reasons else "PASS", tuple(reasons))
