"""Big logs, fast: the rows a real engine writes for a run of no-op steps, without running one.

A real ``steplog run`` of the ``noop`` test agent commits a few thousand steps a second; a
million-step log for the monitor's benchmarks would take minutes. ``write_log`` writes the same
rows in one transaction (a million steps in about ten seconds): the ``run`` row, the ``event``
rows and the ``step`` rows, as the engine's journal writes them today (one ``step_committed``
per plain step carrying its name, kind and ``started``; a kill between steps costs the next step
a lost execution and one recovery). ``tests/helpers/test_synthetic_log.py`` holds it to a real
run's log, column by column, kills included.

``rows`` is the one description of such a run; ``synthetic_events`` (``helpers.logs``) reads
its events as the monitor would fold them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from steplog.log.journal import dumps

STEP_S = 0.0002
"""How long each synthetic step runs (seconds)."""
GAP_S = 0.00005
"""Between one step's commit and the next one's start."""
RESUME_S = 0.4
"""From a kill to the next engine's lease."""


@dataclass
class SyntheticRun:
    """A run of ``steps`` no-op steps ``s0``, ``s1``..., killed after each step in ``kills``
    (SIGKILLed inside the next step, its start unwritten, as a real kill of ``noop`` lands),
    finished (``succeeded``) or left as the last engine died holding it (``finished=False``:
    a relaunch resumes it)."""

    run_id: str
    steps: int
    kills: Sequence[int] = ()
    finished: bool = True
    agent: str = "synthetic"
    params: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    workdir: str | None = None
    t0: float = 1_700_000_000.0
    host: str = "synthetic-host"
    boot: str = "synthetic-boot"
    pids: Sequence[int] = ()
    """The engines' pids, one per incarnation (default 1001, 1002, ...)."""

    def pid(self, incarnation: int) -> int:
        return self.pids[incarnation - 1] if self.pids else 1000 + incarnation


@dataclass
class Rows:
    run: dict[str, Any]
    events: Iterator[tuple[Any, ...]]
    """(run_id, ts, incarnation, kind, seq, data) in id order."""
    steps: Iterator[tuple[Any, ...]]
    """(run_id, seq, name, kind, status, phase, result, attempts, recoveries, started_at,
    finished_at, incarnation)."""


STEP_COLUMNS = (
    "run_id, seq, name, kind, status, phase, result, attempts, recoveries, started_at, "
    "finished_at, incarnation"
)


def _timeline(r: SyntheticRun) -> Iterator[tuple[int, float, float, int, int, int]]:
    """Per step: (seq, started, committed, incarnation, recoveries, executions so far); a kill
    after step s moves the next step on by ``RESUME_S`` in the next incarnation."""
    kills = sorted(set(r.kills))
    inc, executions, k = 1, 0, 0
    for seq in range(1, r.steps + 1):
        recoveries = 0
        while k < len(kills) and kills[k] == seq - 1:
            inc, k, recoveries = inc + 1, k + 1, recoveries + 1
        executions += 1 + recoveries
        # From t0 each time, not summed step by step: at 1.7e9 s a float's step is 2.4e-7 s,
        # and a million additions would drift by tenths of a second, out of order.
        t = r.t0 + (0.004 + (seq - 1) * (STEP_S + GAP_S) + (inc - 1) * RESUME_S)
        yield seq, t, t + STEP_S, inc, recoveries, executions


def _seconds(r: SyntheticRun, t: float, inc: int) -> float:
    """Active seconds: wall time less the pauses between a kill and its relaunch."""
    return round(t - r.t0 - (inc - 1) * RESUME_S, 3)


