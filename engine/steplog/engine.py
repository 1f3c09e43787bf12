"""Start or resume one run: open the log, take the lease, re-enter the agent, finish.

Everything that can be refused (bad params, a foreign log, a live lease) is refused before the
first write, so a refused start leaves the log byte for byte as it was.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .agent import Agent, bind_params
from .db import Synchronous, default_db_path, immediate, open_log, private_dir
from .errors import Fenced, LeaseHeld, LogWriteError, RunStopped, UsageError
from .journal import Journal, Usage, dumps, load_steps
from .lease import DEFAULT_LEASE_SECONDS, me, vacancy
from .policies import Budget
from .redact import redact
from .runtime import Run
from .status import TERMINAL, outcome_error

_RUN_COLUMNS = (
    "id, agent, model, params, status, reason, result, workdir, outbox, limit_steps, limit_tokens,"
    " limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, used_steps, used_tokens,"
    " tokens_estimated, reserved_tokens, used_seconds, used_cost_usd, reserved_cost_usd, used_retries,"
    " step_executions, incarnation, lease_pid, lease_host, lease_boot, lease_proc_start, lease_expires"
)


@dataclass(frozen=True)
class Outcome:
    run_id: str
    status: str
    reason: str | None
    result: Any
    resumed: bool
    incarnation: int

    def value(self) -> Any:
        """The agent's result, or the run's terminal error raised."""
        if self.status == "succeeded":
            return self.result
        raise outcome_error(self.run_id, self.status, self.reason)


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")


def new_run_id() -> str:
    """Sortable by start time, unique without coordination."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _budget_of(row: sqlite3.Row) -> Budget:
    return Budget(max_steps=row["limit_steps"], max_tokens=row["limit_tokens"],
                  max_seconds=row["limit_seconds"], max_cost_usd=row["limit_cost_usd"],
                  max_retries=row["limit_retries"], max_recoveries=row["limit_recoveries"])


def _exhausted(budget: Budget, row: sqlite3.Row) -> bool:
    """Would this budget still stop the run where it gave up?"""
    checks = (
        (budget.max_steps, row["used_steps"]),
        (budget.max_tokens, row["used_tokens"] + row["reserved_tokens"]),
        (budget.max_seconds, row["used_seconds"]),
        (budget.max_cost_usd, row["used_cost_usd"] + row["reserved_cost_usd"]),
        (budget.max_retries, row["used_retries"]),
    )
    return any(limit is not None and used >= limit for limit, used in checks)


class _Heartbeat(threading.Thread):
    """Renews the lease while a long step runs; notices a takeover and raises the fence flag."""

    def __init__(self, db: Path, journal: Journal, lease_seconds: float) -> None:
        super().__init__(name="steplog-lease", daemon=True)
        self._db, self._journal, self._period = db, journal, lease_seconds / 3
        self._stop_event = threading.Event()

    def run(self) -> None:
        conn = sqlite3.connect(str(self._db), isolation_level=None, timeout=10)
        try:
            conn.execute("PRAGMA synchronous = NORMAL")  # a lost renewal only shortens the lease
            while not self._stop_event.wait(self._period):
                j = self._journal
                try:
                    cur = conn.execute(
                        "UPDATE run SET lease_expires = ? WHERE id = ? AND incarnation = ? AND status = 'running'",
                        (time.time() + self._period * 3, j.run_id, j.incarnation))
                except sqlite3.Error:
                    continue
                if cur.rowcount == 0:
                    j.fenced.set()
                    return
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop_event.set()


