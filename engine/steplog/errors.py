"""The one exception tree of steplog.

Every error steplog raises on purpose is a ``SteplogError``; messages say what went wrong *and*
what to do next, on one line, because the CLI prints them as they are.

```
SteplogError
├── UsageError               bad input: unknown agent, malformed option or param   (exit 2)
│   ├── AgentSpecError       an AGENT argument that cannot be resolved             (exit 2)
│   ├── RunNotFinished       prune or export asked for a run that is not finished  (exit 2)
│   ├── RunExists            import would overwrite a run already in the log        (exit 2)
│   ├── ArchiveError         an export/archive file import cannot read             (exit 2)
│   └── OutputError          export/archive file that cannot be written (exists,
│                            disk full): nothing of it is left                      (exit 2)
├── LogError                 the log file itself is unusable                        (exit 2)
│   ├── ForeignDatabase      not a steplog file (application_id differs)
│   ├── CorruptDatabase      not SQLite at all, truncated, or failing integrity checks
│   ├── NewerSchema          written by a newer steplog; refuse rather than guess
│   ├── ReadOnlyLog          ``run`` cannot write it (read-only file or folder)
│   └── LogUnavailable       away for now: the server is unreachable or restarting,
│                            the file locked past the busy timeout or failing I/O
├── LogWriteError            a checkpoint could not be written (disk full, I/O)    (exit 1)
│   └── StorageExhausted     a step's effect met a full disk or an I/O error      (exit 1)
├── UnknownRun               no run with that id in this log                        (exit 2)
├── ControlRefused           a cancel, retry, fork or signal that the run's state
│                            does not allow (a finished run, an unsafe retry)      (exit 2)
├── RunWaiting               the run waits for a signal and the engine was asked
│                            to exit then (``--exit-when-waiting``)               (exit 6)
├── Blocked                  the code cannot replay the run's recorded steps: nothing
│                            ran, nothing changed but a ``resume_refused`` event  (exit 6)
├── WaitTimeout              ``run.wait_for`` timed out (agent code may catch it)   (exit 4 if not)
│   └── EventNotSet          ``steplog.get_event``: the key was still unset at its
│                            timeout, or the run ended without setting it          (exit 4)
├── LeaseHeld                another live engine holds the run                      (exit 75)
│   └── Fenced               this engine lost the run to a newer incarnation        (exit 75)
├── RunStopped               the run reached a terminal state other than success
│   ├── GaveUp               a budget was exhausted (status ``gave_up``)            (exit 3)
│   ├── RunFailed            a step failed past its policy, a poison pill,
│   │   │                    an ambiguous effect or non-determinism (``failed``)  (exit 4)
│   │   ├── NonDeterminism   the replay reached a different step than recorded
│   │   └── NeedsReconciliation  an effect that cannot deduplicate was started and
│   │                        never confirmed: a person must check its target
│   └── Cancelled            someone cancelled the run (status ``cancelled``)      (exit 5)
└── KilltestError            the kill test could not finish (steplog.killtest)      (exit 1)
```

Beside it, for *agent code* and the model and effect adapters to say whether retrying can help
(the default ``RetryPolicy`` retries every ``Exception`` except a ``PermanentError`` that is not
also transient):

```
TransientError               a plain retry may cure it
PermanentError               no retry can (bad request, auth, 4xx)
├── EffectRejected           the far side refused an effect for good (steplog.runtime.effects)
└── ModelError               the model refused the request (steplog.llm)
    └── ModelUnavailable     …but a rate limit or outage is worth retrying (also a TransientError)
```

``steplog.log.interrupts.StopRequested`` is in neither: it is a ``KeyboardInterrupt`` (a stop signal
honoured at a safe point), so no ``except Exception`` mistakes it for a failure.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_GAVE_UP = 3
EXIT_FAILED = 4
EXIT_CANCELLED = 5
EXIT_WAITING = 6
EXIT_BLOCKED = 6
"""The code no longer matches the run's recorded steps (``Blocked``); shares 6 with
``EXIT_WAITING``: either way the run is not finished and nothing is wrong with the log."""
EXIT_LEASE_HELD = 75
EXIT_STOPPED = 130
"""Stopped by a signal at a safe point (SIGTERM, SIGINT): the run is resumable, nothing is wrong."""
EXIT_WRITE_FAILED = 1
"""The log or the agent's files could not be written (``LogWriteError``)."""