def rows(r: SyntheticRun) -> Rows:
    """The run's rows, streamed (a million steps never sit in memory as a list)."""
    kills = sorted(set(r.kills))
    incarnations = 1 + len(kills)
    end = r.t0 + 0.004 + r.steps * (STEP_S + GAP_S) + len(kills) * RESUME_S
    executions = r.steps + len(kills) if r.steps else 0
    seconds = _seconds(r, end, incarnations)
    budget = {
        "cost_usd": None,
        "recoveries": 20,
        "retries": 20,
        "seconds": None,
        "steps": r.max_steps,
        "tokens": None,
    }
    run = {
        "id": r.run_id,
        "agent": r.agent,
        "model": None,
        "params": dumps(r.params),
        "status": "succeeded" if r.finished else "running",
        "reason": None,
        "result": dumps(r.steps) if r.finished else None,
        "workdir": r.workdir,
        "outbox": None,
        "limit_steps": r.max_steps,
        "limit_recoveries": 20,
        "limit_retries": 20,
        "used_steps": r.steps,
        "used_seconds": seconds,
        "step_executions": executions,
        "incarnation": incarnations,
        "lease_pid": None if r.finished else r.pid(incarnations),
        "lease_host": r.host,
        "lease_boot": r.boot,
        "lease_proc_start": end - RESUME_S if kills else r.t0 - 0.3,  # the last engine's start
        "lease_expires": None if r.finished else end + 15.0,
        "lease_expires_boot": 1.0,  # seconds since boot: meaningless on another boot
        "created_at": r.t0,
        "updated_at": end,
        "finished_at": end if r.finished else None,
    }

    def events() -> Iterator[tuple[Any, ...]]:
        rid = r.run_id
        yield (
            rid,
            r.t0,
            0,
            "run_created",
            None,
            dumps({"agent": r.agent, "budget": budget, "model": "offline", "params": r.params}),
        )
        yield rid, r.t0, 1, "lease_acquired", None, _lease(r, 1, None)
        inc = 1
        for seq, started, committed, step_inc, recoveries, done in _timeline(r):
            if step_inc != inc:
                inc = step_inc
                killed_at = started - RESUME_S + 0.0001
                yield rid, started - 0.001, inc, "lease_acquired", None, _lease(r, inc, killed_at)
            data: dict[str, Any] = {
                "kind": "call",
                "name": f"s{seq - 1}",
                "started": started,
                "usage": {"executions": done, "seconds": _seconds(r, committed, inc), "steps": seq},
            }
            if recoveries:
                data["recoveries"] = recoveries
            yield rid, committed, inc, "step_committed", seq, dumps(data)
        if r.finished:
            usage = {
                "cost_usd": 0.0,
                "executions": executions,
                "retries": 0,
                "seconds": seconds,
                "steps": r.steps,
                "tokens": 0,
                "tokens_estimated": 0,
            }
            yield (
                rid,
                end,
                incarnations,
                "run_finished",
                None,
                dumps({"reason": None, "status": "succeeded", "usage": usage}),
            )

    def steps() -> Iterator[tuple[Any, ...]]:
        for seq, started, committed, inc, recoveries, _done in _timeline(r):
            yield (
                r.run_id,
                seq,
                f"s{seq - 1}",
                "call",
                "committed",
                "recorded",
                dumps(seq - 1),
                1,
                recoveries,
                started,
                committed,
                inc,
            )

    return Rows(run, events(), steps())


def _lease(r: SyntheticRun, inc: int, killed_at: float | None) -> str:
    data: dict[str, Any] = {
        "forfeited_tokens": 0,
        "host": r.host,
        "pid": r.pid(inc),
        "previous_pid": None if inc == 1 else r.pid(inc - 1),
        "resumed": inc > 1,
        "takeover": None if inc == 1 else f"holder pid {r.pid(inc - 1)} is dead",
    }
    if killed_at is not None:
        data["killed_at"] = killed_at
    return dumps(data)


def write_log(db: Path, run: SyntheticRun) -> None:
    """Add ``run`` to the log file ``db`` (made if needed, by the engine's own ``open_log``)."""
    from steplog.log.db import open_log

    open_log(db, synchronous="NORMAL").close()
    if run.workdir is None:  # the engine's default: a folder per run beside the log
        run = replace(run, workdir=str(db.resolve().parent / "runs" / run.run_id))
    r = rows(run)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        names = ", ".join(r.run)
        conn.execute(
            f"INSERT INTO run ({names}) VALUES ({', '.join('?' * len(r.run))})",
            tuple(r.run.values()),
        )
        conn.executemany(
            "INSERT INTO event (run_id, ts, incarnation, kind, seq, data)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            r.events,
        )
        conn.executemany(
            f"INSERT INTO step ({STEP_COLUMNS}) VALUES ({', '.join('?' * 12)})", r.steps
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
