"""SQLModel tables: typed rows of the log for readers (the monitor, reports, user scripts).

The schema itself is created by the SQL migrations in ``schema.py`` (the engine's write path must
not pay for importing SQLModel); a test proves these classes match it column for column. Readers
open the log read-only: ``read_session(path)``.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Field, Session, SQLModel

from steplog.log.backend import backend_for
from steplog.log.location import LogLocation, parse
from steplog.log.runstatus import RunStatus


class RunRow(SQLModel, table=True):
    __tablename__ = "run"

    id: str = Field(primary_key=True)
    agent: str
    model: str | None = None
    params: str = "{}"
    status: str = RunStatus.RUNNING
    reason: str | None = None
    result: str | None = None
    workdir: str | None = None
    outbox: str | None = None
    limit_steps: int | None = None
    limit_tokens: int | None = None
    limit_seconds: float | None = None
    limit_cost_usd: float | None = None
    limit_retries: int | None = None
    limit_recoveries: int | None = None
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
    lease_pid: int | None = None
    lease_host: str | None = None
    lease_boot: str | None = None
    lease_proc_start: float | None = None
    lease_expires: float | None = None
    created_at: float
    updated_at: float
    finished_at: float | None = None
    parent_run_id: str | None = None
    parent_step: int | None = None
    waiting_for: str | None = None
    waiting_since: float | None = None
    cancel_requested: str | None = None
    launch: str | None = None
    waiting_until: float | None = None
    worker_host: str | None = None
    worker_pid: int | None = None
    worker_boot: str | None = None
    worker_proc_start: float | None = None
    worker_claimed_at: float | None = None
    lease_expires_boot: float | None = None
    version: str | None = None
    blocked: str | None = None
    waiting_topic: str | None = None


class StepRow(SQLModel, table=True):
    __tablename__ = "step"

    run_id: str = Field(primary_key=True, foreign_key="run.id")
    seq: int = Field(primary_key=True)
    name: str
    kind: str
    status: str = "running"
    phase: str = "started"
    decision: str | None = None
    result: str | None = None
    error: str | None = None
    attempts: int = 0
    recoveries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    tokens_estimated: int = 0
    cost_usd: float = 0.0
    started_at: float
    finished_at: float | None = None
    incarnation: int
    args_hash: str | None = None


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
    response: str | None = None
    attempts: int = 1
    started_at: float
    completed_at: float | None = None


class SignalRow(SQLModel, table=True):
    __tablename__ = "signal"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    name: str
    data: str = "null"
    key: str | None = None
    sent_at: float
    consumed_seq: int | None = None
    consumed_at: float | None = None


class MessageRow(SQLModel, table=True):
    """A message for a run's ``recv`` (``steplog send``); ``consumed_seq``: the step that
    received it."""

    __tablename__ = "message"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    topic: str
    data: str = "null"
    key: str | None = None
    sent_at: float
    consumed_seq: int | None = None
    consumed_at: float | None = None


class RunEventRow(SQLModel, table=True):
    """The latest value of one of a run's events (``run.set_event``), set by step ``seq``."""

    __tablename__ = "run_event"

    run_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    value: str
    seq: int
    set_at: float


class StreamRow(SQLModel, table=True):
    """One entry of a run's stream (``run.emit``, a model's tokens); ``pos`` is its offset."""

    __tablename__ = "stream"

    run_id: str = Field(primary_key=True)
    pos: int = Field(primary_key=True)
    name: str
    seq: int | None = None
    attempt: int | None = None
    incarnation: int
    ts: float
    value: str


class RunTagRow(SQLModel, table=True):
    """One tag of a run (``--tag KEY=VALUE``, ``tags={...}``): one row per key."""

    __tablename__ = "run_tag"

    run_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    value: str


class EventRow(SQLModel, table=True):
    __tablename__ = "event"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    ts: float
    incarnation: int
    kind: str
    seq: int | None = None
    data: str = "{}"


class PrunedRow(SQLModel, table=True):
    """The audit record of one run ``steplog prune`` removed (``state`` 'done'; 'pruning' only
    ever exists inside the pruning transaction)."""

    __tablename__ = "pruned"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    agent: str
    status: str
    created_at: float
    finished_at: float | None = None
    pruned_at: float
    rows: str = "{}"
    archive: str | None = None
    state: str = "pruning"


def read_engine(path: LogLocation | str) -> Engine:
    """A SQLAlchemy engine on the log that can only read: a file opened ``mode=ro`` with a busy
    timeout, or a PostgreSQL log (a ``postgresql://`` URL) whose transactions are read-only."""
    where = parse(path)
    return backend_for(where).read_engine(where)


def read_session(path: Path) -> Session:
    """A session for reading the log; validate the file first with ``db.inspect``."""
    return Session(read_engine(path))
