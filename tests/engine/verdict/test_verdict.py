"""The verdict's rules on hand-made evidence: what passes, what fails, and what is "not checked"."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from steplog.log.logread import Event
from steplog.outbox import Attempt, Delivery, Ledger
from steplog.verdict.judge import Evidence, Kill, Reference, judge, logged_kills, message_label
from steplog.verdict.kills import Account, account
from steplog.verdict.outputs import Outputs, compare


def status(
    state: str = "succeeded",
    *,
    committed: int = 10,
    executions: int = 10,
    tokens: tuple[int, int | None] = (100, 1000),
) -> dict[str, Any]:
    return {
        "run_id": "r",
        "status": state,
        "reason": None,
        "steps_committed": committed,
        "step_executions": executions,
        "incarnations": 1,
        "budget": {
            "steps": {"used": committed, "limit": 200},
            "tokens": {"used": tokens[0], "limit": tokens[1]},
            "seconds": {"used": 1.0, "limit": None},
            "cost_usd": {"used": 0.0, "limit": 0.5},
        },
    }


def ledger(*bodies: dict[str, Any]) -> Ledger:
    deliveries = tuple(
        Delivery(id=i, key=f"k{i}", body=b, ts=float(i)) for i, b in enumerate(bodies, 1)
    )
    attempts = tuple(
        Attempt(id=i, key=f"k{i}", status=201, outcome="delivered", ts=float(i))
        for i, _ in enumerate(bodies, 1)
    )
    return Ledger(deliveries=deliveries, attempts=attempts)


def sent(ledger: Ledger) -> Account:
    """The log's record of having sent every request the ledger saw (one ``effect_started``
    each)."""
    counts: dict[str, int] = {}
    for a in ledger.attempts:
        if a.key is not None:
            counts[a.key] = counts.get(a.key, 0) + 1
    return Account(resends=counts)


def evidence(
    state: dict[str, Any],
    kills: list[Kill],
    led: Ledger | None,
    ref: Reference | None,
    out: Outputs | None,
    **more: Any,
) -> Evidence:
    return Evidence(state, kills, led, ref, out, account=sent(led) if led else Account(), **more)


def kill(redone: int = 1) -> Kill:
    return Kill(
        at=1.0,
        seq=3,
        step_name="send reply T-1",
        phase="acting",
        incarnation=1,
        resume_latency=0.3,
        redone=redone,
    )


T1, T2 = {"ticket_id": "T-1", "text": "hi"}, {"ticket_id": "T-2", "text": "yo"}
OUT = Outputs(
    files={"replies.log": b"T-1\nT-2\n", "r/T-1.md": b"one"},
    tables={"helpdesk.db tickets": Counter({'{"id": "T-1"}': 1, '{"id": "T-2"}': 1})},
)
REF = Reference(
    status="succeeded",
    outputs=OUT,
    messages=(T1, T2),
    redone=0,
    resends=0,
    steps=((1, "load", "call"),),
)


def check(verdict: Any, name: str) -> bool | None:
    return {c.name: c.ok for c in verdict.checks}[name]  # type: ignore[no-any-return]


def test_a_clean_run_identical_to_its_reference_passes() -> None:
    v = judge(evidence(status(executions=11), [kill()], ledger(T1, T2), REF, OUT))
    assert v.passed is True
    assert all(c.ok for c in v.checks), v.checks


def test_a_message_delivered_twice_under_different_keys_fails_and_is_named() -> None:
    v = judge(evidence(status(), [kill(0)], ledger(T1, T2, T1), REF, OUT))
    assert v.passed is False
    assert check(v, "no duplicate effects") is False
    assert [str(f) for f in v.duplicates] == [
        "message for ticket T-1: delivered 2 times (keys k1, k3)"
    ]


def test_appended_lines_and_inserted_rows_are_duplicates_a_lost_file_is_missing() -> None:
    after = Outputs(
        files={"replies.log": b"T-1\nT-2\nT-1\n"},
        tables={"helpdesk.db tickets": Counter({'{"id": "T-1"}': 2, '{"id": "T-2"}': 1})},
    )
    diff = compare(OUT, after)
    assert [str(f) for f in diff.duplicates] == [
        "replies.log: 1 extra line, written again (e.g. 'T-1')",
        "helpdesk.db tickets: row id=T-1: appears 2 times (the reference has 1)",
    ]
    assert [str(f) for f in diff.missing] == ["r/T-1.md: missing (the reference has it)"]
    v = judge(evidence(status(), [kill(0)], ledger(T1, T2), REF, after))
    assert (
        check(v, "nothing missing") is False
        and check(v, "outputs identical to the reference") is False
    )


def test_a_message_never_delivered_is_missing() -> None:
    v = judge(evidence(status(), [kill(0)], ledger(T1), REF, OUT))
    assert [str(f) for f in v.missing] == ["message for ticket T-2: never delivered"]
    assert v.passed is False


def test_more_than_one_redone_step_for_a_kill_fails() -> None:
    v = judge(evidence(status(executions=12), [kill(2)], ledger(T1, T2), REF, OUT))
    assert check(v, "at most one redone step per kill") is False


def test_a_budget_past_its_limit_fails() -> None:
    v = judge(evidence(status(tokens=(1001, 1000)), [], ledger(T1, T2), REF, OUT))
    assert check(v, "budgets not exceeded") is False


def test_without_a_reference_there_is_nothing_to_compare_with_and_no_such_check_is_listed() -> None:
    v = judge(evidence(status(), [kill(0)], ledger(T1, T2), None, None))
    names = [c.name for c in v.checks]
    assert "nothing missing" not in names and "outputs identical to the reference" not in names
    assert check(v, "no duplicate effects") is True
    assert v.passed is True and v.label == "PASS"


def test_a_run_never_killed_is_untested_not_pass() -> None:
    v = judge(evidence(status(), [], ledger(T1, T2), None, None))
    assert v.passed is True  # nothing went wrong...
    assert v.label == "UNTESTED"  # ...but nothing was tested either
    assert v.explanation == "not kill-tested: the run succeeded without being killed"


@pytest.mark.parametrize("outcome", ["failed", "gave_up", "cancelled"])
def test_a_run_never_killed_is_untested_whatever_its_outcome(outcome: str) -> None:
    v = judge(evidence(status(outcome), [], ledger(T1), None, None))
    assert (v.label, v.status) == ("UNTESTED", outcome)
    assert v.summary_json()["outcome"] == outcome


def test_a_killed_run_that_failed_for_its_own_reasons_passes_on_durability() -> None:
    v = judge(evidence(status("failed"), [kill()], ledger(T1, T2), None, None))
    assert (v.label, v.summary_json()["outcome"]) == ("PASS", "failed")


def test_with_a_reference_a_kill_must_not_change_how_the_run_ends() -> None:
    v = judge(evidence(status("failed"), [kill()], ledger(T1, T2), REF, OUT))
    assert check(v, "outcome as the uninterrupted reference's") is False
    assert v.label == "FAIL"


def test_a_killed_run_whose_outbox_cannot_be_read_is_not_called_a_pass() -> None:
    v = judge(
        evidence(
            status(),
            [kill(0)],
            None,
            None,
            None,
            posts=2,
            ledger_problem="the outbox at http://127.0.0.1:9 is not answering",
        )
    )
    assert check(v, "no duplicate effects") is None
    assert v.label == "UNTESTED"
    assert (
        "posted 2 message(s) but the outbox at http://127.0.0.1:9 is not answering" in v.explanation
    )


def test_a_run_that_posted_nothing_needs_no_outbox_to_pass() -> None:
    v = judge(evidence(status(), [kill(0)], None, None, None, posts=0))
    assert check(v, "no duplicate effects") is True
    assert v.label == "PASS"


def test_a_post_the_log_records_as_sent_but_the_outbox_never_got_is_missing() -> None:
    v = judge(
        evidence(status(), [kill(0)], ledger(T1), None, None, posts=2, completed_posts={"k1", "k2"})
    )
    assert check(v, "every sent message delivered") is False
    assert v.label == "FAIL"


def test_a_run_counts_only_its_own_deliveries_in_a_shared_outbox() -> None:
    shared = Ledger(
        deliveries=(
            Delivery(1, "old-run:5", T1, 1.0),
            Delivery(2, "new-run:5", T1, 2.0),
            Delivery(3, "new-run:7.1", T2, 3.0),
        ),
        attempts=(
            Attempt(1, "old-run:5", 201, "delivered", 1.0),
            Attempt(2, "new-run:5", 201, "delivered", 2.0),
            Attempt(3, None, 400, "rejected", 2.5),
            Attempt(4, "new-run:7.1", 201, "delivered", 3.0),
        ),
    )
    mine = shared.for_run("new-run")
    assert [d.key for d in mine.deliveries] == ["new-run:5", "new-run:7.1"]
    assert [a.id for a in mine.attempts] == [2, 4]
    assert shared.for_run("new").deliveries == ()  # a prefix of another run's id is not that run
    v = judge(evidence(status(), [kill(0)], mine, None, None))
    assert check(v, "no duplicate effects") is True


def test_kills_are_read_from_the_log_dated_by_the_killer_when_it_said() -> None:
    rows = [
        (10.0, 1, "lease_acquired", None, '{"pid": 1, "previous_pid": null}'),
        (10.5, 1, "step_committed", 1, "{}"),
        (11.0, 2, "lease_acquired", None, '{"pid": 2, "previous_pid": 1, "killed_at": 10.8}'),
        (11.2, 2, "step_committed", 2, "{}"),
        (11.3, 2, "lease_released", None, "{}"),
        (
            12.0,
            3,
            "lease_acquired",
            None,
            '{"pid": 3, "previous_pid": null}',
        ),  # after a clean stop: no kill
        (12.4, 3, "step_started", 3, "{}"),
        (
            13.0,
            4,
            "lease_acquired",
            None,
            '{"pid": 4, "previous_pid": 3}',
        ),  # killed elsewhere, time unknown
    ]
    events = [Event.from_row((i, "r", *row)) for i, row in enumerate(rows, 1)]
    assert [m.at for m in logged_kills(events)] == [10.8, 12.4]


def test_while_running_the_verdict_is_open_but_a_duplicate_already_shows() -> None:
    v = judge(evidence(status("running"), [kill()], ledger(T1, T1), None, None))
    assert v.passed is None
    assert v.failing and v.label == "FAIL"
    assert check(v, "terminal state") is None


def test_a_duplicate_in_a_run_never_killed_is_named_but_not_a_kill_test_verdict() -> None:
    v = judge(evidence(status("running"), [], ledger(T1, T1), None, None))
    assert v.label == "RUNNING"
    assert "but no duplicate effects: 1 duplicated" in v.explanation


def test_messages_are_named_by_ticket_digest_or_body() -> None:
    assert message_label({"ticket_id": "T-9"}) == "message for ticket T-9"
    assert message_label({"digest": True, "tickets": []}) == "digest message"
    assert message_label({"order": 1}) == 'message {"order":1}'


def test_the_step_in_flight_of_a_live_run_is_not_counted_as_redone() -> None:
    v = judge(evidence(status("running", committed=4, executions=5), [], ledger(T1), None, None))
    assert check(v, "at most one redone step per kill") is None  # never killed: nothing to count
    assert v.redone_steps == 0 and not v.failing


def test_resends_are_judged_once_the_run_ended_and_must_each_be_recorded() -> None:
    """A live verdict reads the log before the outbox, so a request may show in the outbox before
    its record: the check waits for the end, then every request must be one the log records."""
    twice = Ledger(
        deliveries=ledger(T1).deliveries,
        attempts=ledger(T1).attempts + (Attempt(9, "k1", 200, "replayed", 9.0),),
    )
    live = judge(Evidence(status("running"), [kill()], twice, None, None, account=sent(ledger(T1))))
    assert check(live, "every re-send recorded, under its own key") is None and not live.failing
    done = judge(Evidence(status(), [kill()], twice, None, None, account=sent(ledger(T1))))
    assert check(done, "every re-send recorded, under its own key") is False
    recorded = judge(Evidence(status(), [kill()], twice, None, None, account=sent(twice)))
    assert check(recorded, "every re-send recorded, under its own key") is True


def test_a_run_that_checkpoints_nothing_gets_no_tick_for_redone_steps() -> None:
    """A naive agent redoes everything after a kill, but records no steps: "0 redone" would be a
    tick for the worst case, so the check says it could not count instead."""
    s = status(committed=0, executions=0)
    v = judge(evidence(s, [kill(0), kill(0)], ledger(T1, T2, T1), REF, OUT))
    assert check(v, "at most one redone step per kill") is None
    assert (
        "records no steps"
        in {c.name: c.detail for c in v.checks}["at most one redone step per kill"]
    )
    assert v.passed is False  # and the duplicate still fails it


def _events(*rows: tuple[float, int, str, int | None, str]) -> list[Event]:
    return [Event.from_row((i, "r", *row)) for i, row in enumerate(rows, 1)]


def test_a_step_run_again_is_named_by_its_cause_and_only_a_kill_makes_it_redone() -> None:
    events = _events(
        (1.0, 1, "lease_acquired", None, '{"pid": 1, "previous_pid": null}'),
        (1.1, 1, "step_started", 1, '{"name": "a", "kind": "call"}'),
        (1.2, 1, "step_attempt_failed", 1, '{"will_retry": true}'),
        (1.3, 1, "step_started", 1, '{"name": "a", "kind": "call"}'),  # retry after an error
        (1.4, 1, "step_committed", 1, "{}"),
        (1.5, 1, "step_started", 2, '{"name": "b", "kind": "call"}'),
        (1.6, 1, "lease_released", None, "{}"),  # Stop engine
        (2.0, 2, "lease_acquired", None, '{"pid": 2, "previous_pid": null}'),
        (2.1, 2, "step_started", 2, '{"name": "b", "kind": "call"}'),  # after a stop
        (2.2, 2, "step_committed", 2, "{}"),
        (2.3, 2, "step_started", 3, '{"name": "w", "kind": "wait"}'),
        (2.4, 2, "waiting", None, "{}"),
        (2.5, 2, "lease_released", None, "{}"),  # exit while waiting
        (3.0, 3, "lease_acquired", None, '{"pid": 3, "previous_pid": null}'),
        (3.1, 3, "step_started", 3, '{"name": "w", "kind": "wait"}'),  # the wait taken up again
        (3.2, 3, "step_committed", 3, "{}"),
        (3.3, 3, "step_started", 4, '{"name": "c", "kind": "call"}'),
        (4.0, 4, "lease_acquired", None, '{"pid": 4, "previous_pid": 3, "killed_at": 3.5}'),
        (4.1, 4, "step_started", 4, '{"name": "c", "kind": "call"}'),  # after the kill: redone
        (4.2, 4, "step_committed", 4, "{}"),
    )
    found = account(events)
    assert [(r.seq, r.cause) for r in found.reruns] == [
        (1, "retry"),
        (2, "stop"),
        (3, "wait"),
        (4, "kill"),
    ]
    assert found.redone == 1 and [(d.incarnation, d.at, d.in_flight) for d in found.deaths] == [
        (3, 3.5, {4})
    ]
    assert [m.at for m in logged_kills(events)] == [3.5]


def test_a_committed_step_that_runs_again_fails_the_verdict_even_without_a_kill_count() -> None:
    events = _events(
        (1.0, 1, "lease_acquired", None, '{"pid": 1, "previous_pid": null}'),
        (1.1, 1, "step_started", 1, '{"name": "a", "kind": "call"}'),
        (1.2, 1, "step_committed", 1, "{}"),
        (2.0, 2, "lease_acquired", None, '{"pid": 2, "previous_pid": 1, "killed_at": 1.5}'),
        (2.1, 2, "step_started", 1, '{"name": "a", "kind": "call"}'),  # its checkpoint ignored
    )
    found = account(events)
    v = judge(Evidence(status(), [kill(0)], None, None, None, account=found))
    assert check(v, "at most one redone step per kill") is False and v.label == "FAIL"
    assert "step 1 'a' ran again after it had committed" in v.explanation


def test_resume_latency_ends_when_the_next_engine_is_back_at_its_wait_not_at_the_answer() -> None:
    """A run killed while it waits for a person: the next engine is back once it waits again; the
    minutes the person then takes to answer are no resume latency."""
    from steplog.verdict.judge import _kills
    from steplog.verdict.trail import Trail

    events = _events(
        (1.0, 1, "lease_acquired", None, '{"pid": 1, "previous_pid": null}'),
        (1.1, 1, "step_started", 1, '{"name": "approve", "kind": "wait"}'),
        (1.2, 1, "waiting", None, '{"signal": "approve"}'),
        (3.0, 2, "lease_acquired", None, '{"pid": 2, "previous_pid": 1, "killed_at": 2.8}'),
        (3.1, 2, "step_started", 1, '{"name": "approve", "kind": "wait"}'),
        (3.2, 2, "waiting", None, '{"signal": "approve"}'),
        (90.0, 2, "step_committed", 1, "{}"),  # the answer, 87 s later
    )
    trail = Trail()
    found = account(trail.record(events))
    [k] = _kills(trail, logged_kills(events), {1: "approve"}.get, found)
    assert k.resume_latency is not None and abs(k.resume_latency - 0.4) < 1e-9
    assert k.redone == 0  # a wait taken up again redoes nothing
