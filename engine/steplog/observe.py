"""The engine's one hook for watchers of a run (tracing): what happened, after it is committed.

The ``Journal`` calls a ``RunObserver`` after each transaction it commits, so an observer only
ever reports what the log holds; the engine knows nothing of what the observer does with it.
The one observer steplog ships is ``steplog.otel.OtelObserver`` (OpenTelemetry traces), chosen
by ``from_environment``. When tracing is off, nothing of OpenTelemetry is imported and the
journal's only cost is one ``is None`` test per transaction.

When tracing is on (README "Tracing"):
- ``OTEL_SDK_DISABLED=true`` turns it off, whatever else is set;
- ``OTEL_TRACES_EXPORTER`` = ``otlp`` or ``console`` turns it on (``none`` off);
- else ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` turns it on (OTLP);
- else a ``TracerProvider`` the program already installed (``opentelemetry.trace.
  set_tracer_provider``) turns it on, through that provider. Checked without importing anything:
  a program that installed one has imported ``opentelemetry.trace`` already.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .events import EventKind
from .otelenv import tracing_wanted

if TYPE_CHECKING:
    from .db import LogConnection


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


def from_environment() -> RunObserver | None:
    """The tracing observer if tracing is wanted and the ``otel`` extra is installed, else ``None``.

    Wanted but not installed: one line on stderr, and the run goes on untraced (tracing is never
    a reason for a run not to run)."""
    if not tracing_wanted():
        return None
    try:
        from .otel import OtelObserver
    except ImportError as exc:
        print(
            f"steplog: OTEL_* asks for traces but OpenTelemetry is not installed ({exc}); "
            "pip install 'steplog[otel]' — running without traces",
            file=sys.stderr,
        )
        return None
    return OtelObserver()


def incarnation_of(
    conn: LogConnection, row: sqlite3.Row, incarnation: int, resumed: bool
) -> Incarnation:
    """The incarnation just claimed, with how it took the lease over (its ``lease_acquired`` event)."""
    found = conn.execute(
        "SELECT data FROM event WHERE run_id = ? AND kind = ? AND incarnation = ?"
        " ORDER BY id DESC LIMIT 1",
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