EXIT_MEANINGS: dict[int, str] = {
    EXIT_OK: "succeeded",
    EXIT_WRITE_FAILED: "could not write the log or the agent's files (disk full, I/O error)",
    EXIT_USAGE: "refused: bad usage or input, nothing written",
    EXIT_GAVE_UP: "gave up: a budget ran out",
    EXIT_FAILED: "failed",
    EXIT_CANCELLED: "cancelled",
    EXIT_WAITING: "waits for a signal (or its code no longer matches the run's recorded steps)",
    EXIT_LEASE_HELD: "another live engine holds the run; nothing written",
    EXIT_STOPPED: "stopped at a safe point; the same command resumes it",
}
"""What each documented exit code of ``steplog run`` means, in words: the one table that every
caller showing an engine's end to a person (the monitor, say) reads."""


def exit_meaning(code: int) -> str:
    """Words for how an engine process ended: a documented code (``EXIT_MEANINGS``), a signal
    that killed it (a negative ``returncode``), or any other code said as it is."""
    if code in EXIT_MEANINGS:
        return EXIT_MEANINGS[code]
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return (
        f"died with exit code {code}, which steplog does not use (the interpreter or the "
        "agent's process died)"
    )


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name if it has none): a driver's error can
    run to several lines (libpq's "server closed the connection unexpectedly" does), and what
    steplog prints is one line."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class SteplogError(Exception):
    """Base of every error steplog raises on purpose."""

    exit_code = 1


class UsageError(SteplogError):
    """The caller asked for something malformed; nothing was written."""

    exit_code = EXIT_USAGE


class AgentSpecError(UsageError):
    """An agent spec (``name``, ``pkg.mod:fn`` or ``file.py:fn``) that cannot be resolved."""


class RunNotFinished(UsageError):
    """``steplog prune`` was asked for a run that is queued, running or waiting, or whose engine
    still holds its lease: only whole finished runs are ever pruned. ``steplog export`` of a run
    that is not finished: imported elsewhere, the copy could run again and repeat its effects."""


class RunExists(UsageError):
    """``steplog import`` found a run id the log already has; nothing was imported."""


class ArchiveError(UsageError):
    """A file ``steplog import`` cannot load: not a steplog export, truncated, or written by a
    newer steplog. Nothing was imported."""


class OutputError(UsageError):
    """A file ``steplog export -o`` or ``prune --archive`` was to write and could not: it exists
    (export overwrites only with ``--force``), the disk is full, the folder is not writable.
    Nothing of it is left behind, and the log was not changed."""


class LogError(SteplogError):
    """The log file cannot be used; it was left exactly as it was."""

    exit_code = EXIT_USAGE


class ForeignDatabase(LogError):
    """A SQLite file that is not a steplog log."""


class CorruptDatabase(LogError):
    """A file that is not a readable SQLite database."""


class NewerSchema(LogError):
    """A log written by a newer steplog than this one."""


class ReadOnlyLog(LogError):
    """A log that ``run`` cannot write: the file, or the folder its -wal and -shm files live in,
    is read-only. Readers (``status``, ``runs``, ``check``) can still read it."""


class LogUnavailable(LogError):
    """The log cannot be reached *now*, though nothing says it is wrong: its server refuses
    connections or is restarting, or the file stays locked or fails I/O. A command exits 2 as for
    any ``LogError``; ``steplog worker`` waits and reconnects instead (``db.is_transient``)."""


class LogWriteError(SteplogError):
    """Writing the log failed (disk full, I/O error). Nothing half-written stays: the
    transaction rolled back, and the same command resumes from the last checkpoint."""

    exit_code = 1


class StorageExhausted(LogWriteError):
    """A step or its effect met a full disk, a quota or an I/O error. Not the step's fault and
    not cured by retrying now: the engine stops as after a failed log write (the run stays
    ``running``), and the same command resumes once space is back."""


class UnknownRun(SteplogError):
    """No run with the given id exists in the log."""

    exit_code = EXIT_USAGE


class ControlRefused(SteplogError):
    """A control command (cancel, retry, fork, signal) that the run's state does not allow;
    nothing was written."""

    exit_code = EXIT_USAGE


class RunWaiting(SteplogError):
    """The run waits for a signal and its engine exited, as asked (``--exit-when-waiting``).
    Not terminal: ``steplog signal`` and then the same command carry it on."""

    exit_code = EXIT_WAITING

    def __init__(self, reason: str, *, run_id: str, waiting_for: str) -> None:
        super().__init__(reason)
        self.run_id = run_id
        self.waiting_for = waiting_for


class Blocked(SteplogError):
    """The agent's code cannot replay the run's recorded steps (another version changed a step,
    its arguments or their order). Nothing ran and the run's status did not change: only a
    ``resume_refused`` event was written. Compatible code resumes it; ``steplog fork RUN_ID
    --at-step N`` carries its history up to the divergence over to the current code.

    ``at_step`` is the first step where the code and the log differ."""

    exit_code = EXIT_BLOCKED

    def __init__(self, reason: str, *, run_id: str, at_step: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run_id = run_id
        self.at_step = at_step


class WaitTimeout(SteplogError):
    """``run.wait_for(name, timeout=...)`` saw no signal in time. Recorded like any step
    result, so a replay raises it again at the same point; agent code may catch it."""

    exit_code = EXIT_FAILED


class EventNotSet(WaitTimeout):
    """``steplog.get_event(run_id, key, timeout=...)`` (``steplog event``): the run had not set
    ``key`` when the timeout passed, or it ended without setting it."""


class LeaseHeld(SteplogError):
    """Another live engine holds this run's lease; this engine wrote nothing."""

    exit_code = EXIT_LEASE_HELD


class Fenced(LeaseHeld):
    """A newer incarnation took the run over; this engine's writes are refused."""


class RunStopped(SteplogError):
    """The run ended in a terminal state other than ``succeeded``.

    ``status`` is the run's status and ``reason`` the recorded reason.
    """

    status = "failed"
    failure = "step"
    """What kind of failure (recorded with the run's end; ``steplog retry`` reads it)."""

    def __init__(
        self, reason: str, *, run_id: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run_id = run_id
        self.details: dict[str, Any] = details or {}


class GaveUp(RunStopped):
    """A budget was exhausted: the run stopped gracefully in ``gave_up``."""

    status = "gave_up"
    exit_code = EXIT_GAVE_UP


class RunFailed(RunStopped):
    """The run stopped in ``failed``: retries exhausted, poison pill, ambiguous effect."""

    status = "failed"
    exit_code = EXIT_FAILED


class NonDeterminism(RunFailed):
    """On replay the agent reached a different step than the log recorded."""

    failure = "non_determinism"


class NeedsReconciliation(RunFailed):
    """An effect declared ``idempotent=False`` was started and never confirmed; sending it
    again could duplicate it, so a person checks the target (``steplog retry --force`` then)."""

    failure = "needs_reconciliation"


class Cancelled(RunStopped):
    """Someone cancelled the run (``steplog cancel``); it never runs again."""

    status = "cancelled"
    exit_code = EXIT_CANCELLED


class TransientError(Exception):
    """Raise from agent code for a failure that a plain retry may cure."""


class PermanentError(Exception):
    """Raise from agent code for a failure no retry can cure (bad request, auth, 4xx).

    The engine never retries it, whatever the retry policy says, unless it is also a
    ``TransientError`` (a rate limit is a model error that *is* worth retrying)."""
