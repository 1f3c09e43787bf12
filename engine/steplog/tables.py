"""SQLModel tables: typed rows of the log for readers (the monitor, reports, user scripts).

The schema itself is created by the SQL migrations in ``schema.py`` (the engine's write path must
not pay for importing SQLModel); a test proves these classes match it column for column. Readers
open the log read-only: ``read_session(path)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sqlalchemy import Engine, create_engine, event as sa_event
from sqlmodel import Field, Session, SQLModel


class RunRow(SQLModel, table=True):
    __tablename__ = "run"

    id: str = Field(primary_key=True)
    agent: str
    model: Optional[str] = None
    params: str = "{}"
    status: str = "running"
    reason: Optional[str] = None
    result: Optional[str] = None
    workdir: Optional[str] = None
    outbox: Optional[str] = None
    limit_steps: Optional[int] = None
    limit_tokens: Optional[int] = None
    limit_seconds: Optional[float] = None
    limit_cost_usd: Optional[float] = None
    limit_retries: Optional[int] = None
    limit_recoveries: Optional[int] = None
    used_steps: int = 0
    used_tokens: int = 0
    tokens_estimated: int = 0
    reserved_tokens: int = 0
    used_seconds: float = 0.0
    used_cost_usd: float = 0.0
    reserved_cost_usd: float = 0.0
    used_retries: int = 0
    step_executions: int = 0
    incarnation: int = 0
    lease_pid: Optional[int] = None
    lease_host: Optional[str] = None
    lease_boot: Optional[str] = None
    lease_proc_start: Optional[float] = None
    lease_expires: Optional[float] = None
    created_at: float
    updated_at: float
    finished_at: Optional[float] = None
    parent_run_id: Optional[str] = None
    parent_step: Optional[int] = None
    waiting_for: Optional[str] = None
    waiting_since: Optional[float] = None
    cancel_requested: Optional[str] = None
    launch: Optional[str] = None
    waiting_until: Optional[float] = None
    worker_host: Optional[str] = None
    worker_pid: Optional[int] = None
    worker_boot: Optional[str] = None
    worker_proc_start: Optional[float] = None
    worker_claimed_at: Optional[float] = None
    lease_expires_boot: Optional[float] = None


class StepRow(SQLModel, table=True):
    __tablename__ = "step"

    run_id: str = Field(primary_key=True, foreign_key="run.id")
    seq: int = Field(primary_key=True)
    name: str
    kind: str
    status: str = "running"
    phase: str = "started"
    decision: Optional[str] = None
    result: Optional[str] = None
    error: Optional[str] = None
    attempts: int = 0
    recoveries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    tokens_estimated: int = 0
    cost_usd: float = 0.0
    started_at: float
    finished_at: Optional[float] = None
    incarnation: int


class EffectRow(SQLModel, table=True):
    __tablename__ = "effect"

    key: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="run.id")
    seq: int
    idx: int
    kind: str
    target: str
    idempotent: int = 1
    status: str
    request_hash: str
    response: Optional[str] = None
    attempts: int = 1
    started_at: float
    completed_at: Optional[float] = None


class SignalRow(SQLModel, table=True):
    __tablename__ = "signal"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str
    name: str
    data: str = "null"
    key: Optional[str] = None
    sent_at: float
    consumed_seq: Optional[int] = None
    consumed_at: Optional[float] = None


class EventRow(SQLModel, table=True):
    __tablename__ = "event"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str
    ts: float
    incarnation: int
    kind: str
    seq: Optional[int] = None
    data: str = "{}"


class PrunedRow(SQLModel, table=True):
    """The audit record of one run ``steplog prune`` removed (``state`` 'done'; 'pruning' only
    ever exists inside the pruning transaction)."""

    __tablename__ = "pruned"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str
    agent: str
    status: str
    created_at: float
    finished_at: Optional[float] = None
    pruned_at: float
    rows: str = "{}"
    archive: Optional[str] = None
    state: str = "pruning"


def read_engine(path: Path | str) -> Engine:
    """A SQLAlchemy engine on the log that can only read (``mode=ro``), with a busy timeout; for a
    PostgreSQL log (a ``postgresql://`` URL), one whose transactions are read-only."""
    if isinstance(path, str) and path.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + str.__str__(path).split("://", 1)[1]
        return create_engine(url, connect_args={"options": "-c default_transaction_read_only=on"})
    engine = create_engine(f"sqlite:///{Path(path).resolve().as_uri()}?mode=ro&uri=true")

    @sa_event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.execute("PRAGMA busy_timeout = 10000")

    return engine


def read_session(path: Path) -> Session:
    """A session for reading the log; validate the file first with ``db.inspect``."""
    return Session(read_engine(path))
