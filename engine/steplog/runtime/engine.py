"""Start or resume one run: open the log, take the lease, re-enter the agent, finish.

Everything that can be refused (bad params, a foreign log, a live lease) is refused before the
first write, so a refused start leaves the log byte for byte as it was.
"""

from __future__ import annotations

import inspect
import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import Blocked, Fenced, LogWriteError, RunStopped, RunWaiting, UsageError
from steplog.log import interrupts
from steplog.log.claim import Finished, Request, budget_of, claim
from steplog.log.db import (
    LogConnection,
    LogFailure,
    LogRow,
    Synchronous,
    connect_plain,
    load_driver,
    location,
    named_rows,
    open_log,
    private_dir,
    set_synchronous,
)
from steplog.log.journal import Journal, Usage, dumps, renew_lease, why_not_json
from steplog.log.lease import DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS
from steplog.log.location import LogLocation
from steplog.log.runids import check_run_id, new_run_id
from steplog.log.runstatus import RunStatus
from steplog.log.status import outcome_error
from steplog.log.steps import load_steps
from steplog.log.tags import check_tags
from steplog.policies import check_seconds
from steplog.runtime.effects import HttpClient
from steplog.runtime.params import bind_params
from steplog.runtime.redact import redact
from steplog.runtime.run import Run
from steplog.runtime.runnable import Runnable
from steplog.tracing.env import check_environment
from steplog.tracing.observe import from_environment

if TYPE_CHECKING:
    from steplog.log.observer import RunObserver


@dataclass(frozen=True)
class Outcome:
    run_id: str
    status: str
    reason: str | None
    result: Any
    resumed: bool
    incarnation: int
    waits: str = ""
    """What a ``waiting`` run waits for, in words (a signal's name is ``reason``; a sleep or a
    recv has none)."""

    def value(self) -> Any:
        """The agent's result, or the run's terminal error raised."""
        if self.status == RunStatus.SUCCEEDED:
            return self.result
        if self.status == RunStatus.WAITING and not self.reason:
            raise RunWaiting(
                f"{self.waits}; run it again (or leave it to `steplog worker`) to carry it on",
                run_id=self.run_id,
                waiting_for="",
            )
        if self.status == RunStatus.WAITING:
            raise RunWaiting(
                f"run {self.run_id} waits for signal {self.reason!r}; send it with `steplog "
                f"signal {self.run_id} {self.reason}`, then resume the run",
                run_id=self.run_id,
                waiting_for=self.reason or "",
            )
        raise outcome_error(self.run_id, self.status, self.reason)


MAX_PACE_SECONDS = 3600.0  # simulated thinking per model call; an hour is already no demo


LATE_START_POLL = 0.25
"""How often the heartbeat looks for an unwritten step start (``Journal.record_late_start``)."""


class _Heartbeat(threading.Thread):
    """Renews the lease while a long step runs; notices a takeover and raises the fence flag;
    writes the start of a step that runs long before it writes anything (a deferred start)."""

    def __init__(self, db: LogLocation, journal: Journal, lease_seconds: float) -> None:
        super().__init__(name="steplog-lease", daemon=True)
        self._db, self._journal, self._period = db, journal, lease_seconds / 3
        self._stop_event = threading.Event()

    def run(self) -> None:
        conn: LogConnection | None = None
        try:
            renew_at = time.monotonic() + self._period
            while not self._stop_event.wait(min(LATE_START_POLL, self._period)):
                if conn is None:
                    # Opened at the first wake, not at start: a thread opening a connection
                    # holds the GIL the main thread needs on its way to the first step.
                    # Synchronous NORMAL: a lost renewal only shortens the lease.
                    try:
                        conn = connect_plain(self._db)
                    except Exception:
                        return  # the engine's own writes still renew the lease, notice a takeover
                j = self._journal
                j.record_late_start(conn)  # a step running long shows as running
                if time.monotonic() < renew_at:
                    continue
                renew_at = time.monotonic() + self._period
                try:
                    mine, cancel = renew_lease(
                        conn,
                        j.run_id,
                        j.incarnation,
                        seconds_used=j.seconds_used(),
                        lease_seconds=self._period * 3,
                    )
                except LogFailure:
                    continue
                if not mine:
                    j.fenced.set()
                    return
                if cancel is not None and j.cancel_requested is None and not j.finishing.is_set():
                    # A long step would reach its boundary late: end it now (at a safe point).
                    j.cancel_requested = cancel
                    interrupts.request_from_thread("cancel")
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """Stop and wait, so its connection is closed before the caller closes the log."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)


class _SecondsWatchdog(threading.Thread):
    """Ends a step still running when the seconds budget runs out: asks the main thread to stop
    (at its next safe point, never inside a log write); ``_drive`` records ``gave_up``. Between
    steps the runtime's own check gives up first."""

    def __init__(self, journal: Journal, limit: float) -> None:
        super().__init__(name="steplog-seconds", daemon=True)
        self._journal, self._limit = journal, limit
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            left = self._limit - self._journal.seconds_used()
            if left <= 0:
                # Not once the run is ending anyway (the runtime's own check gave up first, or it
                # succeeded): a late stop would turn its exit code into "stopped by a signal".
                if not self._journal.finishing.is_set():
                    interrupts.request_from_thread("seconds")
                return
            self._stop_event.wait(min(left, 0.5))

    def stop(self) -> None:
        self._stop_event.set()


