"""Run control from outside the engine: cancel, signal, retry and fork.

Each operation is one transaction on the log that holds the run's lock (``db.run_locked``), like
an engine's claim: it checks the run's state, changes the run's rows and appends the matching
``event`` rows (the monitor sees every change), or refuses with a ``ControlRefused``/``UnknownRun``
and writes nothing. On PostgreSQL that lock is the run's alone: control of one run never waits
for another's. None of them sends an effect: retry and fork only prepare a run, which an engine then
runs like any other (``steplog retry``/``fork`` do that right after).

- **cancel**: a run no live engine holds ends ``cancelled`` here and now; one that a live engine
  holds gets a request (``run.cancel_requested``), which that engine honours at its next step
  boundary (or in the middle of a long step, via its heartbeat), or the next engine at its claim.
- **signal**: stored until a ``run.wait_for`` step consumes it, in the same transaction that
  records that step: exactly once, however engines die.
- **retry**: a ``failed`` run back to ``running``, its failed step's attempt counters fresh.
- **fork**: a new run whose steps ``1..N-1`` are copies of the parent's committed steps (results
  and decisions, never effects: those keep the parent's keys and are not sent again); from step
  N on it has its own keys, so its effects are new effects, except in a step the parent left
  unfinished: that one's effect is carried on under the parent's key (``ledger.carried_effect``),
  as it may have reached its target already. Its workdir starts as a copy.

The rows are written by the log (``steplog.log.runs``, ``steplog.log.ledger``); this module holds
the rules: what may be done to a run in its state, and what to say when it may not.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.control.edit import NOT_EDITED, Unset, edited_result
from steplog.errors import ControlRefused, UnknownRun, UsageError
from steplog.log import ledger, runs
from steplog.log.claim import budget_of
from steplog.log.db import LogConnection, LogRow, location, open_log, private_dir, run_locked
from steplog.log.integrity import probe
from steplog.log.journal import dumps
from steplog.log.launch import Launch
from steplog.log.lease import row_vacancy
from steplog.log.location import LogLocation
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL
from steplog.log.steps import contiguous_committed, step_record, unfinished_steps

if TYPE_CHECKING:
    from steplog.runtime.agent import Agent

MAX_SIGNAL_BYTES = 1_000_000
"""Signal data is a decision a person or a program hands to a run, not a file transfer."""


@contextmanager
def _log(db: LogLocation | None) -> Iterator[tuple[LogLocation, LogConnection]]:
    path = location(db)
    if not path.exists():
        raise UsageError(f"no log at {path}; pass --db with the log the run is in")
    conn = open_log(path)
    try:
        yield path, conn
    finally:
        conn.close()


def _run_row(conn: LogConnection, path: LogLocation, run_id: str) -> LogRow:
    probe(conn, path, run_id)
    row = runs.run_to_change(conn, run_id)
    if row is None:
        raise UnknownRun(f"no run {run_id!r} in {path}; `steplog runs` lists the runs there")
    return row


def _held_live(row: LogRow, now: float) -> bool:
    """Does a live engine hold the run (so it must be asked, not overruled)?"""
    return row_vacancy(row, now) is None


# -- cancel ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelResult:
    run_id: str
    done: bool
    """``True``: the run is ``cancelled`` now; ``False``: its live engine was asked to stop."""
    reason: str


def cancel(
    run_id: str, reason: str | None = None, *, db: LogLocation | None = None
) -> CancelResult:
    """Cancel a run that has not finished. Nothing is sent after the cancel takes effect."""
    why = reason.strip() if reason and reason.strip() else "cancelled with steplog cancel"
    now = time.time()
    with _log(db) as (path, conn), run_locked(conn, run_id):
        row = _run_row(conn, path, run_id)
        if row["status"] in TERMINAL:
            raise ControlRefused(
                f"run {run_id} already ended {row['status']}; only a run that has not finished "
                "can be cancelled"
            )
        if _held_live(row, now):
            runs.request_cancel(conn, row, why, now)
            return CancelResult(run_id, False, why)
        runs.cancel_now(conn, row, why, now)
        return CancelResult(run_id, True, why)


def wait_until_finished(
    run_id: str, *, db: LogLocation | None, timeout: float, poll: float = 0.05
) -> str:
    """Poll (read-only) until the run is terminal or ``timeout`` passes; its status."""
    from steplog.log.db import open_readonly

    path = location(db)
    deadline = time.monotonic() + timeout
    while True:
        conn = open_readonly(path, one_shot=True)
        try:
            status = runs.status_of(conn, run_id)
        finally:
            conn.close()
        if status in TERMINAL or time.monotonic() >= deadline:
            return status
        time.sleep(poll)


# -- signal ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignalSent:
    run_id: str
    name: str
    signal_id: int
    duplicate: bool
    """The same ``key`` was sent before: this is that signal, nothing new was stored."""
    status: str
    waiting_for: str | None
    engine_live: bool
    agent: str


def signal(
    run_id: str,
    name: str,
    data: Any = None,
    *,
    db: LogLocation | None = None,
    key: str | None = None,
) -> SignalSent:
    """Deliver the named signal to a run: consumed by the run's next (or current)
    ``wait_for(name)``.

    With ``key``, sending again (a retried script, a double click) is the same signal, once.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise UsageError(f"a signal name has 1 to 200 characters (got {name!r})")
    try:
        data_json = dumps(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"signal data must be JSON ({exc})") from None
    if len(data_json.encode()) > MAX_SIGNAL_BYTES:
        raise UsageError(
            f"signal data is {len(data_json.encode())} bytes; at most {MAX_SIGNAL_BYTES} are "
            "accepted"
        )
    now = time.time()
    with _log(db) as (path, conn), run_locked(conn, run_id):
        row = _run_row(conn, path, run_id)
        if row["status"] in TERMINAL:
            raise ControlRefused(
                f"run {run_id} already ended {row['status']}; signals reach only runs that have "
                "not finished"
            )
        prior = runs.signal_with_key(conn, run_id, key) if key is not None else None
        duplicate = prior is not None
        signal_id = (
            prior if prior is not None else runs.store_signal(conn, row, name, data_json, key, now)
        )
        return SignalSent(
            run_id,
            name,
            signal_id,
            duplicate,
            row["status"],
            row["waiting_for"],
            _held_live(row, now),
            row["agent"],
        )


