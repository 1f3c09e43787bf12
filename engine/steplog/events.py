"""The kinds of row in the append-only ``event`` table: one name each, defined here only.

Writers (``journal``, ``claim``) and readers (``verdict``, ``killtest``, the monitor) name kinds
through this enum; a ``StrEnum`` member *is* its string, so it is stored and compared as the text
the log has always held.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    RUN_CREATED = "run_created"
    """A new run: agent, params, model, budget (incarnation 0)."""
    BUDGET_CHANGED = "budget_changed"
    """Limits raised or set again; ``reopened`` when that revived a ``gave_up`` run."""
    LEASE_ACQUIRED = "lease_acquired"
    """An engine took the run (a new incarnation); ``previous_pid`` set when it took over from a
    holder that did not let go (a kill), with ``killed_at`` when the killer said when."""
    LEASE_RELEASED = "lease_released"
    """An engine let go without finishing (a stop signal): the next one takes over at once."""
    STEP_STARTED = "step_started"
    """An attempt of a step begins (budget reserved, attempt counted)."""
    DECISION_RECORDED = "decision_recorded"
    """A model's answer committed before anything acts on it."""
    EFFECT_STARTED = "effect_started"
    """An effect's key is in the ledger as started; the act comes next."""
    EFFECT_COMPLETED = "effect_completed"
    """The far side confirmed the effect; its response is in the ledger."""
    STEP_ATTEMPT_FAILED = "step_attempt_failed"
    """An attempt failed; ``will_retry`` says whether another follows."""
    STEP_COMMITTED = "step_committed"
    """The checkpoint: the step's result is recorded and it never runs again."""
    RUN_FINISHED = "run_finished"
    """The terminal record: status, reason, usage."""
    WAITING = "waiting"
    """The run waits for a named signal (``run.wait_for``); ``deadline`` when it has a timeout."""
    SIGNAL_SENT = "signal_sent"
    """Someone sent the run a named signal (``steplog signal``); a wait step consumes it once."""
    CANCEL_REQUESTED = "cancel_requested"
    """Someone asked to cancel the run while an engine held it; it ends at a step boundary."""
    RETRIED = "retried"
    """A ``failed`` run was set going again from its failed step (``steplog retry``)."""
    STEP_COPIED = "step_copied"
    """A fork's step taken over from its parent's committed history (never run, no effects sent)."""
    RUNS_PRUNED = "runs_pruned"
    """``steplog prune`` removed these finished runs (``runs``; ``archive`` if they were archived
    first). Its ``run_id`` is ``""``: it belongs to no run, and it stays when they are gone."""
    WORKER_CLAIMED = "worker_claimed"
    """A worker (``steplog worker``: host, pid) took the run off the queue; its engine starts next."""
    WORKER_RELEASED = "worker_released"
    """That worker handed the run back (its engine stopped, exit code said) or saw it end."""

