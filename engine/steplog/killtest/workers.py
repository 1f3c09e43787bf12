"""The worker storm: several ``steplog worker`` processes share one queue, and whole workers are
SIGKILLed at random moments and started again.

What it proves: a worker's death loses nothing and duplicates nothing. Its engines die with it
(``procs.die_with_parent``), another worker takes their runs over at once (same host: the dead
holder is seen dead), every run ends ``succeeded``, and the outbox's own ledger holds each
message exactly once: every key a run's log says it completed delivered once, no delivery
without one, and no body delivered under two keys.

The log is a SQLite file in the storm's folder, or a shared database server's that others use too
(``db``): there the storm's runs get ids of their own (``storm-DATE-TIME-HEX-NNN``), its workers
claim only those (``steplog worker --run-prefix``), and it judges only those; the runs stay in the
database when it is done. The outbox and the runs' workdirs are files in the storm's folder on both.
"""

from __future__ import annotations

import random
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steplog.control.procs import child_env, kill_group, python_argv, spawn, stop_group
from steplog.control.queue import submit
from steplog.errors import SteplogError
from steplog.log.db import LogConnection, LogOperationFailed, open_readonly
from steplog.log.events import EventKind
from steplog.log.launch import Launch
from steplog.log.lease import process_alive
from steplog.log.ledger import completed_post_keys
from steplog.log.location import LogLocation
from steplog.log.logread import events_of_kind
from steplog.log.runs import count_ended, status_counts
from steplog.log.runstatus import RunStatus
from steplog.outbox import start_outbox
from steplog.runtime.agent import resolve


@dataclass
class _WorkerProc:
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class WorkerStormResult:
    runs: int
    statuses: dict[str, int]
    """Runs by final status."""
    worker_kills: int
    kills_asked: int
    """Kills asked for; fewer land when the runs are all done first."""
    kills_landed: int
    """Worker kills that took at least one live engine down with them."""
    engines_killed: int
    """Engines alive at the moment their worker was SIGKILLed (all must be gone after)."""
    orphans: list[int]
    """Engines of killed workers still alive afterwards (must be none)."""
    takeovers: int
    """Claims of a run whose previous engine was gone (``worker_claimed`` with a takeover)."""
    takeover_seconds: list[float]
    """For each engine killed with its worker while holding a run: from the worker's kill to the
    next engine's ``lease_acquired`` on that run (another worker's, or the restarted one's)."""
    deliveries: int
    duplicate_keys: list[str]
    """Keys a log says were completed but the outbox delivered a different number of times than
    once."""
    stray_deliveries: list[str]
    """Deliveries whose key no run's log completed."""
    duplicate_bodies: int
    """Groups of equal bodies one run had delivered under different keys (runs of one demo send
    equal bodies to each other: those are not duplicates)."""
    clean_exits: int
    """Workers that exited 0 when stopped with SIGTERM at the end."""
    workers_stopped: int
    seconds: float
    details: list[str] = field(default_factory=list)

    def _latency(self) -> str:
        if not self.takeover_seconds:
            return ""
        ordered = sorted(self.takeover_seconds)
        return (
            f" (kill -> next engine on the run: median {ordered[len(ordered) // 2]:.2f} s, max "
            f"{ordered[-1]:.2f} s)"
        )

    @property
    def passed(self) -> bool:
        return (
            self.statuses == {RunStatus.SUCCEEDED: self.runs}
            and not self.orphans
            and not self.duplicate_keys
            and not self.stray_deliveries
            and not self.duplicate_bodies
            and self.clean_exits == self.workers_stopped
        )

    def summary(self) -> str:
        return (
            f"{'PASS' if self.passed else 'FAIL'}: {self.runs} runs {self.statuses}, "
            f"{self.worker_kills} worker kills (of {self.kills_asked} asked; {self.kills_landed} "
            f"landed, {self.engines_killed} engines with them, {len(self.orphans)} orphans), "
            f"{self.takeovers} takeovers{self._latency()}, {self.deliveries} deliveries, "
            f"{len(self.duplicate_keys)} duplicate keys, {len(self.stray_deliveries)} stray, "
            f"{self.duplicate_bodies} duplicate bodies, {self.clean_exits}/{self.workers_stopped} "
            "clean "
            f"stops, {self.seconds:.1f} s"
        )


