"""A step's streamed text as attempts (Qt-free): which is recorded, cut, or still writing."""

from __future__ import annotations

from steplog.log.streams import Entry
from steplog_gui.model.step_output import CUT, LIVE, RECORDED, AttemptText, attempts_of


def entry(
    offset: int, attempt: int, value: object, *, cut: bool = False, stream: str = "tokens"
) -> Entry:
    return Entry(offset, stream, 3, attempt, cut, value, 0.0)


def test_attempts_in_order_with_their_text_joined_and_what_became_of_each() -> None:
    found = attempts_of(
        [
            (entry(0, 1, "Hel", cut=True), True),
            (entry(1, 1, "lo", cut=True), True),
            (entry(2, 2, "Hello"), True),
            (entry(3, 2, " world"), True),
            (entry(4, 3, {"note": 1}, stream="events"), False),
        ]
    )
    assert found == [
        AttemptText(1, "Hello", CUT),
        AttemptText(2, "Hello world", RECORDED),
        AttemptText(3, '[events] {"note": 1}\n', LIVE),
    ]
    assert found[0].headline() == "attempt 1: cut short, not the recorded answer"
    assert attempts_of([]) == []