# -- retry -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPrepared:
    run_id: str
    agent: str
    failure: str
    warnings: tuple[str, ...]


def _failure_kind(conn: LogConnection, run_id: str, reason: str) -> str:
    """How the run failed, as recorded with its end (older logs: read from the reason's words)."""
    recorded = runs.recorded_failure(conn, run_id)
    if recorded is not None:
        return recorded
    if reason.startswith("non-determinism"):
        return "non_determinism"
    if reason.startswith("needs reconciliation"):
        return "needs_reconciliation"
    return "step"


def prepare_retry(
    run_id: str, *, db: LogLocation | None = None, force: bool = False, launch: Launch | None = None
) -> RetryPrepared:
    """Set a ``failed`` run going again from its failed step, with fresh attempt counters: it is
    ``queued`` until an engine takes it (``launch``: how a worker starts it; default: as before).

    Refused without ``force`` for non-determinism (the code no longer matches the log: fork
    instead) and for an effect that needs reconciliation (sending it again may duplicate it).
    """
    now = time.time()
    with _log(db) as (path, conn), run_locked(conn, run_id):
        row = _run_row(conn, path, run_id)
        status, reason = row["status"], row["reason"] or ""
        if status != RunStatus.FAILED:
            raise ControlRefused(_why_not_retry(row))
        kind = _failure_kind(conn, run_id, reason)
        warnings: list[str] = []
        resent: list[str] = []
        if kind == "non_determinism":
            if not force:
                raise ControlRefused(
                    f"run {run_id} failed on non-determinism ({reason}); a retry replays the same "
                    "log against the same code and fails again. Fork it before the step that "
                    "changed (steplog "
                    f"fork {run_id} "
                    "--at-step N), or pass --force once the agent makes its recorded steps again"
                )
            warnings.append(
                "--force: replaying a run that failed on non-determinism; it fails again unless "
                "the agent now makes the steps its log recorded"
            )
        if kind == "needs_reconciliation":
            unconfirmed = ledger.unconfirmed(conn, run_id)
            unconfirmed += _carried_unconfirmed(conn, row)  # a fork's, left by its parent
            if not force:
                raise ControlRefused(
                    f"run {run_id} stopped because effect(s) {', '.join(unconfirmed) or '?'} may "
                    "or may not have happened and their target cannot deduplicate; check the "
                    "target by hand, then pass --force to send them again"
                )
            ledger.forget_unconfirmed(conn, run_id)
            resent = unconfirmed
            warnings.append(
                f"--force: effect(s) {', '.join(unconfirmed)} will be sent again; their target "
                "cannot deduplicate, so do this only after checking it did not receive them"
            )
        # The failed step starts afresh (attempts and recoveries from zero); its history stays in
        # the events.
        runs.set_going_again(
            conn,
            row,
            now,
            launch=launch,
            details={
                "previous_reason": reason,
                "failure": kind,
                "forced": force,
                "resent": resent,
            },
        )
        return RetryPrepared(run_id, row["agent"], kind, tuple(warnings))


