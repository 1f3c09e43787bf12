"""What a waiting step waits for, apart from how it waits (``Run._waiting``): a signal
(``run.wait_for``), a message on a topic (``run.recv``), or its own deadline (``run.sleep``).

Each is one step whose decision records the deadline the first engine set (a sleep's is its
wake-up time), so an engine that takes the wait up again after a kill keeps it; the step's result
records what ended the wait (the signal or message consumed with it, or the deadline).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from steplog.errors import UsageError
from steplog.log.connection import LogConnection
from steplog.log.journal import pending_signal
from steplog.log.mailbox import pending_message

NAME_MAX = 200
"""The longest signal name, topic or event key."""


@dataclass(frozen=True)
class WaitOn:
    """One waiting step's object: ``signal`` or ``topic`` (neither: a sleep)."""

    kind: str
    """The step's kind: ``wait``, ``recv`` or ``sleep``."""
    signal: str | None = None
    topic: str | None = None

    def pending(self, conn: LogConnection, run_id: str) -> tuple[int, str] | None:
        """What would end the wait now, ``(row id, data JSON)``, or ``None`` (a sleep: never)."""
        if self.signal is not None:
            return pending_signal(conn, run_id, self.signal)
        if self.topic is not None:
            return pending_message(conn, run_id, self.topic)
        return None

    def result(
        self, found: tuple[int, str] | None, deadline: float | None, waited: float
    ) -> dict[str, Any]:
        """The step's recorded result: what ended the wait."""
        if self.signal is not None:
            out: dict[str, Any] = {"signal": self.signal}
            if found is not None:
                return {**out, "signal_id": found[0], "data": json.loads(found[1])}
            return {**out, "timeout": True, "waited": round(waited, 3)}
        if self.topic is not None:
            out = {"topic": self.topic}
            if found is not None:
                return {**out, "message_id": found[0], "data": json.loads(found[1])}
            return {**out, "timeout": True, "waited": round(waited, 3)}
        return {"woke_at": time.time(), "sleep_until": deadline}

    def consumes(self, found: tuple[int, str] | None) -> dict[str, int | None]:
        """``commit_wait``'s ``signal_id``/``message_id`` for what the wait consumes."""
        row = found[0] if found is not None else None
        return {
            "signal_id": row if self.signal is not None else None,
            "message_id": row if self.topic is not None else None,
        }

    def says(self, run_id: str, seq: int, deadline: float | None) -> str:
        """What the run waits for, in words (``RunWaiting``'s reason)."""
        if self.signal is not None:
            return f"run {run_id} waits for signal {self.signal!r} (step {seq})"
        if self.topic is not None:
            return f"run {run_id} waits for a message on topic {self.topic!r} (step {seq})"
        return f"run {run_id} sleeps until {iso(deadline or 0.0)} (step {seq})"


def iso(ts: float) -> str:
    """A time as ISO 8601 UTC (``status --json``'s ``sleeping_until``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        raise UsageError(f"{what} needs a name of 1 to {NAME_MAX} characters (got {name!r})")
    return name


def check_timeout(what: str, timeout: object) -> None:
    if timeout is not None and not (
        isinstance(timeout, (int, float))
        and not isinstance(timeout, bool)
        and 0 <= timeout < float("inf")
    ):
        raise UsageError(
            f"{what}(timeout=...) must be a finite number of seconds >= 0 (got {timeout!r})"
        )


def wake_time(when: object) -> float:
    """``run.sleep_until``'s argument as epoch seconds: an aware ``datetime`` or a number."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise UsageError(
                "run.sleep_until needs an aware datetime (with tzinfo, e.g. "
                "datetime.now(timezone.utc)) or epoch seconds; a naive one is ambiguous"
            )
        return when.timestamp()
    if isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise UsageError(
        f"run.sleep_until needs an aware datetime or epoch seconds (got {type(when).__name__})"
    )


def check_seconds(seconds: object) -> float:
    if (
        isinstance(seconds, (int, float))
        and not isinstance(seconds, bool)
        and 0 <= seconds < float("inf")
    ):
        return float(seconds)
    raise UsageError(f"run.sleep needs a finite number of seconds >= 0 (got {seconds!r})")
