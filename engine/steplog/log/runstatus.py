"""A run's status: the one vocabulary the log stores and every reader compares against.

``RunStatus`` is a ``str`` enum, so a member *is* its stored string: it goes into SQL parameters,
``json.dumps`` and f-strings as the bare value (``"gave_up"``), and compares equal to the text a
row holds, while the type checker catches a misspelt name. The values are the ones the ``run``
table's CHECK constraint lists (``schema.py``, ``pgschema.py``); change neither without the other.

A step's status (``running``/``committed``/``failed`` in the ``step`` table) and the monitor's bar
outcomes share some words but are other vocabularies; they are not members here.
"""

from __future__ import annotations

from enum import StrEnum, unique


@unique
class RunStatus(StrEnum):
    """Where a run stands, as the log records it (``steplog status --json``'s ``"status"``)."""

    QUEUED = "queued"
    """Recorded for a worker (``steplog submit``, a schedule tick, a fork not started); no engine
    has taken it up yet. ``steplog worker`` or ``steplog run`` starts it."""
    RUNNING = "running"
    """An engine works on it, or did until it died: run the same command to resume."""
    WAITING = "waiting"
    """Parked in ``run.wait_for`` (or a sleep) until a named signal or its deadline arrives."""
    SUCCEEDED = "succeeded"
    """Finished: the agent returned and its result is recorded. Terminal (exit 0)."""
    GAVE_UP = "gave_up"
    """Stopped gracefully because a budget ran out. Terminal (exit 3); raising the limits
    (``steplog run --max-...``) reopens it."""
    FAILED = "failed"
    """A step failed past its retry policy, a recovery limit, or non-determinism. Terminal
    (exit 4); ``steplog retry`` runs it again from the failed step."""
    CANCELLED = "cancelled"
    """Someone cancelled it (``steplog cancel``); it never runs again. Terminal (exit 5)."""


TERMINAL: frozenset[RunStatus] = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.GAVE_UP, RunStatus.FAILED, RunStatus.CANCELLED}
)
"""Finished: no engine works on these again (``steplog run`` prints the result, changes nothing)."""
ACTIVE: frozenset[RunStatus] = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
"""Not finished: an engine may work on these (resume them with the same command)."""
