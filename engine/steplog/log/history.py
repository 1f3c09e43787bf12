"""Typed, read-only access to a log for user code, reports and checks (SQLModel rows).

    from steplog.log.history import History

    with History("steplog.db") as h:
        for step in h.steps("20261130-101500-ab12cd"):
            print(step.seq, step.name, step.status, step.attempts)

The file is validated first (a foreign or corrupt file raises ``LogError`` and is left as it
was) and opened ``mode=ro``; each query is its own short read, so no snapshot is held open.
Import cost: SQLModel (~0.5 s), which is why the engine's write path never imports this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from sqlmodel import Session, col, select

from steplog.errors import ForeignDatabase, LogError, UnknownRun
from steplog.log.db import inspect, location, open_readonly
from steplog.log.location import LogLocation
from steplog.log.logread import Event, events_since
from steplog.log.tables import EffectRow, RunRow, StepRow, read_engine


class History:
    """The runs, steps, effects and events of one log, as typed rows."""

    def __init__(self, path: str | Path) -> None:
        self.path: LogLocation = location(path)
        if not self.path.exists():
            raise LogError(
                f"{self.path} does not exist; run an agent first or pass an existing log"
            )
        if inspect(self.path) == 0:
            raise ForeignDatabase(f"{self.path} is an empty database, not a steplog log")
        self._engine = read_engine(self.path)

    def __enter__(self) -> History:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    def runs(self) -> Sequence[RunRow]:
        """Every run, newest first."""
        with Session(self._engine) as s:
            return s.exec(
                select(RunRow).order_by(col(RunRow.created_at).desc(), col(RunRow.id).desc())
            ).all()

    def run(self, run_id: str) -> RunRow:
        with Session(self._engine) as s:
            row = s.get(RunRow, run_id)
        if row is None:
            raise UnknownRun(f"no run {run_id!r} in {self.path}")
        return row

    def steps(self, run_id: str) -> Sequence[StepRow]:
        """The run's steps in sequence order (one row per step, its latest attempt)."""
        with Session(self._engine) as s:
            return s.exec(
                select(StepRow).where(StepRow.run_id == run_id).order_by(col(StepRow.seq))
            ).all()

    def effects(self, run_id: str) -> Sequence[EffectRow]:
        """The idempotency ledger of the run, in step order."""
        with Session(self._engine) as s:
            return s.exec(
                select(EffectRow)
                .where(EffectRow.run_id == run_id)
                .order_by(col(EffectRow.seq), col(EffectRow.idx))
            ).all()

    def events(
        self, run_id: str | None = None, *, since: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events after bookmark ``since`` (an event id), oldest first: a tail of the log, read by
        ``steplog.log.logread`` as every other reader of the log reads it (``data`` parsed)."""
        conn = open_readonly(self.path, one_shot=True)
        try:
            return events_since(conn, since, run_id=run_id, limit=limit)
        finally:
            conn.close()
