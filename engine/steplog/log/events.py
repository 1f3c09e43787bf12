"""The kinds of row in the append-only ``event`` table and the payload of each: defined here only.

Writers (``journal``, ``claim``, ``control``, ``queue``, ``prune``) and readers (``logread`` and
through it the verdict, the kill test and the monitor) name kinds through this enum; a ``StrEnum``
member *is* its string, so it is stored and compared as the text the log has always held.

Each kind's ``data`` (a JSON object) has a ``TypedDict`` below, in ``PAYLOADS``: writers build
them typed, readers may ``cast`` an ``Event.data`` to one, and a test runs the engine through
every kind and checks each logged payload against its type (no key undocumented, none required
missing).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Required, TypedDict


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
    """An attempt of a step begins (budget reserved, attempt counted). A plain step's first
    attempt is not written when it begins (``journal`` defers it): its start is written with
    the step's next write instead, carrying ``started`` (when it really began); a step that
    commits first has no ``step_started`` at all, its ``step_committed`` says it began."""
    DECISION_RECORDED = "decision_recorded"
    """A model's answer committed before anything acts on it."""
    EFFECT_STARTED = "effect_started"
    """An effect's key is in the ledger as started; the act comes next."""
    EFFECT_COMPLETED = "effect_completed"
    """The far side confirmed the effect; its response is in the ledger."""
    STEP_ATTEMPT_FAILED = "step_attempt_failed"
    """An attempt failed; ``will_retry`` says whether another follows."""
    STEP_COMMITTED = "step_committed"
    """The checkpoint: the step's result is recorded and it never runs again. With ``started``
    (and ``name``, ``kind``) it is the step's start too: one transaction and one event for a
    plain step that nothing else was written for (``journal``: a deferred start)."""
    RUN_FINISHED = "run_finished"
    """The terminal record: status, reason, usage."""
    WAITING = "waiting"
    """The run waits for a named signal (``run.wait_for``), for a message on ``topic``
    (``run.recv``) or until ``sleep_until`` (``run.sleep``); ``deadline`` when it has a timeout
    (a sleep's is its wake-up time), ``since`` when it began. An engine relaunched after a kill
    writes it again as it takes the wait up: it is back at work (what ends a kill's resume
    latency, like a step committed)."""
    MESSAGE_SENT = "message_sent"
    """Someone sent the run a message on a topic (``steplog send``); a recv step consumes it
    once."""
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
    """A worker (``steplog worker``: host, pid) took the run off the queue; its engine starts
    next."""
    WORKER_RELEASED = "worker_released"
    """That worker handed the run back (its engine stopped, exit code said) or saw it end."""
    VERSION_CHANGED = "version_changed"
    """Code of another version (``old`` -> ``new``) took the run up and could replay its
    recorded steps (``docs/versions.md``)."""
    RESUME_REFUSED = "resume_refused"
    """Code that cannot replay the run's recorded steps was refused: nothing ran, the status did
    not change; ``at_step`` is the first step where the code and the log differ. ``worker`` when a
    worker left the run for one whose code can."""


Usage = dict[str, float]
"""Budget use so far: ``steps``, ``tokens``, ``tokens_estimated``, ``cost_usd``, ``seconds``,
``retries``, ``executions``; a per-step event leaves out the ones still zero."""


class RunCreated(TypedDict, total=False):
    agent: Required[str]
    params: Required[dict[str, Any]]
    model: Required[str]
    budget: Required[dict[str, float | None]]
    queued: bool
    launch: dict[str, Any]
    forked_from: dict[str, Any]
    copied_span: list[float | None]
    tags: dict[str, str]
    version: str
    """The version of the code that started the run (``docs/versions.md``)."""


class BudgetChanged(TypedDict, total=False):
    steps: int | None
    tokens: int | None
    seconds: float | None
    cost_usd: float | None
    retries: int | None
    recoveries: int | None
    reopened: Required[bool]


class LeaseAcquired(TypedDict, total=False):
    pid: Required[int]
    host: Required[str]
    resumed: Required[bool]
    previous_pid: Required[int | None]
    forfeited_tokens: int
    takeover: str | None
    killed_at: float


class LeaseReleased(TypedDict):
    usage: Usage


class StepStarted(TypedDict, total=False):
    name: Required[str]
    kind: Required[str]
    usage: Required[Usage]
    attempt: int
    recoveries: int
    reserved_tokens: int
    started: float
    """A deferred start, written late: when the attempt really began (the event's ``ts`` is when
    it was written). Had the engine died before, no start of it would be in the log."""


class DecisionRecorded(TypedDict):
    tokens_in: int
    tokens_out: int
    estimated: bool
    cost_usd: float
    usage: Usage


class EffectStarted(TypedDict):
    key: str
    kind: str
    target: str
    again: bool


class EffectCompleted(TypedDict):
    key: str