def worker_storm(
    root: Path,
    *,
    agent: str = "demo",
    runs: int = 30,
    workers: int = 3,
    concurrency: int = 2,
    kills: int = 10,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    pace: float = 0.0,
    gap: tuple[float, float] = (0.3, 1.2),
    time_limit: float = 120.0,
    db: LogLocation | None = None,
) -> WorkerStormResult:
    """Queue ``runs`` runs of ``agent`` in a fresh log under ``root`` (or as new runs in the
    shared server log ``db``), work them with ``workers`` workers, SIGKILL a random worker ``kills``
    times (one running an engine when any does; ``gap`` seconds apart, drawn from
    ``random.Random(seed)``) and start a new one each time; then stop the workers with SIGTERM
    and judge from the log and the outbox's ledger."""
    root.mkdir(parents=True, exist_ok=True)
    log: LogLocation = db if db is not None else root / "steplog.db"
    # On a shared database the storm's runs are told apart from everyone else's by their ids.
    prefix = (
        f"storm-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}-" if db is not None else "w"
    )
    rng = random.Random(seed)
    started = time.monotonic()
    spec = resolve(agent)
    with start_outbox(root / "outbox.db") as outbox:
        ids = [
            submit(
                spec,
                run_id=f"{prefix}{i:03d}",
                db=log,
                workdir=root / "runs" / f"{prefix}{i:03d}",
                outbox=outbox.url,
                params=dict(params or {}),
                launch=Launch(pace=pace, sync="normal"),
            )
            for i in range(runs)
        ]
        procs: list[_WorkerProc] = []
        engines_of: dict[int, list[int]] = {}
        n_started = 0

        def start() -> None:
            nonlocal n_started
            n_started += 1
            out = root / f"worker-{n_started}.log"
            with open(out, "wb") as err:
                proc = spawn(
                    python_argv(
                        "steplog",
                        "worker",
                        "--db",
                        str(log),
                        "--concurrency",
                        str(concurrency),
                        "--run-prefix",
                        prefix,
                        "--poll",
                        "0.05",
                        "--grace",
                        "20",
                    ),
                    env=child_env(),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            procs.append(_WorkerProc(proc, out))

        for _ in range(workers):
            start()
        worker_kills = landed = engines_killed = 0
        killed: list[_WorkerProc] = []
        killed_at: dict[int, float] = {}
        deadline = time.monotonic() + time_limit
        next_kill = time.monotonic() + rng.uniform(*gap)
        reader = open_readonly(log)
        try:
            while not _all_ended(reader, ids):
                if time.monotonic() > deadline:
                    raise SteplogError(
                        f"the worker storm did not finish within {time_limit:.0f} s; its logs are "
                        f"in {root}"
                    )
                if worker_kills < kills and time.monotonic() >= next_kill:
                    # A worker that runs an engine right now, if any does: killing an idle one
                    # tests nothing (under load most kills fell between runs and too few landed).
                    engines = [
                        [pid for pid in _engine_pids(w.log) if process_alive(pid)] for w in procs
                    ]
                    busy = [i for i, live in enumerate(engines) if live]
                    pick = rng.choice(busy) if busy else rng.randrange(len(procs))
                    victim, live = procs.pop(pick), engines[pick]
                    for pid in live:
                        killed_at[pid] = time.time()
                    kill_group(victim.proc)
                    worker_kills += 1
                    landed += bool(live)
                    engines_killed += len(live)
                    engines_of[victim.proc.pid] = live
                    killed.append(victim)
                    start()
                    next_kill = time.monotonic() + rng.uniform(*gap)
                time.sleep(0.02)
        finally:
            reader.close()
            codes = [stop_group(w.proc, grace=30.0) for w in procs]
        time.sleep(0.5)  # an engine SIGKILLed by its parent's death is reaped by init meanwhile
        orphans = [
            pid for w in killed for pid in engines_of.get(w.proc.pid, []) if process_alive(pid)
        ]
        ledger = outbox.ledger()
    return _judge(
        log,
        ids,
        ledger,
        killed_at,
        worker_kills=worker_kills,
        kills_asked=kills,
        landed=landed,
        engines_killed=engines_killed,
        orphans=orphans,
        codes=codes,
        seconds=time.monotonic() - started,
    )


def _judge(
    log: LogLocation,
    ids: list[str],
    ledger: Any,
    killed_at: dict[int, float],
    *,
    worker_kills: int,
    kills_asked: int,
    landed: int,
    engines_killed: int,
    orphans: list[int],
    codes: list[int],
    seconds: float,
) -> WorkerStormResult:
    """The verdict on the storm's runs ``ids`` (only those: a shared log holds others)."""
    conn = open_readonly(log, one_shot=True)
    try:
        statuses = status_counts(conn, ids)
        completed = {key for rid in ids for key in completed_post_keys(conn, rid)}
        claimed = [e.data for e in events_of_kind(conn, EventKind.WORKER_CLAIMED, ids)]
        acquired = [(e.ts, e.data) for e in events_of_kind(conn, EventKind.LEASE_ACQUIRED, ids)]
    finally:
        conn.close()
    takeovers = sum(1 for data in claimed if data.get("takeover") is not None)
    latencies = [
        ts - killed_at[int(data["previous_pid"])]
        for ts, data in acquired
        if data.get("previous_pid") is not None and int(data["previous_pid"]) in killed_at
    ]
    delivered: dict[str, int] = {}
    for d in ledger.deliveries:
        delivered[d.key] = delivered.get(d.key, 0) + 1
    return WorkerStormResult(
        runs=len(ids),
        statuses=statuses,
        worker_kills=worker_kills,
        kills_asked=kills_asked,
        kills_landed=landed,
        engines_killed=engines_killed,
        orphans=orphans,
        takeovers=takeovers,
        takeover_seconds=[round(x, 3) for x in latencies],
        deliveries=len(ledger.deliveries),
        duplicate_keys=sorted(k for k in completed if delivered.get(k, 0) != 1),
        stray_deliveries=sorted(k for k in delivered if k not in completed),
        duplicate_bodies=sum(len(ledger.for_run(rid).duplicates()) for rid in ids),
        clean_exits=sum(1 for c in codes if c == 0),
        workers_stopped=len(codes),
        seconds=seconds,
    )


def _all_ended(conn: LogConnection, ids: list[str]) -> bool:
    try:
        done = count_ended(conn, ids)
    except LogOperationFailed:  # a log busy for a moment
        return False
    return done >= len(ids)


def _engine_pids(log: Path) -> list[int]:
    """The engines a worker says it started (``... -> engine pid N``)."""
    pids = []
    for line in log.read_text(errors="replace").splitlines():
        head, sep, tail = line.rpartition("-> engine pid ")
        if sep and tail.strip().isdigit():
            pids.append(int(tail.strip()))
    return pids


__all__ = ["WorkerStormResult", "worker_storm"]
