"""``steplog worker``: claim runs off the queue and run each in an engine process of its own.

The loop, on the main thread (the engines are its children, and Linux's parent-death signal is
tied to the thread that started them):

1. reap engines that exited and hand their runs back (``queue.hand_back``);
2. while a slot is free, claim the oldest run nobody works on (``queue.claim_next_run``) and
   start ``steplog run AGENT --run-id ID --exit-when-waiting`` with the options the run was
   queued with, in a process group of its own (``procs.spawn``) that dies with the worker;
3. wait ``poll`` seconds, or less: on a log that announces claimable runs (PostgreSQL's
   ``NOTIFY``, ``follow.claimable_notices``) until one is announced, so a submitted run is
   claimed within milliseconds. The announcements are a shortcut, not the source of truth: the
   poll goes on, and while the listening connection is lost the worker polls only, connecting
   again at most every ``LISTEN_RETRY_SECONDS``.

Losing the log (a PostgreSQL server restarting, a file locked past its busy timeout: what
``db.is_transient`` calls away for now) does not end the worker. It says so in one line, closes
its connection and opens the log again after 0.5 s, then 1, 2, 4... up to 10 s, each wait drawn
at random from its upper half so that workers that lost one server do not all come back at one
instant. Its engines go on meanwhile (or exit, having lost the log too). Once the log answers it
says so in one line, hands back the runs of the engines that exited meanwhile and claims again.
An engine that was running when the log was found away and then exits abnormally is put down to
the outage, not to its run: no backoff, no count towards ``MAX_ABNORMAL``. The log is checked on
reopening as at start: a foreign, damaged or newer one ends the worker (exit 2), as does any
error that waiting cannot cure.

Stopping: SIGTERM, SIGINT or SIGHUP stop the claiming and ask every engine to stop
(``procs.request_stop``); an engine stops at a safe point and releases its lease, leaving the run
to any other worker, and the worker exits 0 (engines still running after ``grace`` seconds are
killed: their runs are taken over like any dead engine's). During an outage it stops as promptly;
the runs it could not hand back are free once it is gone (a dead worker's claim is no claim). A
worker killed with SIGKILL takes its engines with it (``procs.die_with_parent``), so a worker on
the same host takes their runs over at once and one elsewhere when the leases expire.

Not spun on: a run whose engine exited waiting (exit 6) is claimable again only once its signal
or message is in or its wait timed out (a sleep: once it is due, ``queue.WAKE_LEAD_SECONDS``
early, so its engine is up to wake it on time); one that ended (exit 0, 3, 4, 5) is finished;
one whose engine keeps exiting abnormally (a crash, exit 1 or 2: an agent that no longer
imports, a full disk) is tried again after 1, 2, 4... s and left alone by this worker after
``MAX_ABNORMAL`` exits in a row.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import FrameType

from steplog.control.procs import child_env, hard_kill, python_argv, request_stop, spawn
from steplog.control.queue import Job, claim_next_run, hand_back
from steplog.errors import (
    EXIT_BLOCKED,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_GAVE_UP,
    EXIT_LEASE_HELD,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_WAITING,
    Blocked,
    SteplogError,
    first_line,
)
from steplog.log.db import LogConnection, LogFailure, LogRow, is_transient, open_log
from steplog.log.follow import Announcements, claimable_notices
from steplog.log.interrupts import STOP_SIGNALS
from steplog.log.launch import DIE_WITH_PARENT_ENV
from steplog.log.lease import DEFAULT_LEASE_SECONDS, me
from steplog.log.location import LogLocation
from steplog.log.runstatus import RunStatus
from steplog.log.versions import record_refusal
from steplog.runtime.agent import resolve
from steplog.runtime.replaycheck import divergence
from steplog.runtime.runnable import Runnable

MAX_ABNORMAL = 3
"""Abnormal engine exits in a row after which this worker leaves a run alone."""
MAX_BACKOFF_SECONDS = 60.0
STOP_GRACE_SECONDS = 30.0
FIRST_RECONNECT_SECONDS = 0.5
"""The longest first wait before opening a lost log again; each further wait is twice as long..."""
MAX_RECONNECT_SECONDS = 10.0
"""...up to this (a log back after a long outage is found within 10 s)."""
LISTEN_RETRY_SECONDS = 5.0
"""How long a worker polls only, once its listening connection was lost or refused, before it
tries to listen again."""
WAKE_SLICE_SECONDS = 0.05
"""The longest one wait for an announcement: a stop signal is seen within it."""

_ENDED = {
    EXIT_OK: "succeeded",
    EXIT_GAVE_UP: "gave up",
    EXIT_FAILED: "failed",
    EXIT_CANCELLED: "was cancelled",
}
_HANDED_BACK = {
    EXIT_WAITING: "waits (for a signal or a message, or asleep)",
    EXIT_LEASE_HELD: "is held by another engine",
    EXIT_STOPPED: "was stopped at a safe point (resumable)",
}


@dataclass
class _Engine:
    job: Job
    proc: subprocess.Popen[bytes]
    started: float
    outage: bool = False
    """The log was found away while it ran: an abnormal exit is the outage's, not the run's."""


@dataclass
class WorkerStats:
    """What one worker did, for its last line and for tests."""

    claimed: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    """Engine exits by what they meant (``succeeded``, ``waits for a signal``, ...)."""
    parked: list[str] = field(default_factory=list)


class Worker:
    def __init__(
        self,
        db: LogLocation,
        *,
        concurrency: int = 1,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        agents: Collection[str] = (),
        run_prefix: str = "",
        drain: bool = False,
        poll: float = 0.2,
        grace: float = STOP_GRACE_SECONDS,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.db, self.concurrency, self.lease_seconds = db, concurrency, lease_seconds
        self.agents, self.drain, self.poll, self.grace = tuple(agents), drain, poll, grace
        self.run_prefix = run_prefix
        self._say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self._engines: dict[str, _Engine] = {}
        self._abnormal: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._parked: set[str] = set()
        self._exited: list[tuple[_Engine, int]] = []
        """Engines that exited (with their exit codes) whose runs are not handed back yet."""
        self._stopping: str | None = None
        self._deadline = float("inf")
        self._lost_at: float | None = None
        """When the log was found away (``time.monotonic``); ``None`` while it answers."""
        self._wait = FIRST_RECONNECT_SECONDS
        self._rng = random.Random()
        self._notices: Announcements | None = claimable_notices(db)
        self._listen_at = 0.0
        """When to try listening again (``time.monotonic``) while not connected."""
        self.stats = WorkerStats()
        self.name = f"{me().host}:{me().pid}"
        self._verdicts: dict[tuple[str, int], bool] = {}
        """Can this worker's code replay the run, by (run, incarnation): asked once each."""
        self._blocked: set[str] = set()
        """Runs this worker's code cannot replay: left for workers whose code can."""
        self._refusals: list[tuple[str, Blocked, str]] = []
        """Found while claiming, recorded after it (no write inside the claim's transaction)."""
        self._agents: dict[str, Runnable | None] = {}

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped by a signal (or, with ``drain``, until nothing is left); exit 0."""
        # A foreign or damaged log, or one that cannot be reached, is refused before anything
        # starts: a mistyped URL or path is said at once, not waited on.
        conn: LogConnection | None = open_log(self.db)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            self._say(
                f"steplog worker {self.name}: working on {self.db} ({self.concurrency} at a time"
                + (f", agents {', '.join(self.agents)}" if self.agents else "")
                + (f", runs {self.run_prefix}*" if self.run_prefix else "")
                + ")"
            )
            while self._stopping is None:
                self._reap()
                if conn is None:
                    conn = self._reopen()
                    continue
                try:
                    self._hand_back_exited(conn)
                    claimed = self._fill(conn)
                except LogFailure as exc:
                    if not is_transient(exc):
                        raise
                    self._lost(exc)
                    _close(conn)
                    conn = None
                    continue
                if self.drain and not self._engines and not claimed and not self._backing_off():
                    self._stopping = "drained"
                    break
                self._idle()
        finally:
            if self._notices is not None:
                with contextlib.suppress(Exception):
                    self._notices.close()
            # Also when the loop failed (the log became unwritable): no engine is left behind.
            self._stop_engines(conn)
            if conn is not None:
                _close(conn)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        done = (
            ", ".join(f"{n} {what}" for what, n in sorted(self.stats.finished.items())) or "no runs"
        )
        self._say(
            f"steplog worker {self.name}: {self._stopping}; {self.stats.claimed} claimed, {done}"
            + (f"; left alone: {', '.join(self.stats.parked)}" if self.stats.parked else "")
        )
        return 0

    def _idle(self) -> None:
        """Wait ``poll`` seconds, or until a run is announced claimable (see the module)."""
        notices = self._notices
        if notices is None:
            time.sleep(self.poll)
            return
        if not notices.connected:
            if time.monotonic() < self._listen_at:
                time.sleep(self.poll)
                return
            try:
                notices.connect()
            except SteplogError:
                self._listen_at = time.monotonic() + LISTEN_RETRY_SECONDS
                time.sleep(self.poll)
                return
            return  # what was announced before LISTEN took effect was not heard: claim now
        until = time.monotonic() + self.poll
        try:
            while self._stopping is None and (left := until - time.monotonic()) > 0:
                if notices.wait(min(left, WAKE_SLICE_SECONDS)) is not None:
                    return
        except SteplogError:  # lost (and closed): poll meanwhile, listen again later
            self._listen_at = time.monotonic() + LISTEN_RETRY_SECONDS

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stopping is None:
            self._stopping = f"stopped by {signal.Signals(signum).name}"
        else:  # a second signal: do not wait for the engines' safe points
            self._deadline = 0.0

    def _fill(self, conn: LogConnection) -> bool:
        claimed = False
        now = time.monotonic()
        while len(self._engines) < self.concurrency and self._stopping is None:
            waiting = {rid for rid, t in self._not_before.items() if t > now}
            job = claim_next_run(
                conn,
                agents=self.agents,
                prefix=self.run_prefix,
                lease_seconds=self.lease_seconds,
                skip={*self._engines, *self._parked, *waiting, *self._blocked},
                accept=lambda row: self._can_replay(conn, row),
            )
            self._answered()
            self._record_refusals(conn)
            if job is None:
                break
            claimed = True
            self.stats.claimed += 1
            self._start(job)
        return claimed

    def _can_replay(self, conn: LogConnection, row: LogRow) -> bool:
        """Can this worker's code (the agent as its engines will import it) replay the run's
        recorded steps (``replaycheck.divergence``)? A run with no history, one on this very
        version, or one whose agent this worker cannot load (its engine will say why) is taken."""
        if row["version"] is None or row["incarnation"] == 0:
            return True
        key = (str(row["id"]), int(row["incarnation"]))
        if key not in self._verdicts:
            agent = self._agent(str(row["agent"]))
            blocked = (
                divergence(agent, conn, key[0])
                if agent is not None and agent.version != row["version"]
                else None
            )
            if blocked is not None and agent is not None:
                self._refusals.append((key[0], blocked, agent.version))
            self._verdicts[key] = blocked is None
        return self._verdicts[key]

    def _agent(self, spec: str) -> Runnable | None:
        if spec not in self._agents:
            try:
                self._agents[spec] = resolve(spec)
            except SteplogError:
                self._agents[spec] = None
        return self._agents[spec]

    def _record_refusals(self, conn: LogConnection) -> None:
        """Say and record (``run.blocked``, one ``resume_refused``) each run this worker's code
        cannot replay, once: another worker's code may."""
        while self._refusals:
            rid, blocked, version = self._refusals.pop(0)
            self._blocked.add(rid)
            reason = f"blocked for the code of worker {self.name} (version {version}): {blocked}"
            record_refusal(
                conn,
                rid,
                reason=reason,
                at_step=blocked.at_step,
                version=version,
                worker={"host": me().host, "pid": me().pid},
            )
            self._say(f"steplog worker {self.name}: run {rid} left for another worker: {reason}")

    def _start(self, job: Job) -> None:
        argv = python_argv(
            "steplog",
            "run",
            job.agent,
            "--run-id",
            job.run_id,
            "--db",
            str(self.db),
            "--exit-when-waiting",
            *job.launch.engine_args(default_lease_seconds=self.lease_seconds),
        )
        env = child_env()
        env[DIE_WITH_PARENT_ENV] = str(me().pid)
        proc = spawn(argv, env=env, stdout=subprocess.DEVNULL)
        self._engines[job.run_id] = _Engine(job, proc, time.monotonic())
        how = f"{job.status}" + (f"; {job.takeover}" if job.takeover else "")
        self._say(
            f"steplog worker {self.name}: run {job.run_id} ({job.agent}, {how}) -> engine pid "
            f"{proc.pid}"
        )

    def _reap(self) -> None:
        """Collect the engines that exited (their runs are handed back by ``_hand_back_exited``)."""
        for rid, engine in list(self._engines.items()):
            code = engine.proc.poll()
            if code is None:
                continue
            del self._engines[rid]
            self._exited.append((engine, code))

    def _hand_back_exited(self, conn: LogConnection) -> None:
        """Hand back the runs of the engines that exited, oldest exit first. The log found away
        raises (the rest are kept for when it is back); another error only costs that run's
        hand-back: the claim stays on the row and lapses with this worker."""
        while self._exited:
            engine, code = self._exited[0]
            rid = engine.job.run_id
            try:
                status = hand_back(conn, rid, exit_code=code)
                self._answered()
            except LogFailure as exc:
                if is_transient(exc):
                    raise
                status = None
                self._say(f"steplog worker {self.name}: could not hand run {rid} back ({exc})")
            self._exited.pop(0)
            self._ended(engine, code, status)

    def _ended(self, engine: _Engine, code: int, status: str | None) -> None:
        rid = engine.job.run_id
        what = _ENDED.get(code) or _HANDED_BACK.get(code)
        more = ""
        if code == EXIT_BLOCKED and status not in (RunStatus.WAITING, None):
            # The engine's code could not replay the run (the agent's file changed since this
            # worker loaded it): leave it for a worker whose code can.
            what = "blocked for this worker's code"
            self._blocked.add(rid)
        if what is not None:
            self._abnormal.pop(rid, None)
            self._not_before.pop(rid, None)
        elif engine.outage:  # not the run's fault: claimable again at once, nothing counted
            what = "engine lost the log"
        else:
            what = "engine exited abnormally"
            n = self._abnormal[rid] = self._abnormal.get(rid, 0) + 1
            if n >= MAX_ABNORMAL:
                self._parked.add(rid)
                self.stats.parked.append(rid)
                more = (
                    f"; left alone after {n} such exits (run it by hand to see why: steplog run "
                    f"{engine.job.agent} --run-id {rid} --db {self.db})"
                )
            else:
                self._not_before[rid] = time.monotonic() + min(MAX_BACKOFF_SECONDS, 2.0 ** (n - 1))
        self.stats.finished[what] = self.stats.finished.get(what, 0) + 1
        seconds = time.monotonic() - engine.started
        self._say(
            f"steplog worker {self.name}: run {rid} {what}{more} (exit {code}, status "
            f"{status or '?'}, {seconds:.1f} s)"
        )

    def _backing_off(self) -> bool:
        now = time.monotonic()
        return any(t > now for rid, t in self._not_before.items() if rid not in self._parked)

    def _stop_engines(self, conn: LogConnection | None) -> None:
        """Ask every engine to stop at a safe point; kill what is left after ``grace`` seconds.
        Their runs are handed back while the log answers; without it, they are free once this
        worker is gone."""
        for engine in self._engines.values():
            request_stop(engine.proc)
        self._deadline = min(self._deadline, time.monotonic() + self.grace)
        while self._engines and time.monotonic() < self._deadline:
            self._reap()
            conn = self._hand_back_or_not(conn)
            time.sleep(0.02)
        for engine in self._engines.values():
            hard_kill(engine.proc)
            engine.proc.wait()
        self._reap()
        if self._hand_back_or_not(conn) is None:
            for engine, code in self._exited:
                self._ended(engine, code, None)
            self._exited.clear()

    def _hand_back_or_not(self, conn: LogConnection | None) -> LogConnection | None:
        """``_hand_back_exited`` when stopping: a log found away is given up on (``None``)."""
        if conn is None:
            return None
        try:
            self._hand_back_exited(conn)
        except LogFailure:  # away (anything else was dealt with run by run)
            return None
        return conn

    # -- losing the log and finding it again ---------------------------------------------------

    def _lost(self, exc: BaseException) -> None:
        """The log was found away: say so once per outage; mark the engines it may take down."""
        for engine in [*self._engines.values(), *(e for e, _ in self._exited)]:
            engine.outage = True
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            self._wait = FIRST_RECONNECT_SECONDS
            self._say(
                f"steplog worker {self.name}: lost the log at {self.db} ({first_line(exc)}); "
                "reconnecting…"
            )

    def _reopen(self) -> LogConnection | None:
        """Wait (longer each time, jittered) and open the log again, checked as at start;
        ``None`` while it is still away or once a stop is asked for."""
        self._nap(self._rng.uniform(self._wait / 2, self._wait))
        self._wait = min(self._wait * 2, MAX_RECONNECT_SECONDS)
        if self._stopping is not None:
            return None
        try:
            return open_log(self.db)
        except (SteplogError, LogFailure) as exc:
            if is_transient(exc):
                return None
            raise  # what is there now is not a log this worker may use (foreign, damaged, newer)

    def _answered(self) -> None:
        """The log just answered: if it had been away, say that it is back."""
        if self._lost_at is not None:
            away = time.monotonic() - self._lost_at
            self._lost_at = None
            self._wait = FIRST_RECONNECT_SECONDS
            self._say(
                f"steplog worker {self.name}: the log is back after {away:.1f} s; claiming again"
            )

    def _nap(self, seconds: float) -> None:
        """Sleep, but wake within 50 ms of a stop signal (``time.sleep`` resumes after one)."""
        until = time.monotonic() + seconds
        while self._stopping is None and (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))


def _close(conn: LogConnection) -> None:
    # A connection to a log that went away may fail to close; there is nothing left to do then.
    with contextlib.suppress(Exception):
        conn.close()


__all__ = ["MAX_ABNORMAL", "Worker", "WorkerStats"]
