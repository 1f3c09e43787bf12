"""What the journal tells a watcher of a run (tracing), after each transaction it commits.

The ``Journal`` calls a ``RunObserver`` after it commits, so an observer only ever reports what the
log holds. The protocol lives with the journal that calls it; the one observer steplog ships
(``steplog.tracing.otel.OtelObserver``) is chosen by ``steplog.tracing.observe.from_environment``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from steplog.log.events import EventKind

if TYPE_CHECKING:
    from steplog.log.db import LogConnection, LogRow


@dataclass(frozen=True)
class Incarnation:
    """One engine process's turn on a run, as its trace's root describes it."""

    run_id: str
    agent: str
    model: str
    incarnation: int
    resumed: bool
    takeover: str | None = None
    """Why the lease could be taken from the previous holder ("holder pid 123 is dead": a kill)."""
    previous_pid: int | None = None
    killed_at: float | None = None


class RunObserver(Protocol):
    """What the journal reports, each call after the matching transaction committed."""

    def incarnation_started(self, inc: Incarnation) -> None: ...

    def attempt_started(
        self, seq: int, name: str, kind: str, *, attempt: int, recoveries: int
    ) -> None: ...

    def decision_recorded(
        self,
        seq: int,
        decision: dict[str, Any],
        *,
        tokens_in: int,
        tokens_out: int,
        tokens_cached: int,
        estimated: bool,
        cost: float,
    ) -> None: ...

    def attempt_failed(self, seq: int, error: str, *, will_retry: bool) -> None: ...

    def effect_started(
        self, seq: int, key: str, kind: str, target: str, *, again: bool
    ) -> None: ...

    def effect_completed(self, seq: int, key: str) -> None: ...

    def step_committed(self, seq: int) -> None: ...

    def incarnation_ended(self, status: str | None, reason: str | None) -> None:
        """``status`` is the terminal status, or ``None`` when the engine let go without one."""
        ...

    def close(self) -> None:
        """The engine is done with the run however it ended: end what is open, flush."""
        ...


def incarnation_of(
    conn: LogConnection, row: LogRow, incarnation: int, resumed: bool
) -> Incarnation:
    """The incarnation just claimed, with how it took the lease over (its ``lease_acquired``
    event)."""
    found = conn.execute(
        "SELECT data FROM event WHERE run_id = ? AND kind = ? AND incarnation = ? ORDER BY id "
        "DESC LIMIT 1",
        (row["id"], EventKind.LEASE_ACQUIRED, incarnation),
    ).fetchone()
    data = json.loads(found[0]) if found else {}
    return Incarnation(
        run_id=row["id"],
        agent=row["agent"],
        model=row["model"] or "offline",
        incarnation=incarnation,
        resumed=resumed,
        takeover=data.get("takeover"),
        previous_pid=data.get("previous_pid"),
        killed_at=data.get("killed_at"),
    )
