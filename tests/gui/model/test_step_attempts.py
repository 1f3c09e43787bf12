"""A step's streamed text as attempts (Qt-free): which is recorded, cut, or still writing."""

from __future__ import annotations

from steplog.log.streams import Entry, Progress
from steplog_gui.model.step_output import (
    CUT,
    LIVE,
    RECORDED,
    AttemptText,
    Writing,
    attempts_of,
    merge_progress,
)


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


def test_when_a_steps_entries_came_newest_attempt_per_step_and_engine() -> None:
    writing: Writing = {}
    first = [Progress(3, 1, 1, 10.0, 11.0), Progress(4, 1, 1, 12.0, 12.5)]
    assert merge_progress(writing, first)
    assert writing == {(3, 1): (1, 10.0, 11.0), (4, 1): (1, 12.0, 12.5)}
    # The same attempt wrote more: its latest time moves on, its first stays.
    assert merge_progress(writing, [Progress(4, 1, 1, 12.7, 13.0)])
    assert writing[(4, 1)] == (1, 12.0, 13.0)
    # A redone attempt replaces the one before; a late row of the older one changes nothing.
    assert merge_progress(writing, [Progress(4, 1, 2, 14.0, 14.2)])
    assert not merge_progress(writing, [Progress(4, 1, 1, 13.1, 13.2)])
    assert writing[(4, 1)] == (2, 14.0, 14.2)
    # The next engine's attempt of the same step is kept apart (its own lane).
    assert merge_progress(writing, [Progress(4, 2, 3, 20.0, 20.1)])
    assert writing[(4, 1)] == (2, 14.0, 14.2) and writing[(4, 2)] == (3, 20.0, 20.1)
    assert not merge_progress(writing, [])