def execute(agent: Agent[..., Any], *, run_id: str | None = None, db: Path | None = None,
            workdir: Path | None = None, outbox: str | None = None, params: dict[str, Any] | None = None,
            limits: dict[str, Any] | None = None, model: str | None = None, base_url: str | None = None,
            pace: float = 0.0, lease_seconds: float = DEFAULT_LEASE_SECONDS,
            synchronous: Synchronous = "FULL", on_start: Any = None) -> Outcome:
    """Start or resume a run and drive it to a terminal state (or until killed).

    ``limits`` are ``Budget`` field overrides (``None`` values ignored): for a new run over the
    agent's default budget, for an existing one over its recorded limits (raising a limit that
    stopped a ``gave_up`` run reopens it).
    """
    from .llm import make_model

    spec = agent.default_spec()
    bound = bind_params(agent, params or {})
    if run_id is not None and not _RUN_ID.fullmatch(run_id):
        raise UsageError(f"run id {run_id!r} may use letters, digits, '-', '_' and '.' only (at most 100)")
    if outbox is not None and not outbox.startswith(("http://", "https://")):
        raise UsageError(f"--outbox {outbox!r} is not an http(s) URL; start one with `steplog outbox --port 0`")
    if agent.needs_outbox and outbox is None and run_id is None:
        raise UsageError(f"agent {spec} posts messages: pass --outbox URL (start one with `steplog outbox --port 0`)")
    if pace < 0:
        raise UsageError(f"--pace must be 0 or more seconds (got {pace})")
    if lease_seconds <= 0:
        raise UsageError(f"--lease-seconds must be positive (got {lease_seconds})")
    db_path = Path(db) if db else default_db_path()
    conn = open_log(db_path, synchronous=synchronous)
    conn.row_factory = sqlite3.Row
    try:
        claimed = _claim(conn, agent, spec, run_id, db_path, workdir, outbox, bound, limits or {}, model, lease_seconds)
        if isinstance(claimed, Outcome):
            return claimed
        row, incarnation, resumed = claimed
        conn.row_factory = None
        the_budget = _budget_of(row)
        usage = Usage(steps=row["used_steps"], tokens=row["used_tokens"] + row["reserved_tokens"],
                      tokens_estimated=row["tokens_estimated"], cost_usd=row["used_cost_usd"] + row["reserved_cost_usd"],
                      retries=row["used_retries"], executions=row["step_executions"],
                      seconds_base=row["used_seconds"])
        journal = Journal(conn, row["id"], incarnation, usage, lease_seconds=lease_seconds, synchronous=synchronous)
        chat_model = make_model(row["model"], base_url=base_url)
        run = Run(run_id=row["id"], workdir=Path(row["workdir"]), outbox=row["outbox"],
                  params=json.loads(row["params"]), journal=journal, steps=load_steps(conn, row["id"]),
                  budget=the_budget, retry=agent.retry, model=chat_model, pace=pace)
        private_dir(Path(row["workdir"]))
        if on_start is not None:
            on_start(run.id, incarnation, resumed)
        heartbeat = _Heartbeat(db_path, journal, lease_seconds)
        heartbeat.start()
        try:
            return _drive(agent, run, journal, resumed)
        finally:
            heartbeat.stop()
    finally:
        conn.close()


def _drive(agent: Agent[..., Any], run: Run, journal: Journal, resumed: bool) -> Outcome:
    try:
        result = agent.fn(run, **run.params)
        if run._stopping is not None:
            raise run._stopping
        try:
            result_json = dumps(result)
        except (TypeError, ValueError):
            raise run._stop(outcome_error(run.id, "failed",
                f"the agent returned {type(result).__name__}, which cannot be recorded as JSON")) from None
        journal.finish("succeeded", None, result_json)
        return Outcome(run.id, "succeeded", None, json.loads(result_json), resumed, journal.incarnation)
    except (Fenced, LogWriteError):
        raise  # nothing more can be recorded; the run stays resumable
    except RunStopped as stop:
        journal.finish(stop.status, stop.reason, None, stop.details)
        return Outcome(run.id, stop.status, stop.reason, None, resumed, journal.incarnation)
    except Exception as exc:
        # Agent code may have turned our stop into another error; the stop still wins.
        final = run._stopping or outcome_error(
            run.id, "failed", redact(f"the agent raised outside any step: {type(exc).__name__}: {exc}"))
        journal.finish(final.status, final.reason, None, final.details)
        return Outcome(run.id, final.status, final.reason, None, resumed, journal.incarnation)
    except BaseException:
        journal.release()  # SIGTERM / Ctrl-C: let the next engine take over at once
        raise


