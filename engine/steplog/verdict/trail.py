"""A run's events as the kills' descriptions need them: a few numbers per event, no payload.

``judge.collect`` reads every event of the run once, in a stream: ``kills.account`` folds each
as it passes and ``Trail`` keeps, per event, its time, engine, kind and step (and whether a
step start was a model call), in arrays. A 1M-step run's events held as parsed ``Event``s were
about 2 GB of the monitor's memory while its verdict strip judged it; as a trail they are
25 MB. ``judge._kills`` asks it where each kill landed and how soon a new engine was back.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from steplog.log.events import EventKind
from steplog.log.logread import Event

NO_STEP = -(2**62)
"""``seq`` of an event about no step."""


class Trail:
    """Filled by iterating ``record(events)``; read once it is exhausted."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self._code: dict[str, int] = {}
        self._ts, self._inc, self._kind = array("d"), array("q"), array("h")
        self._seq, self._chat = array("q"), array("b")
        self.ts: npt.NDArray[np.float64] = np.zeros(0)
        self.inc: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.kind: npt.NDArray[np.int16] = np.zeros(0, np.int16)
        self.seq: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.chat: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)

    def record(self, events: Iterable[Event]) -> Iterator[Event]:
        """Pass ``events`` on, keeping each one's numbers (the arrays are set at the end)."""
        code = self._code
        for e in events:
            k = code.get(e.kind)
            if k is None:
                k = code[e.kind] = len(self.kinds)
                self.kinds.append(str(e.kind))
            self._ts.append(e.ts)
            self._inc.append(e.incarnation)
            self._kind.append(k)
            self._seq.append(NO_STEP if e.seq is None else e.seq)
            self._chat.append(e.kind == EventKind.STEP_STARTED and e.data.get("kind") == "chat")
            yield e
        self.ts = np.frombuffer(self._ts, dtype=np.float64) if self._ts else self.ts
        self.inc = np.frombuffer(self._inc, dtype=np.int64) if self._inc else self.inc
        self.kind = np.frombuffer(self._kind, dtype=np.int16) if self._kind else self.kind
        self.seq = np.frombuffer(self._seq, dtype=np.int64) if self._seq else self.seq
        self.chat = np.frombuffer(self._chat, dtype=np.int8).astype(np.bool_)

    def of_kind(self, *kinds: str) -> npt.NDArray[np.bool_]:
        """Which events are of one of these kinds."""
        codes = [self._code[k] for k in kinds if k in self._code]
        return np.isin(self.kind, codes) if codes else np.zeros(len(self.kind), np.bool_)

    def kind_at(self, i: int) -> str:
        return self.kinds[int(self.kind[i])]

    def seq_at(self, i: int) -> int | None:
        s = int(self.seq[i])
        return None if s == NO_STEP else s