def check_start(
    agent: Runnable,
    *,
    run_id: str | None,
    outbox: str | None,
    params: dict[str, Any] | None,
    limits: dict[str, Any] | None,
    pace: float,
    lease_seconds: float,
    new: bool,
    model: str | None = None,
) -> dict[str, Any]:
    """Refuse a bad start before the log is even opened (``steplog run`` and ``steplog submit``
    alike): the params bound to the agent's signature, or ``UsageError``. ``new``: surely a new
    run, so a missing outbox the agent needs is refused now too."""
    bound = bind_params(agent, params or {})
    if run_id is not None:
        check_run_id(run_id)
    if outbox is not None and not outbox.startswith(("http://", "https://")):
        raise UsageError(
            f"--outbox {outbox!r} is not an http(s) URL; start one with `steplog outbox --port 0`"
        )
    if new:
        agent.require_outbox(outbox)
    from steplog.llm import check_model

    check_model(model)
    check_seconds("--pace", pace, zero_ok=True, most=MAX_PACE_SECONDS)
    check_seconds("--lease-seconds", lease_seconds, zero_ok=False, most=MAX_LEASE_SECONDS)
    agent.budget.merged(
        **(limits or {})
    )  # out-of-range limits are refused before the log is opened
    return bound


def execute(
    agent: Runnable,
    *,
    run_id: str | None = None,
    db: LogLocation | str | None = None,
    workdir: Path | None = None,
    outbox: str | None = None,
    params: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    model: str | None = None,
    base_url: str | None = None,
    pace: float = 0.0,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    synchronous: Synchronous = "FULL",
    on_start: Any = None,
    killed_at: float | None = None,
    exit_when_waiting: bool = False,
    tags: Mapping[str, str] | None = None,
) -> Outcome:
    """Start or resume a run and drive it to a terminal state (or until killed).

    ``limits`` are ``Budget`` field overrides (``None`` values ignored): for a new run over the
    agent's default budget, for an existing one over its recorded limits (raising a limit that
    stopped a ``gave_up`` run reopens it). ``killed_at``: the Unix time the caller killed the
    previous engine of this run; recorded with the lease it takes over, so every reader dates
    the kill (and measures resume latency) the same way. ``exit_when_waiting``: when the run
    waits for a signal, release it and return (status ``waiting``) instead of waiting.
    ``tags``: a new run's tags (``steplog.log.tags``); resuming with other tags is refused.
    """
    spec = agent.default_spec()
    checked_tags = check_tags(tags)
    bound = check_start(
        agent,
        run_id=run_id,
        outbox=outbox,
        params=params,
        limits=limits,
        pace=pace,
        lease_seconds=lease_seconds,
        new=run_id is None,
        model=model,
    )
    if killed_at is not None and not (
        math.isfinite(killed_at) and 0 < killed_at <= time.time() + 60
    ):
        raise UsageError(
            f"--killed-at must be the Unix time of a kill that happened (got {killed_at})"
        )
    check_environment()  # tracing settings: refused before the log is opened, never echoed
    if model is not None:
        from steplog.llm import check_ready

        check_ready(model, base_url=base_url)  # a key or SDK missing: refused, nothing written
    db_path = location(db)
    load_driver(db_path)  # before the stop handler: a stop inside an import cannot be handled
    with interrupts.installed():
        return _execute(
            agent,
            spec,
            bound,
            run_id=run_id,
            db_path=db_path,
            workdir=workdir,
            outbox=outbox,
            limits=limits,
            model=model,
            base_url=base_url,
            pace=pace,
            lease_seconds=lease_seconds,
            synchronous=synchronous,
            on_start=on_start,
            killed_at=killed_at,
            exit_when_waiting=exit_when_waiting,
            tags=checked_tags,
        )


