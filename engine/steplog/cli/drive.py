"""What ``steplog run`` does once its command line is read, and how a command driving an engine
ends: the one line on stderr and the exit code of an error, the line that says how a run ended.

Without click at import: ``quick`` runs ``steplog run`` through here on its way to the first step,
and click's import (with every command of ``commands`` built) cost about as much as the engine's.
Messages go through ``echo``, which imports click when it first writes; the one line written
before the first step ("resuming run ...") is written by ``_announce`` instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from steplog.errors import SteplogError, UsageError
from steplog.log.runstatus import RunStatus

if TYPE_CHECKING:
    from steplog.log.location import LogLocation

F = TypeVar("F", bound=Callable[..., Any])


def echo(message: str, *, err: bool = False) -> None:
    """``click.echo``: every message of the command line is written the one way (click strips
    escape codes from a stream that is not a terminal, and re-encodes a misconfigured one)."""
    import click

    click.echo(message, err=err)


def fail(message: str, code: int) -> NoReturn:
    echo(f"steplog: {message}", err=True)
    sys.exit(code)


def log_path(kwargs: dict[str, Any]) -> LogLocation:
    from steplog.log.db import location

    return location(kwargs.get("db"))


def guard(fn: F) -> F:
    """Turn steplog errors into one line on stderr and their documented exit code; a failure of
    the log's database too (``steplog.log.failures.explain`` words it)."""
    import functools

    from steplog.log.connection import LogFailure

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SteplogError as exc:
            fail(str(exc), exc.exit_code)
        except LogFailure as exc:
            from steplog.log.failures import explain

            explained = explain(exc, log_path(kwargs))
            if explained is None:
                raise
            fail(*explained)

    return wrapper  # type: ignore[return-value]


def parse_params(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param {item!r} is malformed; write --param KEY=VALUE")
        out[key.strip()] = value
    return out


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """Repeated ``--tag KEY=VALUE`` (``steplog.log.tags`` says what a tag may be)."""
    if not values:
        return {}
    from steplog.log.tags import parse_tags as parse

    return parse(values)


def limits(o: dict[str, Any]) -> dict[str, Any]:
    """The budget overrides among the engine options ``o``."""
    return {
        "max_steps": o["max_steps"],
        "max_tokens": o["max_tokens"],
        "max_seconds": o["max_seconds"],
        "max_cost_usd": o["max_cost"],
        "max_retries": o["max_retries"],
    }


def run_agent(
    agent: str,
    run_id: str | None,
    db: LogLocation | None,
    workdir: Path | None,
    outbox: str | None,
    params: tuple[str, ...],
    killed_at: float | None,
    tags: tuple[str, ...] = (),
    **engine: Any,
) -> None:
    """``steplog run``: start or resume a run of ``agent`` with the parsed options."""
    import os

    from steplog.log.launch import DIE_WITH_PARENT_ENV
    from steplog.runtime.agent import resolve

    if DIE_WITH_PARENT_ENV in os.environ:  # a worker's engine: it dies with its worker
        from steplog.control.procs import die_with_parent

        die_with_parent()

    execute_with(
        resolve(agent),
        engine,
        run_id=run_id,
        db=db,
        workdir=workdir,
        outbox=outbox,
        params=parse_params(params),
        killed_at=killed_at,
        tags=parse_tags(tags),
    )


def execute_with(
    agent: Any,
    o: dict[str, Any],
    *,
    run_id: str | None,
    db: LogLocation | None,
    workdir: Path | None = None,
    outbox: str | None = None,
    params: dict[str, Any] | None = None,
    killed_at: float | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """Drive ``agent``'s run with the engine options ``o``, print how it ended, exit with its
    code."""
    from steplog.log.lease import DEFAULT_LEASE_SECONDS
    from steplog.runtime.engine import execute

    def started(rid: str, incarnation: int, resumed: bool) -> None:
        verb = "resuming" if resumed else "starting"
        _announce(
            f"steplog: {verb} run {rid} (agent {agent.default_spec()}, incarnation {incarnation})"
        )

    outcome = _drive_engine(
        lambda: execute(
            agent,
            run_id=run_id,
            db=db,
            workdir=workdir,
            outbox=outbox,
            params=params or {},
            limits=limits(o),
            model=o["model"],
            base_url=o["base_url"],
            pace=o["pace"],
            lease_seconds=DEFAULT_LEASE_SECONDS
            if o["lease_seconds"] is None
            else o["lease_seconds"],
            synchronous="FULL" if o["synchronous"] == "full" else "NORMAL",
            on_start=started,
            killed_at=killed_at,
            exit_when_waiting=o["exit_when_waiting"],
            tags=tags,
        )
    )
    _report(outcome, db)


def _announce(line: str) -> None:
    """The "starting/resuming run" line on stderr, written as ``echo`` writes it (a line, then a
    flush) but without importing click before the first step. It holds a checked run id, the
    agent's spec and a number: no escape codes for click to strip."""
    stream = sys.stderr
    if stream is not None:  # no stderr at all (pythonw): click writes nothing either
        stream.write(line + "\n")
        stream.flush()


def _drive_engine(go: Callable[[], Any]) -> Any:
    try:
        return go()
    except KeyboardInterrupt:
        # SIGTERM, SIGINT and SIGHUP stop the engine at a safe point (``steplog.log.interrupts``);
        # the lease is released, so the same command resumes at once.
        from steplog.errors import EXIT_STOPPED

        fail(
            "stopped by a signal; run the same command to resume from the last checkpoint",
            EXIT_STOPPED,
        )


def _report(outcome: Any, db: LogLocation | None) -> None:
    """Print how the run ended and exit with its code (README "Command line": the exit table;
    ``errors.EXIT_MEANINGS`` has them in words)."""
    from steplog.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_GAVE_UP, EXIT_WAITING

    rid = outcome.run_id
    if outcome.status == RunStatus.SUCCEEDED:
        echo(f"run {rid} succeeded: {json.dumps(outcome.result, ensure_ascii=False)}")
        return
    if outcome.status == RunStatus.WAITING and not outcome.reason:
        echo(f"{outcome.waits}; run the same command (or leave it to `steplog worker`) then")
        sys.exit(EXIT_WAITING)
    if outcome.status == RunStatus.WAITING:
        where = f" --db {db}" if db else ""
        echo(
            f"run {rid} is waiting for signal {outcome.reason!r}; send it with `steplog signal "
            f"{rid} {outcome.reason} --data JSON{where}`, then run the same command"
        )
        sys.exit(EXIT_WAITING)
    verb = {RunStatus.GAVE_UP: "gave up", RunStatus.CANCELLED: "was cancelled"}.get(
        outcome.status, "failed"
    )
    echo(f"run {rid} {verb}: {outcome.reason}")
    sys.exit(
        {RunStatus.GAVE_UP: EXIT_GAVE_UP, RunStatus.CANCELLED: EXIT_CANCELLED}.get(
            outcome.status, EXIT_FAILED
        )
    )


__all__ = [
    "echo",
    "execute_with",
    "fail",
    "guard",
    "limits",
    "log_path",
    "parse_params",
    "run_agent",
]