def _claim(conn: sqlite3.Connection, agent: Agent[..., Any], spec: str, run_id: str | None, db_path: Path,
           workdir: Path | None, outbox: str | None, params: dict[str, Any], limits: dict[str, Any],
           model: str | None, lease_seconds: float) -> Outcome | tuple[sqlite3.Row, int, bool]:
    """Create or find the run and take its lease, in one transaction. Refusals write nothing."""
    now = time.time()
    holder = me()
    with immediate(conn):
        row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM run WHERE id = ?", (run_id,)).fetchone() if run_id else None
        resumed = row is not None
        if row is None:
            if agent.needs_outbox and not outbox:
                raise UsageError(f"agent {spec} posts messages: pass --outbox URL (start one with `steplog outbox --port 0`)")
            run_id = run_id or new_run_id()
            b = agent.budget.merged(**limits)
            wd = (workdir or db_path.parent / "runs" / run_id).expanduser().resolve()
            conn.execute(
                "INSERT INTO run (id, agent, model, params, workdir, outbox, limit_steps, limit_tokens,"
                " limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, spec, model, dumps(params), str(wd), outbox, b.max_steps, b.max_tokens,
                 b.max_seconds, b.max_cost_usd, b.max_retries, b.max_recoveries, now, now))
            conn.execute("INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, 0, 'run_created', ?)",
                         (run_id, now, dumps({"agent": spec, "params": params, "model": model or "offline",
                                              "budget": {"steps": b.max_steps, "tokens": b.max_tokens,
                                                         "seconds": b.max_seconds, "cost_usd": b.max_cost_usd,
                                                         "retries": b.max_retries, "recoveries": b.max_recoveries}})))
            row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM run WHERE id = ?", (run_id,)).fetchone()
        else:
            if row["agent"] != spec:
                raise UsageError(f"run {run_id} belongs to agent {row['agent']}, not {spec}; pass the same agent to resume it")
            if params and params != json.loads(row["params"]):
                raise UsageError(f"run {run_id} was started with params {row['params']}; resume it without --param")
            if workdir is not None and str(workdir.expanduser().resolve()) != row["workdir"]:
                raise UsageError(f"run {run_id} works in {row['workdir']}; omit --workdir to resume it")
            raised = _budget_of(row).merged(**limits) if any(v is not None for v in limits.values()) else None
            if row["status"] in TERMINAL:
                reopen = row["status"] == "gave_up" and raised is not None and not _exhausted(raised, row)
                if not reopen:
                    return Outcome(row["id"], row["status"], row["reason"], json.loads(row["result"] or "null"),
                                   True, row["incarnation"])
            why = vacancy(pid=row["lease_pid"], host=row["lease_host"], boot=row["lease_boot"],
                          proc_start=row["lease_proc_start"], expires=row["lease_expires"], now=now)
            if why is None:
                raise LeaseHeld(f"run {run_id} is being worked on by pid {row['lease_pid']} on {row['lease_host']} "
                                f"(lease until {time.strftime('%H:%M:%S', time.localtime(row['lease_expires']))}); "
                                "wait for it or stop that engine")
            if raised is not None and raised != _budget_of(row):
                conn.execute(
                    "UPDATE run SET limit_steps = ?, limit_tokens = ?, limit_seconds = ?, limit_cost_usd = ?,"
                    " limit_retries = ?, limit_recoveries = ?, status = 'running', reason = NULL,"
                    " finished_at = NULL WHERE id = ?",
                    (raised.max_steps, raised.max_tokens, raised.max_seconds, raised.max_cost_usd,
                     raised.max_retries, raised.max_recoveries, run_id))
                conn.execute("INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, ?, 'budget_changed', ?)",
                             (run_id, now, row["incarnation"], dumps({
                                 "steps": raised.max_steps, "tokens": raised.max_tokens, "seconds": raised.max_seconds,
                                 "cost_usd": raised.max_cost_usd, "retries": raised.max_retries,
                                 "recoveries": raised.max_recoveries, "reopened": row["status"] == "gave_up"})))
            if outbox and outbox != row["outbox"]:
                conn.execute("UPDATE run SET outbox = ? WHERE id = ?", (outbox, run_id))
            if model and model != row["model"]:
                conn.execute("UPDATE run SET model = ? WHERE id = ?", (model, run_id))
        previous = row["lease_pid"]
        incarnation = row["incarnation"] + 1
        conn.execute(
            "UPDATE run SET incarnation = ?, lease_pid = ?, lease_host = ?, lease_boot = ?, lease_proc_start = ?,"
            " lease_expires = ?, updated_at = ?,"
            # Reservations of a dead engine stay charged: its model call may have been billed.
            " used_tokens = used_tokens + reserved_tokens, reserved_tokens = 0,"
            " used_cost_usd = used_cost_usd + reserved_cost_usd, reserved_cost_usd = 0"
            " WHERE id = ?",
            (incarnation, holder.pid, holder.host, holder.boot, holder.proc_start, now + lease_seconds, now, run_id))
        conn.execute("INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, ?, 'lease_acquired', ?)",
                     (run_id, now, incarnation, dumps({
                         "pid": holder.pid, "host": holder.host, "resumed": resumed, "previous_pid": previous,
                         "forfeited_tokens": row["reserved_tokens"],
                         "takeover": vacancy(pid=row["lease_pid"], host=row["lease_host"], boot=row["lease_boot"],
                                             proc_start=row["lease_proc_start"], expires=row["lease_expires"], now=now)
                                     if previous else None})))
        row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM run WHERE id = ?", (run_id,)).fetchone()
    return row, incarnation, resumed
