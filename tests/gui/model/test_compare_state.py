"""Compare mode's two runs on one clock (Qt-free): the naive lane from its log events and its
trace."""

from __future__ import annotations

import math

from steplog.agents.trace import TraceRecord
from steplog.log.logread import Event
from steplog_gui.compare.lane import restarts
from steplog_gui.model.compare_state import compare
from steplog_gui.model.run_state import COMMITTED, REDONE, RUNNING


def log(run_id: str, created: float, kills: list[float], end: float | None) -> list[Event]:
    """A run's own log events: created, a lease per engine (after a kill: taken from the dead
    one)."""
    events = [
        Event(1, run_id, created, 0, "run_created", None, {"agent": run_id, "budget": {}}),
        Event(
            2, run_id, created + 0.1, 1, "lease_acquired", None, {"pid": 11, "previous_pid": None}
        ),
    ]
    for i, at in enumerate(kills, start=2):
        events.append(
            Event(
                len(events) + 1,
                run_id,
                at + 0.2,
                i,
                "lease_acquired",
                None,
                {"pid": 10 + i, "previous_pid": 9 + i, "killed_at": at},
            )
        )
    if end is not None:
        events.append(
            Event(
                len(events) + 1,
                run_id,
                end,
                len(kills) + 1,
                "run_finished",
                None,
                {"status": "succeeded", "usage": {"steps": 0, "tokens": 0}},
            )
        )
    return events


def traced(incarnation: int, t: float, steps: int, *, killed: bool) -> list[TraceRecord]:
    """One naive process: steps 1..``steps`` done a second apart, then one started and cut short."""
    out = []
    for seq in range(1, steps + 1):
        kind = "chat" if seq % 2 == 0 else "call"
        out.append(
            TraceRecord(t, 1000 + incarnation, incarnation, seq, f"step {seq}", kind, "started")
        )
        t += 1.0
        out.append(
            TraceRecord(
                t,
                1000 + incarnation,
                incarnation,
                seq,
                f"step {seq}",
                kind,
                "done",
                tokens=100 if kind == "chat" else 0,
                estimated=True,
            )
        )
    if killed:
        out.append(
            TraceRecord(
                t,
                1000 + incarnation,
                incarnation,
                steps + 1,
                f"step {steps + 1}",
                "call",
                "started",
            )
        )
    return out


def test_the_naive_lane_starts_over_and_everything_before_the_kill_is_drawn_as_lost() -> None:
    trace = traced(1, 100.5, 3, killed=True) + traced(2, 104.0, 5, killed=False)
    result = compare("n", log("n", 100.0, [103.6], 109.5), trace, "d", log("d", 99.0, [], None))
    naive = result.naive
    ex = naive.executions
    lane1, lane2 = ex["lane"] == 1, ex["lane"] == 2
    assert list(ex["seq"][lane1]) == [1, 2, 3, 4] and list(ex["seq"][lane2]) == [1, 2, 3, 4, 5]
    assert set(ex["outcome"][lane1]) == {REDONE}  # done, then done again: the kill lost it all
    assert ex["end"][lane1][-1] == 103.6  # the step cut short ends at the kill
    assert set(ex["outcome"][lane2]) == {COMMITTED}
    assert restarts(naive) == [(104.0, 2, 1)]
    assert result.trace.redone == 4 and result.trace.tokens == 300  # steps 1-4 again; 1 + 2 chats
    # Both lanes count from the earlier creation: x = 0 is one moment for both.
    assert naive.created == result.durable.created == 99.0 and result.naive_created == 100.0


def test_steps_kept_drop_to_zero_at_a_kill_while_tokens_spent_keep_adding_up() -> None:
    trace = traced(1, 100.5, 4, killed=True) + traced(2, 106.0, 2, killed=False)
    naive = compare(
        "n", log("n", 100.0, [105.0], None), trace, "d", log("d", 100.0, [], None)
    ).naive
    s = naive.usage_series
    kill = list(s["ts"]).index(105.0)
    assert s["steps"][kill - 1] == 4 and s["steps"][kill] == 0 and s["steps"][-1] == 2
    assert list(s["tokens"]) == sorted(s["tokens"]) and s["tokens"][-1] == 300
    assert s["tokens"][kill] == s["tokens"][kill - 1]  # a kill spends nothing, and refunds nothing
    assert naive.usage["steps"] == 2 and naive.usage["tokens"] == 300
    # The running process's step in progress is drawn as running (it grows with the clock).
    trace.append(TraceRecord(110.0, 1002, 2, 3, "step 3", "chat", "started"))
    naive = compare(
        "n", log("n", 100.0, [105.0], None), trace, "d", log("d", 100.0, [], None)
    ).naive
    assert naive.executions["outcome"][-1] == RUNNING and math.isnan(naive.executions["end"][-1])


def test_a_model_call_cut_short_by_a_kill_is_charged_its_reservation_on_both_sides() -> None:
    """The engine charges a durable run's call cut short by a kill the most it could cost (the
    provider may have billed it); the naive side's trace gives each call's reservation, and a call
    its process never finished is charged the same, at the kill."""
    trace = traced(1, 100.5, 2, killed=False)
    trace.append(
        TraceRecord(
            102.6,
            1001,
            1,
            3,
            "step 3",
            "chat",
            "started",
            reserve_tokens=700,
            reserve_cost_usd=0.01,
        )
    )
    trace += traced(2, 106.0, 4, killed=False)
    trace.append(
        TraceRecord(110.5, 1002, 2, 5, "step 5", "chat", "started", reserve_tokens=700)
    )  # in flight
    result = compare("n", log("n", 100.0, [105.0], None), trace, "d", log("d", 100.0, [], None))
    s = result.naive.usage_series
    kill = list(s["ts"]).index(105.0)
    assert (
        s["tokens"][kill - 1] == 100
        and s["tokens"][kill] == 800
        and s["tokens_estimated"][kill] == 800
    )
    assert s["cost_usd"][kill] == 0.01
    assert s["tokens"][-1] == 800 + 200  # the call still running is not charged yet
    assert result.trace.tokens == 1000 and result.naive.usage["tokens"] == 1000
