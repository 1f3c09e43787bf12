"""The verdict's rules on hand-made evidence: what passes, what fails, and what is "not checked"."""

from __future__ import annotations

from collections import Counter
from typing import Any

from steplog.killtest.outputs import Outputs, compare
from steplog.outbox import Attempt, Delivery, Ledger
from steplog.verdict import Evidence, Kill, Reference, judge, message_label


def status(state: str = "succeeded", *, committed: int = 10, executions: int = 10,
           tokens: tuple[int, int | None] = (100, 1000)) -> dict[str, Any]:
    return {"run_id": "r", "status": state, "reason": None, "steps_committed": committed,
            "step_executions": executions, "incarnations": 1,
            "budget": {"steps": {"used": committed, "limit": 200}, "tokens": {"used": tokens[0], "limit": tokens[1]},
                       "seconds": {"used": 1.0, "limit": None}, "cost_usd": {"used": 0.0, "limit": 0.5}}}


def ledger(*bodies: dict[str, Any]) -> Ledger:
    deliveries = tuple(Delivery(id=i, key=f"k{i}", body=b, ts=float(i)) for i, b in enumerate(bodies, 1))
    attempts = tuple(Attempt(id=i, key=f"k{i}", status=201, outcome="delivered", ts=float(i)) for i, _ in enumerate(bodies, 1))
    return Ledger(deliveries=deliveries, attempts=attempts)


def kill(redone: int = 1) -> Kill:
    return Kill(at=1.0, seq=3, step_name="send reply T-1", phase="acting", incarnation=1, resume_latency=0.3,
                redone=redone)


T1, T2 = {"ticket_id": "T-1", "text": "hi"}, {"ticket_id": "T-2", "text": "yo"}
OUT = Outputs(files={"replies.log": b"T-1\nT-2\n", "r/T-1.md": b"one"},
              tables={"helpdesk.db tickets": Counter({'{"id": "T-1"}': 1, '{"id": "T-2"}': 1})})
REF = Reference(status="succeeded", outputs=OUT, messages=(T1, T2), redone=0, resends=0,
                steps=((1, "load", "call"),))


def check(verdict: Any, name: str) -> bool | None:
    return {c.name: c.ok for c in verdict.checks}[name]  # type: ignore[no-any-return]


def test_a_clean_run_identical_to_its_reference_passes() -> None:
    v = judge(Evidence(status(executions=11), [kill()], ledger(T1, T2), REF, OUT))
    assert v.passed is True
    assert all(c.ok for c in v.checks), v.checks


def test_a_message_delivered_twice_under_different_keys_fails_and_is_named() -> None:
    v = judge(Evidence(status(), [kill(0)], ledger(T1, T2, T1), REF, OUT))
    assert v.passed is False
    assert check(v, "no duplicate effects") is False
    assert [str(f) for f in v.duplicates] == ["message for ticket T-1: delivered 2 times (keys k1, k3)"]


def test_appended_lines_and_inserted_rows_are_duplicates_a_lost_file_is_missing() -> None:
    after = Outputs(files={"replies.log": b"T-1\nT-2\nT-1\n"},
                    tables={"helpdesk.db tickets": Counter({'{"id": "T-1"}': 2, '{"id": "T-2"}': 1})})
    diff = compare(OUT, after)
    assert [str(f) for f in diff.duplicates] == [
        "replies.log: 1 extra line, written again (e.g. 'T-1')",
        "helpdesk.db tickets: row id=T-1: appears 2 times (the reference has 1)"]
    assert [str(f) for f in diff.missing] == ["r/T-1.md: missing (the reference has it)"]
    v = judge(Evidence(status(), [kill(0)], ledger(T1, T2), REF, after))
    assert check(v, "nothing missing") is False and check(v, "outputs identical to the reference") is False


def test_a_message_never_delivered_is_missing() -> None:
    v = judge(Evidence(status(), [kill(0)], ledger(T1), REF, OUT))
    assert [str(f) for f in v.missing] == ["message for ticket T-2: never delivered"]
    assert v.passed is False


def test_more_than_one_redone_step_for_a_kill_fails() -> None:
    v = judge(Evidence(status(executions=12), [kill(2)], ledger(T1, T2), REF, OUT))
    assert check(v, "at most one redone step per kill") is False


def test_a_budget_past_its_limit_fails() -> None:
    v = judge(Evidence(status(tokens=(1001, 1000)), [], ledger(T1, T2), REF, OUT))
    assert check(v, "budgets not exceeded") is False


def test_without_a_reference_the_comparisons_are_not_checked_rather_than_passed() -> None:
    v = judge(Evidence(status(), [kill(0)], ledger(T1, T2), None, None))
    assert check(v, "nothing missing") is None
    assert check(v, "outputs identical to the reference") is None
    assert check(v, "no duplicate effects") is True
    assert v.passed is True  # what could be checked passed; the rest says "not checked"


def test_while_running_the_verdict_is_open_but_a_duplicate_already_shows() -> None:
    v = judge(Evidence(status("running"), [], ledger(T1, T1), None, None))
    assert v.passed is None
    assert v.failing
    assert check(v, "terminal state") is None


def test_messages_are_named_by_ticket_digest_or_body() -> None:
    assert message_label({"ticket_id": "T-9"}) == "message for ticket T-9"
    assert message_label({"digest": True, "tickets": []}) == "digest message"
    assert message_label({"order": 1}) == 'message {"order":1}'


def test_the_step_in_flight_of_a_live_run_is_not_counted_as_redone() -> None:
    v = judge(Evidence(status("running", committed=4, executions=5), [], ledger(T1), None, None))
    assert check(v, "at most one redone step per kill") is True
    assert not v.failing
