"""Compare mode's two runs as ``RunState``s on one clock; Qt-free.

The durable run is folded from its log events exactly as the monitor folds any run. The naive run
has log events too (the engine that runs it records its creation, every lease taken after a kill
and its end), but no steps: it checkpoints nothing. Its steps come from its own trace
(``steplog.agents.trace``), which records what it did. So its bars are what it *did*, and after a
kill they start again at step 1 in the next lane. An execution whose step ran again later is drawn
as redone: its work was lost to the kill. Its usage series is what it spent (tokens and cost add up
over every process, since a restarted agent pays again) against what it kept (steps done by the
current process, back to 0 at each kill).

Both states are rebuilt from scratch on every change (the two runs hold a few thousand events at
most); ``created`` of both is the earlier of the two creations, so x = 0 is the same moment in
both lanes and the charts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from steplog.agents.trace import TraceRecord, TraceSummary, summarize
from steplog.log.logread import Event
from steplog_gui.model.run_state import COMMITTED, REDONE, RUNNING, RunState


@dataclass
class ComparedRuns:
    naive: RunState
    durable: RunState
    trace: TraceSummary
    origin: float
    """Unix time both lanes count from: the earlier of the two runs' creation."""
    naive_created: float
    durable_created: float
    """The runs' own creation times (``created`` of both states is ``origin``)."""


def spent(run: RunState, column: str) -> float:
    """What ``run`` had used of ``column`` (``tokens``, ``tokens_estimated``, ``cost_usd``,
    ``steps``) at its usage series' last point: the one number the figures table and the charts'
    titles show. Not ``run.usage``: a step's start carries its model call's reservation, which
    is not spent (yet), and the naive run's trace summary charges a call cut short by a kill
    only once the next process runs, where its series charges it at the kill."""
    series = run.usage_series
    return float(series[column][-1]) if len(series) else 0.0


def fold(run_id: str, events: Sequence[Event]) -> RunState:
    """A run's state from its log events, as the monitor's ``LogState`` folds them."""
    run = RunState(run_id)
    for ev in events:
        run.apply(ev)
    return run


def naive_state(run_id: str, events: Sequence[Event], trace: Sequence[TraceRecord]) -> RunState:
    """The naive run: leases, kills and status from the log; step executions and usage from its
    trace."""
    run = fold(run_id, events)
    run.usage_series = RunState(run_id).usage_series  # the log's usage of a naive run is all zeros
    kill_time = {k.killed_incarnation: k.ts for k in run.kills}
    last_inc = max((r.incarnation for r in trace), default=0)
    started: dict[tuple[int, int], TraceRecord] = {}
    done: dict[tuple[int, int], TraceRecord] = {}
    for r in trace:
        (started if r.event == "started" else done)[(r.incarnation, r.seq)] = r
    latest: dict[int, int] = {}  # seq -> the last incarnation that started it
    for inc, seq in started:
        latest[seq] = max(inc, latest.get(seq, 0))
    ran_later = {(inc, seq) for (inc, seq) in started if latest[seq] > inc}
    ex = run.executions
    for key in sorted(started, key=lambda k: started[k].ts):
        s, d = started[key], done.get(key)
        run.step_names[s.seq] = (s.name, s.kind)
        if d is not None:
            end, outcome = d.ts, REDONE if key in ran_later else COMMITTED
        elif s.incarnation in kill_time or s.incarnation < last_inc:
            end, outcome = kill_time.get(s.incarnation, s.ts), REDONE  # cut short by the kill
        elif run.terminal:
            end, outcome = run.finished or s.ts, REDONE
        else:
            end, outcome = math.nan, RUNNING
        ex.append(
            start=s.ts,
            end=end,
            lane=s.incarnation,
            outcome=outcome,
            seq=s.seq,
            phase=2 if d is not None else 0,
            tokens=d.tokens if d is not None else 0,
            estimated=bool(d.estimated) if d is not None else False,
        )
    _naive_usage(run, trace)
    return run


def _naive_usage(run: RunState, trace: Sequence[TraceRecord]) -> None:
    """Usage points: spent (tokens, cost, active seconds over every process) and kept (steps)."""
    kills = sorted((k.ts, k.killed_incarnation) for k in run.kills)
    first_ts: dict[int, float] = {}
    last_ts: dict[int, float] = {}
    kept: dict[int, set[int]] = {}
    tokens = estimated = 0
    cost = 0.0
    series = run.usage_series

    def seconds_until(ts: float) -> float:
        return sum(min(last_ts[i], ts) - first_ts[i] for i in first_ts)

    # Model calls in flight: one cut short by a kill is charged its reservation at the kill, as
    # the engine charges the durable run's (``cut_short``), so both sides count alike.
    calls: dict[tuple[int, int], TraceRecord] = {}

    def forfeit(before: int) -> None:
        nonlocal tokens, estimated, cost
        for key in [k for k in calls if k[0] < before]:
            r = calls.pop(key)
            tokens += r.reserve_tokens
            estimated += r.reserve_tokens
            cost += r.reserve_cost_usd

    pending = list(kills)
    for r in sorted(trace, key=lambda r: r.ts):
        while pending and pending[0][0] <= r.ts:  # a kill: the steps kept drop to 0
            at, inc = pending.pop(0)
            forfeit(inc + 1)
            series.append(
                ts=at,
                steps=0,
                tokens=tokens,
                tokens_estimated=estimated,
                cost_usd=cost,
                seconds=seconds_until(at),
            )
        forfeit(r.incarnation)  # a death the log has no kill for: charged once a later process runs
        first_ts.setdefault(r.incarnation, r.ts)
        last_ts[r.incarnation] = r.ts
        if r.event != "done":
            if r.reserve_tokens:
                calls[(r.incarnation, r.seq)] = r
            continue
        calls.pop((r.incarnation, r.seq), None)
        kept.setdefault(r.incarnation, set()).add(r.seq)
        tokens += r.tokens
        estimated += r.tokens if r.estimated else 0
        cost += r.cost_usd
        series.append(
            ts=r.ts,
            steps=len(kept[r.incarnation]),
            tokens=tokens,
            tokens_estimated=estimated,
            cost_usd=cost,
            seconds=seconds_until(r.ts),
        )
    current = max(kept, default=0)
    run.usage = {
        "steps": len(kept.get(current, ())),
        "executions": sum(1 for r in trace if r.event == "started"),
        "tokens": tokens,
        "tokens_estimated": estimated,
        "cost_usd": cost,
    }


def compare(
    naive_id: str,
    naive_events: Sequence[Event],
    trace: Sequence[TraceRecord],
    durable_id: str,
    durable_events: Sequence[Event],
) -> ComparedRuns:
    naive = naive_state(naive_id, naive_events, trace)
    durable = fold(durable_id, durable_events)
    created = [c for c in (naive.created, durable.created) if math.isfinite(c)]
    origin = min(created) if created else math.nan
    result = ComparedRuns(
        naive=naive,
        durable=durable,
        trace=summarize(list(trace)),
        origin=origin,
        naive_created=naive.created,
        durable_created=durable.created,
    )
    naive.created = durable.created = origin
    return result