class StepAttemptFailed(TypedDict):
    error: str
    will_retry: bool
    usage: Usage


class StepCommitted(TypedDict, total=False):
    duration: float
    """Seconds the attempt took; absent with ``started`` (it ran from then to the event's ts)."""
    usage: Required[Usage]
    name: str
    """A wait step's (``run.wait_for``, ``run.recv``, ``run.sleep``), with its ``kind`` and the
    ``signal_id`` or ``message_id`` it consumed; a
    step whose start this event is too (``started``), with its ``kind``."""
    kind: str
    signal_id: int | None
    message_id: int
    started: float
    """This event is the step's start as well (a deferred start, never written on its own): when
    the attempt began. ``attempt`` and ``recoveries`` as in ``step_started``, when not 1 and 0."""
    attempt: int
    recoveries: int


class RunFinished(TypedDict, total=False):
    status: Required[str]
    reason: Required[str | None]
    usage: Usage
    failure: str
    budget: str
    used: float
    limit: float
    seq: int
    abandoned_step: int
    engine: None


class Waiting(TypedDict, total=False):
    signal: str | None
    """The signal waited for; ``None`` (or absent) when the wait is a sleep or a recv."""
    topic: str
    sleep_until: float
    deadline: float | None
    since: float
    """When the wait began: the first engine's time, the same after a kill (older logs lack it)."""
    usage: Usage


class MessageSent(TypedDict, total=False):
    topic: Required[str]
    message_id: Required[int]
    bytes: Required[int]
    key: str


class SignalSent(TypedDict, total=False):
    signal: Required[str]
    signal_id: Required[int]
    bytes: Required[int]
    key: str


class CancelRequested(TypedDict):
    reason: str
    engine_pid: int | None


class Retried(TypedDict, total=False):
    previous_reason: Required[str | None]
    failure: Required[str]
    forced: Required[bool]
    steps: Required[list[int]]
    resent: Required[list[str]]
    queued: bool


class StepCopied(TypedDict):
    from_run: str
    name: str
    kind: str
    started_at: float
    finished_at: float | None


class RunsPruned(TypedDict, total=False):
    runs: Required[list[str]]
    archive: str | None


class WorkerClaimed(TypedDict, total=False):
    worker: Required[dict[str, Any]]
    status: Required[str]
    takeover: str


class WorkerReleased(TypedDict):
    worker: dict[str, Any]
    exit_code: int
    status: str | None


class VersionChanged(TypedDict):
    old: str | None
    new: str


class ResumeRefused(TypedDict, total=False):
    reason: Required[str]
    at_step: Required[int]
    version: Required[str]
    """The version of the code that was refused."""
    worker: dict[str, Any]


PAYLOADS: dict[EventKind, type] = {
    EventKind.RUN_CREATED: RunCreated,
    EventKind.BUDGET_CHANGED: BudgetChanged,
    EventKind.LEASE_ACQUIRED: LeaseAcquired,
    EventKind.LEASE_RELEASED: LeaseReleased,
    EventKind.STEP_STARTED: StepStarted,
    EventKind.DECISION_RECORDED: DecisionRecorded,
    EventKind.EFFECT_STARTED: EffectStarted,
    EventKind.EFFECT_COMPLETED: EffectCompleted,
    EventKind.STEP_ATTEMPT_FAILED: StepAttemptFailed,
    EventKind.STEP_COMMITTED: StepCommitted,
    EventKind.RUN_FINISHED: RunFinished,
    EventKind.WAITING: Waiting,
    EventKind.MESSAGE_SENT: MessageSent,
    EventKind.SIGNAL_SENT: SignalSent,
    EventKind.CANCEL_REQUESTED: CancelRequested,
    EventKind.RETRIED: Retried,
    EventKind.STEP_COPIED: StepCopied,
    EventKind.RUNS_PRUNED: RunsPruned,
    EventKind.WORKER_CLAIMED: WorkerClaimed,
    EventKind.WORKER_RELEASED: WorkerReleased,
    EventKind.VERSION_CHANGED: VersionChanged,
    EventKind.RESUME_REFUSED: ResumeRefused,
}
"""The payload type of every kind."""


def payload_problem(kind: str, data: dict[str, Any]) -> str | None:
    """What is wrong with ``data`` as the payload of ``kind`` (its keys against the type), or
    ``None``."""
    shape = PAYLOADS.get(EventKind(kind)) if kind in EventKind._value2member_map_ else None
    if shape is None:
        return f"no payload type for event kind {kind!r}"
    # getattr: the table is typed `type`, which mypy does not know to be a TypedDict.
    required: frozenset[str] = getattr(shape, "__required_keys__")  # noqa: B009
    allowed = required | getattr(shape, "__optional_keys__")  # noqa: B009
    missing, unknown = sorted(required - set(data)), sorted(set(data) - allowed)
    if missing or unknown:
        return f"{kind}: missing {missing}, undocumented {unknown}"
    return None
