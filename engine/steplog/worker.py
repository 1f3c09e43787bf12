"""``steplog worker``: claim runs off the queue and run each in an engine process of its own.

The loop, on the main thread (the engines are its children, and Linux's parent-death signal is
tied to the thread that started them):

1. reap engines that exited and hand their runs back (``queue.hand_back``);
2. while a slot is free, claim the oldest run nobody works on (``queue.claim_next_run``) and
   start ``steplog run AGENT --run-id ID --exit-when-waiting`` with the options the run was
   queued with, in a process group of its own (``procs.spawn``) that dies with the worker;
3. sleep ``poll`` seconds.

Stopping: SIGTERM, SIGINT or SIGHUP stop the claiming and ask every engine to stop
(``procs.request_stop``); an engine stops at a safe point and releases its lease, leaving the run
to any other worker, and the worker exits 0 (engines still running after ``grace`` seconds are
killed: their runs are taken over like any dead engine's). A worker killed with SIGKILL takes its
engines with it (``procs.die_with_parent``), so a worker on the same host takes their runs over
at once and one elsewhere when the leases expire.

Not spun on: a run whose engine exited waiting (exit 6) is claimable again only once its signal
is in or its wait timed out; one that ended (exit 0, 3, 4, 5) is finished; one whose engine keeps exiting abnormally
(a crash, exit 1 or 2: an agent that no longer imports, a full disk) is tried again after 1, 2,
4... s and left alone by this worker after ``MAX_ABNORMAL`` exits in a row.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from .db import LogConnection, open_log
from .errors import (EXIT_CANCELLED, EXIT_FAILED, EXIT_GAVE_UP, EXIT_LEASE_HELD, EXIT_OK, EXIT_STOPPED,
                     EXIT_WAITING)
from .interrupts import STOP_SIGNALS
from .launch import DIE_WITH_PARENT_ENV
from .lease import DEFAULT_LEASE_SECONDS, me
from .location import LogLocation
from .procs import child_env, hard_kill, python_argv, request_stop, spawn
from .queue import Job, claim_next_run, hand_back

MAX_ABNORMAL = 3
"""Abnormal engine exits in a row after which this worker leaves a run alone."""
MAX_BACKOFF_SECONDS = 60.0
STOP_GRACE_SECONDS = 30.0

_ENDED = {EXIT_OK: "succeeded", EXIT_GAVE_UP: "gave up", EXIT_FAILED: "failed", EXIT_CANCELLED: "was cancelled"}
_HANDED_BACK = {EXIT_WAITING: "waits for a signal", EXIT_LEASE_HELD: "is held by another engine",
                EXIT_STOPPED: "was stopped at a safe point (resumable)"}


@dataclass
class _Engine:
    job: Job
    proc: subprocess.Popen[bytes]
    started: float


@dataclass
class WorkerStats:
    """What one worker did, for its last line and for tests."""

    claimed: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    """Engine exits by what they meant (``succeeded``, ``waits for a signal``, ...)."""
    parked: list[str] = field(default_factory=list)


class Worker:
    def __init__(self, db: LogLocation, *, concurrency: int = 1, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 agents: Collection[str] = (), run_prefix: str = "", drain: bool = False, poll: float = 0.2,
                 grace: float = STOP_GRACE_SECONDS, say: Callable[[str], None] | None = None) -> None:
        self.db, self.concurrency, self.lease_seconds = db, concurrency, lease_seconds
        self.agents, self.drain, self.poll, self.grace = tuple(agents), drain, poll, grace
        self.run_prefix = run_prefix
        self._say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self._engines: dict[str, _Engine] = {}
        self._abnormal: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._parked: set[str] = set()
        self._stopping: str | None = None
        self._deadline = float("inf")
        self.stats = WorkerStats()
        self.name = f"{me().host}:{me().pid}"

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped by a signal (or, with ``drain``, until nothing is left); exit 0."""
        conn = open_log(self.db)  # a foreign or damaged log is refused before anything starts
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            self._say(f"steplog worker {self.name}: working on {self.db} ({self.concurrency} at a time"
                      + (f", agents {', '.join(self.agents)}" if self.agents else "")
                      + (f", runs {self.run_prefix}*" if self.run_prefix else "") + ")")
            while self._stopping is None:
                self._reap(conn)
                claimed = self._fill(conn)
                if self.drain and not self._engines and not claimed and not self._backing_off():
                    self._stopping = "drained"
                    break
                time.sleep(self.poll)
        finally:
            # Also when the loop failed (the log became unwritable): no engine is left behind.
            self._stop_engines(conn)
            conn.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        done = ", ".join(f"{n} {what}" for what, n in sorted(self.stats.finished.items())) or "no runs"
        self._say(f"steplog worker {self.name}: {self._stopping}; {self.stats.claimed} claimed, {done}"
                  + (f"; left alone: {', '.join(self.stats.parked)}" if self.stats.parked else ""))
        return 0

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
            job = claim_next_run(conn, agents=self.agents, prefix=self.run_prefix, lease_seconds=self.lease_seconds,
                                 skip={*self._engines, *self._parked, *waiting})
            if job is None:
                break
            claimed = True
            self.stats.claimed += 1
            self._start(job)
        return claimed

    def _start(self, job: Job) -> None:
        argv = python_argv("steplog", "run", job.agent, "--run-id", job.run_id, "--db", str(self.db),
                           "--exit-when-waiting", *job.launch.engine_args(default_lease_seconds=self.lease_seconds))
        env = child_env()
        env[DIE_WITH_PARENT_ENV] = str(me().pid)
        proc = spawn(argv, env=env, stdout=subprocess.DEVNULL)
        self._engines[job.run_id] = _Engine(job, proc, time.monotonic())
        how = f"{job.status}" + (f"; {job.takeover}" if job.takeover else "")
        self._say(f"steplog worker {self.name}: run {job.run_id} ({job.agent}, {how}) -> engine pid {proc.pid}")

    def _reap(self, conn: LogConnection) -> None:
        for rid, engine in list(self._engines.items()):
            code = engine.proc.poll()
            if code is None:
                continue
            del self._engines[rid]
            self._ended(conn, engine, code)

    def _ended(self, conn: LogConnection, engine: _Engine, code: int) -> None:
        rid = engine.job.run_id
        try:
            status = hand_back(conn, rid, exit_code=code)
        except sqlite3.Error as exc:  # the claim stays on the row; it lapses with this worker
            status = None
            self._say(f"steplog worker {self.name}: could not hand run {rid} back ({exc})")
        what = _ENDED.get(code) or _HANDED_BACK.get(code)
        more = ""
        if what is not None:
            self._abnormal.pop(rid, None)
            self._not_before.pop(rid, None)
        else:
            what = "engine exited abnormally"
            n = self._abnormal[rid] = self._abnormal.get(rid, 0) + 1
            if n >= MAX_ABNORMAL:
                self._parked.add(rid)
                self.stats.parked.append(rid)
                more = (f"; left alone after {n} such exits (run it by hand to see why: steplog run "
                        f"{engine.job.agent} --run-id {rid} --db {self.db})")
            else:
                self._not_before[rid] = time.monotonic() + min(MAX_BACKOFF_SECONDS, 2.0 ** (n - 1))
        self.stats.finished[what] = self.stats.finished.get(what, 0) + 1
        seconds = time.monotonic() - engine.started
        self._say(f"steplog worker {self.name}: run {rid} {what}{more} (exit {code}, status {status or '?'}, "
                  f"{seconds:.1f} s)")

    def _backing_off(self) -> bool:
        now = time.monotonic()
        return any(t > now for rid, t in self._not_before.items() if rid not in self._parked)

    def _stop_engines(self, conn: LogConnection) -> None:
        """Ask every engine to stop at a safe point; kill what is left after ``grace`` seconds."""
        for engine in self._engines.values():
            request_stop(engine.proc)
        self._deadline = min(self._deadline, time.monotonic() + self.grace)
        while self._engines and time.monotonic() < self._deadline:
            self._reap(conn)
            time.sleep(0.02)
        for engine in self._engines.values():
            hard_kill(engine.proc)
            engine.proc.wait()
        self._reap(conn)


__all__ = ["MAX_ABNORMAL", "Worker", "WorkerStats"]
