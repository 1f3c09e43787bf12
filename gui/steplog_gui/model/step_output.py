"""What a step wrote to its streams, as the output pane shows it: attempt by attempt, each marked
as the recorded one, one cut short, or one still writing. Qt-free."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

RECORDED = "recorded"
CUT = "cut"
LIVE = "live"


@dataclass(frozen=True)
class AttemptText:
    attempt: int
    text: str
    state: str
    """``RECORDED`` (the attempt the step's checkpoint holds), ``CUT`` (ended by a kill, a stop
    or a failure: not the answer) or ``LIVE`` (still writing, or its engine's fate not known)."""

    def headline(self) -> str:
        return {
            RECORDED: f"attempt {self.attempt}: recorded",
            CUT: f"attempt {self.attempt}: cut short, not the recorded answer",
            LIVE: f"attempt {self.attempt}: writing…",
        }[self.state]


def _piece(value: Any, stream: str) -> str:
    """An entry as text: a string as it is (a model's tokens), anything else as a JSON line."""
    if isinstance(value, str) and stream == "tokens":
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"[{stream}] {text}\n"


def attempts_of(entries: Iterable[tuple[Any, bool]]) -> list[AttemptText]:
    """``(Entry, settled)`` pairs of one step (``LogRepository.step_stream``) as its attempts, in
    order, each with its text joined."""
    texts: dict[int, list[str]] = {}
    states: dict[int, str] = {}
    for entry, settled in entries:
        attempt = int(entry.attempt or 0)
        texts.setdefault(attempt, []).append(_piece(entry.value, entry.stream))
        states[attempt] = (CUT if entry.cut else RECORDED) if settled else LIVE
    return [AttemptText(a, "".join(texts[a]), states[a]) for a in sorted(texts)]


Writing = dict[tuple[int, int], tuple[int, float, float]]
"""(seq, engine incarnation) -> (attempt, first entry's time, latest entry's time): when a step
attempt's stream entries came, newest attempt per step and engine."""


def merge_progress(writing: Writing, progress: Iterable[Any]) -> bool:
    """Fold ``streams.Progress`` rows (``LogRepository.stream_progress``) into ``writing``; whether
    anything changed. An older attempt's rows never replace a newer one's."""
    changed = False
    for p in progress:
        key = (int(p.seq), int(p.incarnation))
        old = writing.get(key)
        if old is None or p.attempt > old[0]:
            writing[key] = (int(p.attempt), float(p.first), float(p.last))
        elif p.attempt == old[0] and p.last > old[2]:
            writing[key] = (old[0], min(old[1], float(p.first)), float(p.last))
        else:
            continue
        changed = True
    return changed
