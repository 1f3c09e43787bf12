"""steplog: crash-safe AI agents on SQLite.

An agent is a consumer of its own event log: every completed step is checkpointed, a restarted
agent continues from the first unfinished step, and every effect is idempotent. ::

    import steplog

    @steplog.agent(budget=steplog.Budget(max_steps=200))
    def triage(run: steplog.Run, source: str = "demo") -> dict:
        tickets = run.step("load", load_tickets, source)
        ...

Implementation lives in private-by-convention modules; this is the public surface.
"""

from __future__ import annotations

from steplog.api import aread_stream, cancel, fork, get_event, read_stream, send, signal
from steplog.errors import (
    AgentSpecError,
    Blocked,
    Cancelled,
    ControlRefused,
    CorruptDatabase,
    EventNotSet,
    Fenced,
    ForeignDatabase,
    GaveUp,
    LeaseHeld,
    LogError,
    LogWriteError,
    NeedsReconciliation,
    NonDeterminism,
    PermanentError,
    ReadOnlyLog,
    RunFailed,
    RunStopped,
    RunWaiting,
    SteplogError,
    StorageExhausted,
    TransientError,
    UnknownRun,
    UsageError,
    WaitTimeout,
)
from steplog.llm.base import ChatModel, ChatReply, Usage
from steplog.log.runstatus import RunStatus
from steplog.policies import Budget, RetryPolicy
from steplog.runtime.agent import Agent, agent
from steplog.runtime.run import Run, current_key

__all__ = [
    "aread_stream",
    "read_stream",
    "Agent",
    "AgentSpecError",
    "Blocked",
    "Cancelled",
    "ControlRefused",
    "Budget",
    "ChatModel",
    "ChatReply",
    "CorruptDatabase",
    "EventNotSet",
    "Fenced",
    "ForeignDatabase",
    "GaveUp",
    "LeaseHeld",
    "LogError",
    "LogWriteError",
    "NeedsReconciliation",
    "NonDeterminism",
    "PermanentError",
    "ReadOnlyLog",
    "RetryPolicy",
    "Run",
    "RunFailed",
    "RunStatus",
    "RunStopped",
    "RunWaiting",
    "SteplogError",
    "StorageExhausted",
    "TransientError",
    "UnknownRun",
    "Usage",
    "UsageError",
    "WaitTimeout",
    "agent",
    "cancel",
    "current_key",
    "fork",
    "get_event",
    "send",
    "signal",
]