def _execute(
    agent: Runnable,
    spec: str,
    bound: dict[str, Any],
    *,
    run_id: str | None,
    db_path: LogLocation,
    workdir: Path | None,
    outbox: str | None,
    limits: dict[str, Any] | None,
    model: str | None,
    base_url: str | None,
    pace: float,
    lease_seconds: float,
    synchronous: Synchronous,
    on_start: Any,
    killed_at: float | None,
    exit_when_waiting: bool,
    tags: dict[str, str],
) -> Outcome:
    conn = open_log(db_path, synchronous=synchronous)
    journal: Journal | None = None
    try:
        # Code of another version that cannot replay the run is refused before the claim: the
        # refusal is the only write (``replaycheck``, ``docs/versions.md``).
        from steplog.runtime.replaycheck import refuse_before_claim

        blocked = refuse_before_claim(agent, conn, run_id)
        if blocked is not None:
            raise blocked
        # The claim and the journal that can release it come as one: a stop asked for in
        # between is raised once the journal exists, and the except below releases the lease.
        with interrupts.critical():
            # The claim is not fsynced on its own: the run's first durable checkpoint syncs the log
            # past it (a kill loses neither; a power cut before that checkpoint loses both, and the
            # next engine claims again). One fsync less between a kill and the first new step.
            set_synchronous(conn, "NORMAL")
            with named_rows(conn):  # the claim's rows by name; the journal's by position
                claimed = claim(
                    conn,
                    Request(
                        agent=agent,
                        spec=spec,
                        run_id=run_id or new_run_id(),
                        db_path=db_path,
                        workdir=workdir,
                        outbox=outbox,
                        params=bound,
                        limits=limits or {},
                        model=model,
                        lease_seconds=lease_seconds,
                        killed_at=killed_at,
                        tags=tags,
                        version=agent.version,
                    ),
                )
            if isinstance(claimed, Finished):
                r = claimed.row
                return Outcome(
                    r["id"],
                    r["status"],
                    r["reason"],
                    json.loads(r["result"] or "null"),
                    True,
                    r["incarnation"],
                )
            set_synchronous(conn, synchronous)
            row, resumed = claimed.row, claimed.resumed
            usage = Usage(
                steps=row["used_steps"],
                tokens=row["used_tokens"],
                tokens_estimated=row["tokens_estimated"],
                cost_usd=row["used_cost_usd"],
                retries=row["used_retries"],
                executions=row["step_executions"],
                seconds_base=row["used_seconds"],
            )
            journal = Journal(
                conn,
                row["id"],
                claimed.incarnation,
                usage,
                lease_seconds=lease_seconds,
                synchronous=synchronous,
                observer=_observer(conn, row, claimed.incarnation, resumed),
            )
        return _work(
            agent,
            journal,
            row,
            resumed,
            db_path=db_path,
            base_url=base_url,
            pace=pace,
            lease_seconds=lease_seconds,
            on_start=on_start,
            exit_when_waiting=exit_when_waiting,
        )
    except (Fenced, Blocked):
        raise  # a newer engine has the run, or the refusal is recorded (``_drive``)
    except BaseException:
        if journal is not None:
            # A stop signal, a full disk under the workdir, sys.exit in agent code: the next engine
            # takes over at once. (After a failed log write this fails too, and quietly.)
            journal.release()
        raise
    finally:
        with interrupts.shielded():  # closed once, whatever signal arrives now
            if journal is not None and journal.observer is not None:
                journal.observer.close()
            conn.close()


def _observer(
    conn: LogConnection, row: LogRow, incarnation: int, resumed: bool
) -> RunObserver | None:
    """Tracing, if the environment asks for it (``steplog.tracing.observe``), told this incarnation
    began."""
    observer = from_environment()
    if observer is not None:
        from steplog.log.observer import incarnation_of  # only when tracing: ~1 ms of every start

        observer.incarnation_started(incarnation_of(conn, row, incarnation, resumed))
    return observer


def _work(
    agent: Runnable,
    journal: Journal,
    row: LogRow,
    resumed: bool,
    *,
    db_path: LogLocation,
    base_url: str | None,
    pace: float,
    lease_seconds: float,
    on_start: Any,
    exit_when_waiting: bool = False,
) -> Outcome:
    from steplog.llm import close_model, make_model

    chat_model = make_model(row["model"], base_url=base_url)
    http = HttpClient()  # one per run, built on the first post, closed below however the run ends
    run = Run(
        run_id=row["id"],
        workdir=Path(row["workdir"]),
        outbox=row["outbox"],
        params=json.loads(row["params"]),
        journal=journal,
        steps=load_steps(journal.conn, row["id"]),
        budget=budget_of(row),
        retry=agent.retry,
        model=chat_model,
        pace=pace,
        http=http,
        exit_when_waiting=exit_when_waiting,
        forked_from=_forked_from(row),
        location=db_path,
    )
    from steplog.log.streams import StreamBuffer

    journal.streams = StreamBuffer(journal, lambda: connect_plain(db_path))
    private_dir(Path(row["workdir"]))
    if on_start is not None:
        on_start(run.id, journal.incarnation, resumed)
    heartbeat = _Heartbeat(db_path, journal, lease_seconds)
    heartbeat.start()
    watchdog = (
        _SecondsWatchdog(journal, run.budget.max_seconds)
        if run.budget.max_seconds is not None
        else None
    )
    if watchdog is not None:
        watchdog.start()
    try:
        return _drive(agent, run, journal, resumed)
    finally:
        with interrupts.shielded():
            if watchdog is not None:
                watchdog.stop()
            heartbeat.stop()
            http.close()
            close_model(chat_model)


