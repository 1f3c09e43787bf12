"""A progress trace for an agent that keeps no log of its own: what it did, never read to resume.

The ``naive`` agent checkpoints nothing, so the steplog log cannot show its work; yet the monitor's
compare mode must draw it beside the durable agent. Like any agent's debug log, it can append a
line per action to a file: ``{"ts", "pid", "incarnation", "seq", "name", "kind", "event"}`` with
``event`` ``started`` or ``done`` (a ``done`` line adds ``tokens``, ``estimated`` and
``cost_usd``; a model call's ``started`` line adds ``reserve_tokens`` and ``reserve_cost_usd``,
the most it can cost, which a call cut short by a kill is charged, as the engine charges it).
Its sequence numbers count from 1 in every process, because a naive agent starts over: that is
exactly what the trace is there to show.

One ``os.write`` per line on a file opened ``O_APPEND``: a SIGKILL leaves whole lines behind (the
reader drops a torn last line anyway). Nothing is fsynced: this is evidence for a person watching,
not a checkpoint. Writer and reader live here, so the format is defined once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACE_FILE = "trace.jsonl"
"""Where the naive agent writes its trace, under its workdir (``--param trace=true``)."""


@dataclass(frozen=True)
class TraceRecord:
    ts: float
    pid: int
    incarnation: int
    """The engine incarnation that ran the agent (one per process)."""
    seq: int
    name: str
    kind: str
    event: str
    """``started`` or ``done``."""
    tokens: int = 0
    estimated: bool = False
    cost_usd: float = 0.0
    reserve_tokens: int = 0
    """On a model call's ``started`` line: the most it can cost (the model's ``estimate``)."""
    reserve_cost_usd: float = 0.0


@dataclass
class Step:
    """One traced action in progress; set ``tokens``/``estimated``/``cost_usd`` before it ends."""

    tokens: int = 0
    estimated: bool = False
    cost_usd: float = 0.0


class Trace:
    """Numbers an agent's actions 1, 2, 3… in call order and appends them to ``path`` (if any)."""

    def __init__(self, path: Path | None, *, incarnation: int) -> None:
        self._fd = (
            os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            if path is not None
            else None
        )
        self._incarnation = incarnation
        self._pid = os.getpid()
        self._seq = 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @contextmanager
    def step(
        self, name: str, kind: str, *, reserve_tokens: int = 0, reserve_cost_usd: float = 0.0
    ) -> Iterator[Step]:
        """Trace one action: ``started`` now, ``done`` if the body returns (nothing if it raises
        or the process dies: an unfinished action has no ``done`` line). A model call gives its
        ``reserve_*``: what it is charged if a kill cuts it short."""
        self._seq += 1
        seq = self._seq
        reserve = (
            {"reserve_tokens": reserve_tokens, "reserve_cost_usd": reserve_cost_usd}
            if reserve_tokens
            else {}
        )
        self._write(seq, name, kind, "started", **reserve)
        step = Step()
        yield step
        self._write(
            seq,
            name,
            kind,
            "done",
            tokens=step.tokens,
            estimated=step.estimated,
            cost_usd=step.cost_usd,
        )

    def _write(self, seq: int, name: str, kind: str, event: str, **extra: Any) -> None:
        if self._fd is None:
            return
        line = {
            "ts": time.time(),
            "pid": self._pid,
            "incarnation": self._incarnation,
            "seq": seq,
            "name": name,
            "kind": kind,
            "event": event,
            **extra,
        }
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode("utf-8"))


def read_trace(path: Path) -> list[TraceRecord]:
    """Every whole line of the trace at ``path``, in file order; ``[]`` if there is none yet."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out: list[TraceRecord] = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
            out.append(
                TraceRecord(
                    ts=float(d["ts"]),
                    pid=int(d["pid"]),
                    incarnation=int(d["incarnation"]),
                    seq=int(d["seq"]),
                    name=str(d["name"]),
                    kind=str(d["kind"]),
                    event=str(d["event"]),
                    tokens=int(d.get("tokens", 0)),
                    estimated=bool(d.get("estimated", False)),
                    cost_usd=float(d.get("cost_usd", 0.0)),
                    reserve_tokens=int(d.get("reserve_tokens", 0)),
                    reserve_cost_usd=float(d.get("reserve_cost_usd", 0.0)),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a kill mid-write, or not ours
    return out


@dataclass(frozen=True)
class TraceSummary:
    """What a trace says the agent spent, kills included."""

    executions: int
    """Actions started, over every process."""
    steps: int
    """Distinct actions (by sequence number) ever started."""
    done: int
    """Distinct actions the latest process finished (its progress)."""
    tokens: int
    estimated: bool
    cost_usd: float

    @property
    def redone(self) -> int:
        """Actions started again after a kill (executions beyond one per step, as the CONTRACT
        counts ``step_executions - steps_committed`` for a durable run)."""
        return self.executions - self.steps


def cut_short(records: list[TraceRecord]) -> list[TraceRecord]:
    """The ``started`` lines of model calls that never finished because their process died (a
    later process ran): each is charged its reservation, as the engine charges a durable run's
    call cut short by a kill (it cannot know whether the provider billed it)."""
    last = max((r.incarnation for r in records), default=0)
    finished = {(r.incarnation, r.seq) for r in records if r.event == "done"}
    return [
        r
        for r in records
        if r.event == "started"
        and r.reserve_tokens
        and r.incarnation < last
        and (r.incarnation, r.seq) not in finished
    ]


def summarize(records: list[TraceRecord]) -> TraceSummary:
    started = [r for r in records if r.event == "started"]
    done = [r for r in records if r.event == "done"]
    forfeited = cut_short(records)
    last = max((r.incarnation for r in records), default=0)
    return TraceSummary(
        executions=len(started),
        steps=len({r.seq for r in started}),
        done=len({r.seq for r in done if r.incarnation == last}),
        tokens=sum(r.tokens for r in done) + sum(r.reserve_tokens for r in forfeited),
        estimated=any(r.estimated for r in done) or bool(forfeited),
        cost_usd=sum(r.cost_usd for r in done) + sum(r.reserve_cost_usd for r in forfeited),
    )