def _carried_unconfirmed(conn: LogConnection, row: LogRow) -> list[str]:
    """Keys of the non-idempotent effects a fork's unfinished steps carry on from its parent,
    unconfirmed (``ledger.carried_effect``). ``--force`` does not delete them (they are the
    parent's record): the ``retried`` event lists them as ``resent``, and the fork then sends
    them again under keys of its own (``ledger.released_effects``)."""
    if row["parent_run_id"] is None:
        return []
    forked_from = (str(row["parent_run_id"]), int(row["parent_step"]))
    keys: list[str] = []
    for seq in unfinished_steps(conn, row["id"]):
        idx = 0
        while (found := ledger.carried_effect(conn, forked_from, seq, idx)) is not None:
            if found.status == "started" and not found.idempotent:
                keys.append(found.key)
            idx += 1
    return keys


def why_not_retry(status: dict[str, Any]) -> str:
    """Why a run (its ``status --json`` object) is not retried: the words ``retry`` refuses it
    with."""
    return _why_not_retry({**status, "id": status["run_id"]})  # type: ignore[arg-type]


def _why_not_retry(row: LogRow) -> str:
    rid, status = row["id"], row["status"]
    if status == RunStatus.SUCCEEDED:
        return f"run {rid} succeeded; there is nothing to retry (fork it to run part of it again)"
    if status == RunStatus.GAVE_UP:
        return (
            f"run {rid} gave up ({row['reason']}); raise the limit that stopped it instead: "
            f"steplog run {row['agent']} --run-id {rid} --max-..."
        )
    if status == RunStatus.CANCELLED:
        return (
            f"run {rid} was cancelled and never runs again; fork it to carry on: steplog fork "
            f"{rid} --at-step N"
        )
    return (
        f"run {rid} has not failed (status {status}); resume it with: steplog run {row['agent']} "
        f"--run-id {rid}"
    )


# -- fork ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForkPrepared:
    run_id: str
    parent: str
    at_step: int
    copied: int
    workdir: Path
    edited: bool = False
    """Step ``at_step`` was recorded with an edited result: the fork runs from the one after."""


def fork(
    parent_id: str,
    at_step: int,
    *,
    new_run_id: str | None = None,
    db: LogLocation | None = None,
    params: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    workdir: Path | None = None,
    outbox: str | None = None,
    model: str | None = None,
    launch: Launch | None = None,
    set_result: Any = NOT_EDITED,
) -> tuple[Agent[..., Any], ForkPrepared]:
    """``prepare_fork`` with the parent's agent resolved and the new id made or checked: what
    ``steplog fork`` and ``steplog.fork`` do before running the fork."""
    from steplog.llm import check_model
    from steplog.log.db import open_readonly
    from steplog.log.runids import check_run_id
    from steplog.log.runids import new_run_id as make_id
    from steplog.log.status import run_status
    from steplog.runtime.agent import resolve

    path = location(db)
    if outbox is not None and not outbox.startswith(("http://", "https://")):
        raise UsageError(f"--outbox {outbox!r} is not an http(s) URL")
    check_model(model)
    conn = open_readonly(path, one_shot=True)
    try:
        spec = run_status(conn, parent_id, db=path)["agent"]
    finally:
        conn.close()
    agent = resolve(spec)
    new_id = new_run_id or make_id()
    check_run_id(new_id)
    agent.budget.merged(**(limits or {}))  # out-of-range limits refused before anything is written
    return agent, prepare_fork(
        parent_id,
        at_step,
        agent=agent,
        new_run_id=new_id,
        db=path,
        params=params,
        limits=limits,
        workdir=workdir,
        outbox=outbox,
        model=model,
        launch=launch,
        set_result=set_result,
    )