def _forked_from(row: LogRow) -> tuple[str, int] | None:
    """``(parent run, step)`` when the run is a fork, else ``None``."""
    parent = row["parent_run_id"]
    return (str(parent), int(row["parent_step"])) if parent is not None else None


def _drive(agent: Runnable, run: Run, journal: Journal, resumed: bool) -> Outcome:
    try:
        if inspect.iscoroutinefunction(agent.fn):
            from steplog.runtime.arun import run_async_agent

            result = run_async_agent(agent.fn, run)
        else:
            result = agent.fn(run, **run.params)
        if run._refused is not None:
            raise run._refused
        if run._stopping is not None:
            raise run._stopping
        if run._parked is not None:
            raise run._parked
        run.check_complete()
        try:
            result_json = dumps(result)
        except (TypeError, ValueError, RecursionError) as exc:
            raise run._stop(
                outcome_error(
                    run.id,
                    RunStatus.FAILED,
                    f"the agent returned {type(result).__name__}, which cannot be recorded as "
                    f"JSON ({why_not_json(exc)})",
                )
            ) from None
        with interrupts.shielded():  # the run ends here either way
            journal.finish(RunStatus.SUCCEEDED, None, result_json)
        return Outcome(
            run.id, RunStatus.SUCCEEDED, None, json.loads(result_json), resumed, journal.incarnation
        )
    except (Fenced, LogWriteError):
        raise  # nothing more can be recorded; the run stays resumable
    except Blocked as blocked:
        _refused(journal, blocked, agent.version)
        raise
    except RunWaiting as parked:
        journal.release()  # status stays ``waiting``: a signal and the same command carry it on
        return Outcome(
            run.id,
            RunStatus.WAITING,
            parked.waiting_for or None,
            None,
            resumed,
            journal.incarnation,
            str(parked),
        )
    except RunStopped as stop:
        details = (
            {**stop.details, "failure": stop.failure}
            if stop.status == RunStatus.FAILED
            else stop.details
        )
        with interrupts.shielded():
            journal.finish(stop.status, stop.reason, None, details)
        return Outcome(run.id, stop.status, stop.reason, None, resumed, journal.incarnation)
    except interrupts.StopRequested as stop:
        if stop.reason == "cancel" and journal.cancel_requested is not None:
            with interrupts.shielded():
                journal.finish(
                    RunStatus.CANCELLED,
                    journal.cancel_requested,
                    None,
                    {"abandoned_step": run._seq},
                )
            return Outcome(
                run.id,
                RunStatus.CANCELLED,
                journal.cancel_requested,
                None,
                resumed,
                journal.incarnation,
            )
        if stop.reason != "seconds":
            raise  # a stop from outside: the run stays resumable
        used, limit = round(journal.seconds_used(), 3), run.budget.max_seconds
        why = (
            f"budget exhausted: seconds used {used} of {limit} (a step was still running at the "
            "limit; it runs again when the limit is raised)"
        )
        with interrupts.shielded():
            journal.finish(
                RunStatus.GAVE_UP, why, None, {"budget": "seconds", "used": used, "limit": limit}
            )
        return Outcome(run.id, RunStatus.GAVE_UP, why, None, resumed, journal.incarnation)
    except Exception as exc:
        if run._refused is not None:  # agent code turned the refusal into another error
            _refused(journal, run._refused, agent.version)
            raise run._refused from exc
        # Agent code may have turned our stop into another error; the stop still wins.
        final = run._stopping or outcome_error(
            run.id,
            RunStatus.FAILED,
            redact(f"the agent raised outside any step: {type(exc).__name__}: {exc}"),
        )
        with interrupts.shielded():
            journal.finish(final.status, final.reason, None, final.details)
        return Outcome(run.id, final.status, final.reason, None, resumed, journal.incarnation)


def _refused(journal: Journal, blocked: Blocked, version: str) -> None:
    """The code could not replay the run after all (same version, code that drifts by itself;
    or steps beyond the probe's reach): the refusal recorded, the lease let go, the status kept."""
    journal.refuse(
        dumps({"reason": blocked.reason, "at_step": blocked.at_step}),
        {"reason": blocked.reason, "at_step": blocked.at_step, "version": version},
    )