def prepare_fork(
    parent_id: str,
    at_step: int,
    *,
    agent: Agent[..., Any],
    new_run_id: str,
    db: LogLocation | None = None,
    params: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    workdir: Path | None = None,
    outbox: str | None = None,
    model: str | None = None,
    launch: Launch | None = None,
    set_result: Any = NOT_EDITED,
) -> ForkPrepared:
    """Create run ``new_run_id`` from ``parent_id``'s committed steps ``1..at_step-1``, ``queued``
    until an engine takes it (``launch``: how a worker starts it). With ``set_result``, step
    ``at_step`` is recorded too, with that result instead of the parent's (``control.edit``), and
    the fork runs from the step after it.

    ``params`` override the parent's (bound as for a new run), ``limits`` its budget. The new
    workdir starts as a copy of the parent's as it is now (files its later steps wrote
    included; the fork rewrites them under the same names when it gets there).
    """
    from steplog.runtime.params import bind_params

    if at_step < 1:
        raise UsageError(f"--at-step {at_step}: steps are numbered from 1")
    now = time.time()
    path = location(db)
    with _log(path) as (path, conn):
        parent = _run_row(conn, path, parent_id)
        _refuse_taken(conn, new_run_id)
        if parent["agent"] != agent.default_spec():
            raise UsageError(
                f"run {parent_id} belongs to agent {parent['agent']}, not {agent.default_spec()}"
            )
        bound = bind_params(agent, {**json.loads(parent["params"]), **(params or {})})
        budget = budget_of(parent).merged(**(limits or {}))
        target = (workdir or path.parent / "runs" / new_run_id).expanduser().resolve()
        if target.exists() and any(target.iterdir()):
            raise UsageError(
                f"workdir {target} for the fork is not empty; pass --workdir with a new folder"
            )
        _refuse_beyond(
            conn, parent_id, at_step
        )  # before copying a workdir for nothing (again under the lock)
        staged = _stage_workdir(Path(parent["workdir"]) if parent["workdir"] else None, target)
        try:
            with run_locked(conn, new_run_id):
                _refuse_taken(conn, new_run_id)  # again, under the new run's lock
                # The parent's row too, read again locked: no run control changes it meanwhile.
                parent = _run_row(conn, path, parent_id)
                _refuse_beyond(conn, parent_id, at_step)
                edit = (
                    None
                    if isinstance(set_result, Unset)
                    else edited_result(
                        step_record(conn, parent_id, at_step), parent_id, at_step, set_result
                    )
                )
                copied = runs.create_fork(
                    conn,
                    parent,
                    at_step,
                    new_run_id,
                    params=bound,
                    budget=budget,
                    workdir=target,
                    outbox=outbox or parent["outbox"],
                    model=model or parent["model"],
                    now=now,
                    edited_result=edit,
                )
                runs.enqueue(conn, new_run_id, launch or Launch.from_json(parent["launch"]))
            _move_into(staged, target)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
    private_dir(target)
    return ForkPrepared(new_run_id, parent_id, at_step, copied, target, edit is not None)


_IN_FLIGHT = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")
"""A file effect's temporary file (``effects.write_file``): half a write, renamed away when done."""


def _stage_workdir(source: Path | None, target: Path) -> Path:
    """Copy the parent's workdir beside the target first; it is moved in once the log says so.

    The parent may be running: a file effect's temporary file is left out (its engine renames it
    into place, or the fork writes the file again when it gets there), and one that vanishes
    while the tree is copied is skipped, not an error."""
    private_dir(target.parent)
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.fork-", dir=target.parent))
    if source is not None and source.is_dir():
        shutil.copytree(
            source,
            staged,
            symlinks=True,
            dirs_exist_ok=True,
            copy_function=_copy_if_there,
            ignore=lambda _folder, names: [n for n in names if _IN_FLIGHT.match(n)],
        )
        # copytree gave it the parent workdir's mode (0755 for a folder the person made).
        staged.chmod(0o700)
    return staged


def _copy_if_there(src: str, dst: str) -> None:
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass  # renamed or removed by the running parent since the folder was listed


def _refuse_beyond(conn: LogConnection, parent_id: str, at_step: int) -> None:
    have = contiguous_committed(conn, parent_id, at_step)
    if have < at_step - 1:
        raise ControlRefused(
            f"run {parent_id} has committed steps 1..{have} only; fork it at a step from 1 to "
            f"{have + 1}"
        )


def _move_into(staged: Path, target: Path) -> None:
    if not target.exists():
        staged.replace(target)
        return
    for child in staged.iterdir():  # an empty folder the person made for it
        child.replace(target / child.name)
    staged.rmdir()


def _refuse_taken(conn: LogConnection, run_id: str) -> None:
    if runs.run_exists(conn, run_id):
        raise UsageError(f"run {run_id} exists already; pick another --run-id for the fork")


__all__ = [
    "CancelResult",
    "ForkPrepared",
    "RetryPrepared",
    "SignalSent",
    "cancel",
    "fork",
    "prepare_fork",
    "prepare_retry",
    "signal",
    "wait_until_finished",
]
