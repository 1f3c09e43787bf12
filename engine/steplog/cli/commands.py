"""The ``steplog`` command line (README "Command line"). Exit codes come from the errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from steplog.cli.bulk import Outcome, dry_run_option, filter_options, given, select_runs
from steplog.cli.drive import (
    execute_with,
    fail,
    guard,
    limits,
    log_path,
    parse_params,
    parse_tags,
)
from steplog.cli.options import Seconds
from steplog.cli.run_options import (
    DB,
    ENGINE_OPTIONS,
    OUTBOX,
    PARAM,
    RUN_OPTIONS,
    TAG,
    WORKDIR,
    Option,
)
from steplog.errors import EXIT_USAGE, UsageError
from steplog.log.location import LogLocation
from steplog.log.runstatus import RunStatus

if TYPE_CHECKING:
    from steplog.log.launch import Launch

F = TypeVar("F", bound=Callable[..., Any])


class _LogParam(click.ParamType):  # type: ignore[type-arg]
    """``--db``: a SQLite file path or a ``postgresql://USER@HOST:PORT/DBNAME`` URL."""

    name = "PATH|URL"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> LogLocation:
        from steplog.log.location import parse

        try:
            return parse(value)
        except UsageError as exc:
            # The message without "--db URL:": click names the option.
            detail = getattr(exc, "detail", None)
            detail = detail or str(exc).removeprefix(f"--db {value!r}").lstrip(": ")
            self.fail(detail or str(exc), param, ctx)


def _click_option(o: Option) -> Callable[[F], F]:
    """The click option declared by ``o`` (``run_options``: read the same way by ``quick``)."""
    kwargs: dict[str, Any] = {"default": o.default, "help": o.help}
    if o.show_default:
        kwargs["show_default"] = True
    if o.metavar:
        kwargs["metavar"] = o.metavar
    if o.multiple:
        kwargs["multiple"] = True
    if o.kind == "flag":
        kwargs["is_flag"] = True
    elif o.kind in ("int", "float"):
        kwargs["type"] = int if o.kind == "int" else float
    elif o.kind == "choice":
        kwargs["type"] = click.Choice(list(o.choices))
    elif o.kind == "log":
        kwargs["type"] = _LogParam()
    elif o.kind == "dir":
        kwargs["type"] = click.Path(file_okay=False, path_type=Path)
    elif o.kind == "model":
        kwargs["callback"] = _model
    if o.limit is not None:
        kwargs["callback"] = _limit(o.limit)
    option: Callable[[F], F] = click.option(o.flag, o.dest, **kwargs)
    return option


def _limit(field: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """Check a budget option as ``Budget`` checks the field (finite, in range) while parsing."""
    from steplog.policies import limit_problem

    def check(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        problem = None if value is None else limit_problem(field, value)
        if problem:
            raise click.BadParameter(problem)
        return value

    return check


def _model(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--model`` checked while parsing: ``retry`` writes before its engine starts."""
    from steplog.llm import check_model

    try:
        check_model(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc).removeprefix("--model ")) from None
    return value


db_option = _click_option(DB)


@click.group(invoke_without_command=True)
@click.version_option(package_name="steplog")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """steplog: crash-safe AI agents on SQLite, and the kill test that proves it."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(gui)


@cli.command()
@db_option
@guard
def gui(db: LogLocation | None) -> None:
    """Open the desktop monitor."""
    _exec_gui(db, demo=False)


@cli.command()
@db_option
@click.option(
    "--compare",
    is_flag=True,
    help="Compare mode: the naive agent and the durable demo side by side, one Kill now for both.",
)
@click.option(
    "--approve",
    is_flag=True,
    help=(
        "The digest waits for a person's approval (the monitor's Approve); the naive agent asks "
        "again after every kill."
    ),
)
@guard
def demo(db: LogLocation | None, compare: bool, approve: bool) -> None:
    """Open the monitor with the demo agent running, ready for "Kill now"."""
    _exec_gui(db, demo=True, compare=compare, approve=approve)


def _exec_gui(
    db: LogLocation | None, *, demo: bool, compare: bool = False, approve: bool = False
) -> NoReturn:
    """Replace this process with the monitor (package ``steplog_gui``).

    An exec, not an import: the engine package stays free of Qt, and the import-linter
    contract in the tests holds it to that.
    """
    import os

    from steplog.control.procs import child_env, python_argv
    from steplog.log.db import hand_over

    env = child_env()
    where: list[str] = []
    if db:  # a URL is handed over in the environment: its password stays off the command line
        where, extra = hand_over(db)
        env.update(extra)
    argv = python_argv(
        "steplog_gui",
        *where,
        *(["--demo"] if demo else []),
        *(["--compare"] if compare else []),
        *(["--demo-approve"] if approve else []),
    )
    os.execve(sys.executable, argv, env)


def _engine_options(fn: F) -> F:
    """The options of every command that drives an engine (run, retry, fork, submit)."""
    for option in reversed(ENGINE_OPTIONS):
        fn = _click_option(option)(fn)
    return fn


def _run_options(fn: F) -> F:
    """``steplog run``'s own options (``run_options.RUN_OPTIONS``), then the engine options."""
    fn = _engine_options(fn)
    for option in reversed(RUN_OPTIONS):
        fn = _click_option(option)(fn)
    return fn


@cli.command()
@click.argument("agent")
@_run_options
@guard
def run(**kwargs: Any) -> None:
    """Start or resume a run of AGENT (a built-in name, pkg.mod:fn or file.py:fn)."""
    from steplog.cli.drive import run_agent

    run_agent(**kwargs)


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@db_option
@click.option("--reason", default=None, help="Why: recorded with the cancellation.")
@click.option(
    "--wait",
    "wait_seconds",
    type=Seconds(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for live engines to stop (0: ask and return).",
)
@filter_options
@dry_run_option
@guard
def cancel(
    run_ids: tuple[str, ...],
    db: LogLocation | None,
    reason: str | None,
    wait_seconds: float,
    dry_run: bool,
    **filters: Any,
) -> None:
    """End runs as `cancelled`: RUN_ID, several, or those the filters match (as `steplog runs`
    filters them). A cancelled run never runs again; a live engine stops at its next step
    boundary (exit 5). For several runs: a line each, a summary, exit 2 if any was refused."""
    if len(run_ids) == 1 and not dry_run and not given(filters):
        _cancel_one(run_ids[0], db, reason, wait_seconds)
        return
    _cancel_many(run_ids, db, reason, wait_seconds, dry_run, filters)


def _cancel_one(
    run_id: str, db: LogLocation | None, reason: str | None, wait_seconds: float
) -> None:
    from steplog.control.commands import cancel as cancel_run
    from steplog.control.commands import wait_until_finished

    done = cancel_run(run_id, reason, db=db)
    if done.done:
        click.echo(f"run {run_id} cancelled ({done.reason})")
        return
    click.echo(
        f"run {run_id}: cancel requested; its engine stops at its next step boundary", err=True
    )
    status = (
        wait_until_finished(run_id, db=db, timeout=wait_seconds)
        if wait_seconds
        else RunStatus.RUNNING
    )
    if status == RunStatus.CANCELLED:
        click.echo(f"run {run_id} cancelled ({done.reason})")
    elif status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.GAVE_UP):
        click.echo(
            f"run {run_id} ended {status} before it reached a step boundary; nothing was cancelled"
        )
    else:
        click.echo(
            f"run {run_id}: cancel requested; its engine has not reached a step boundary yet "
            f"(`steplog status {run_id}` shows when it has)"
        )


def _cancel_many(
    run_ids: tuple[str, ...],
    db: LogLocation | None,
    reason: str | None,
    wait_seconds: float,
    dry_run: bool,
    filters: dict[str, Any],
) -> None:
    import time

    from steplog.control.commands import cancel as cancel_run
    from steplog.control.commands import wait_until_finished
    from steplog.log.status import TERMINAL

    selection = select_runs(db, run_ids, filters)
    out = Outcome(RunStatus.CANCELLED, refused=selection.unknown_refusals())
    for s in selection.runs:
        rid, status = s["run_id"], s["status"]
        if status in TERMINAL:
            why = f"run {rid} already ended {status}; only a run that has not finished can be"
            out.refused.append((rid, f"{why} cancelled"))
        elif dry_run:
            out.done.append((rid, f"would cancel {rid} ({status})"))
        else:

            def act(rid: str = rid) -> tuple[bool, str]:
                done = cancel_run(rid, reason, db=db)
                return done.done, f"cancelled {rid}" if done.done else f"asked {rid} to stop"

            out.attempt(rid, act)
    deadline = time.monotonic() + wait_seconds
    asked, out.pending = out.pending, []
    for rid, line in asked:
        left = max(0.0, deadline - time.monotonic())
        status = wait_until_finished(rid, db=db, timeout=left) if left else RunStatus.RUNNING
        if status == RunStatus.CANCELLED:
            out.done.append((rid, f"cancelled {rid} (its engine stopped at a step boundary)"))
        elif status in TERMINAL:
            out.refused.append(
                (rid, f"run {rid} ended {status} before its engine reached a step boundary")
            )
        else:
            out.pending.append((rid, f"{line}; its engine has not reached a step boundary yet"))
    sys.exit(out.report(dry_run))


@cli.command()
@click.argument("run_id")
@click.argument("name")
@db_option
@click.option(
    "--data",
    "data_json",
    default="null",
    metavar="JSON",
    help="The signal's data, as JSON (default null).",
)
@click.option(
    "--key", default=None, help="An idempotency key: sending the same key again is the same signal."
)
@guard
def signal(run_id: str, name: str, db: LogLocation | None, data_json: str, key: str | None) -> None:
    """Send RUN_ID the signal NAME; one `run.wait_for(NAME)` consumes it, exactly once."""
    from steplog.control.commands import signal as send

    try:
        data = json.loads(data_json)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'--data is not JSON ({exc.msg} at character {exc.pos}); e.g. --data \'{{"approved": '
            f"true}}'"
        ) from None
    sent = send(run_id, name, data, db=db, key=key)
    what = "already sent with this key" if sent.duplicate else "sent"
    click.echo(f"signal {name!r} {what} to run {run_id} (#{sent.signal_id})")
    if sent.status == RunStatus.WAITING and sent.waiting_for == name and not sent.engine_live:
        where = f" --db {db}" if db else ""
        click.echo(
            f"run {run_id} waits for it with no engine; carry it on: steplog run {sent.agent} "
            f"--run-id {run_id}{where}",
            err=True,
        )
    elif sent.status == RunStatus.WAITING and sent.waiting_for == name:
        click.echo(f"run {run_id} was waiting for it; its engine carries on now", err=True)
    else:
        click.echo(f"run {run_id} keeps it until it waits for {name!r}", err=True)


@cli.command()
@click.argument("run_id")
@click.argument("topic")
@db_option
@click.option(
    "--data",
    "data_json",
    default="null",
    metavar="JSON",
    help="The message's value, as JSON (default null).",
)
@click.option(
    "--key",
    default=None,
    help="An idempotency key: sending the same key again is the same message, delivered once.",
)
@guard
def send(run_id: str, topic: str, db: LogLocation | None, data_json: str, key: str | None) -> None:
    """Send RUN_ID a message on TOPIC; one `run.recv(TOPIC)` receives it, once, in send order.

    Prints the message's id (the same id again for a repeated --key)."""
    from steplog.control.mail import send as send_message

    try:
        data = json.loads(data_json)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--data is not JSON ({exc.msg} at character {exc.pos}); e.g. --data '{{\"n\": 1}}'"
        ) from None
    sent = send_message(run_id, topic, data, key=key, db=db)
    click.echo(sent.message_id)
    what = "already sent with this key" if sent.duplicate else "sent"
    click.echo(f"message {what} to run {run_id} on topic {topic!r}", err=True)


@cli.command()
@click.argument("run_id")
@click.argument("key")
@db_option
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="S",
    help="Wait up to S seconds for the run to set KEY (default: do not wait).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the value as JSON (the default too).")
@guard
def event(
    run_id: str, key: str, db: LogLocation | None, timeout: float | None, as_json: bool
) -> None:
    """Print the latest value RUN_ID set as its event KEY (`run.set_event`), as JSON.

    Exit 4 when it is still unset after --timeout, or the run ended without setting it."""
    from steplog.control.mail import get_event

    value = get_event(run_id, key, timeout=timeout, db=db)
    click.echo(json.dumps(value, ensure_ascii=False, sort_keys=as_json))


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@db_option
@click.option(
    "--force",
    is_flag=True,
    help=(
        "Retry even after non-determinism or an effect that needs reconciliation (says why it is "
        "risky)."
    ),
)
@click.option(
    "--no-start",
    is_flag=True,
    help="Only set the run going again; run it later with `steplog run`.",
)
@_engine_options
@filter_options
@dry_run_option
@guard
def retry(
    run_ids: tuple[str, ...],
    db: LogLocation | None,
    force: bool,
    no_start: bool,
    dry_run: bool,
    **options: Any,
) -> None:
    """Run a `failed` run again from its failed step, with fresh attempt counters. Several runs
    (ids or the `steplog runs` filters) are each set going again for `steplog worker` (or
    `steplog run AGENT --run-id ID`), a line each and a summary; exit 2 if any was refused."""
    filters = {k: options.pop(k) for k in ("status", "agent", "tag", "since", "until", "search")}
    if len(run_ids) == 1 and not dry_run and not given(filters):
        _retry_one(run_ids[0], db, force, no_start, options)
        return
    _retry_many(run_ids, db, force, dry_run, filters, options)


def _retry_one(
    run_id: str, db: LogLocation | None, force: bool, no_start: bool, engine: dict[str, Any]
) -> None:
    from steplog.control.commands import prepare_retry
    from steplog.runtime.agent import resolve

    if not no_start:
        _check_tracing()
    prepared = prepare_retry(run_id, db=db, force=force, launch=_launch_given(engine))
    for warning in prepared.warnings:
        click.echo(f"steplog: {warning}", err=True)
    if no_start:
        click.echo(
            f"run {run_id} is set to run again from its failed step; run it: steplog run "
            f"{prepared.agent} --run-id {run_id} (or leave it to `steplog worker`)"
        )
        return
    execute_with(resolve(prepared.agent), engine, run_id=run_id, db=db)


def _retry_many(
    run_ids: tuple[str, ...],
    db: LogLocation | None,
    force: bool,
    dry_run: bool,
    filters: dict[str, Any],
    engine: dict[str, Any],
) -> None:
    from steplog.control.commands import prepare_retry, why_not_retry

    selection = select_runs(db, run_ids, filters)
    out = Outcome("set to run again", refused=selection.unknown_refusals())
    for s in selection.runs:
        rid = s["run_id"]
        if s["status"] != RunStatus.FAILED:
            out.refused.append((rid, why_not_retry(s)))
        elif dry_run:
            out.done.append((rid, f"would retry {rid} from its failed step"))
        else:

            def act(rid: str = rid) -> tuple[bool, str]:
                prepared = prepare_retry(rid, db=db, force=force, launch=_launch_given(engine))
                for warning in prepared.warnings:
                    click.echo(f"steplog: {rid}: {warning}", err=True)
                return True, f"{rid} set to run again from its failed step"

            out.attempt(rid, act)
    if out.done and not dry_run:
        click.echo(
            "steplog: `steplog worker` runs them (or one by one: steplog run AGENT --run-id ID)",
            err=True,
        )
    sys.exit(out.report(dry_run))


@cli.command()
@click.argument("run_id")
@click.option(
    "--at-step",
    type=click.IntRange(min=1),
    required=True,
    help="The first step the fork runs itself; steps before it are copied from RUN_ID.",
)
@click.option(
    "--run-id", "new_run_id", default=None, help="The new run's id (default: a new one, printed)."
)
@db_option
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The fork's workdir, a new folder (default: runs/NEW_ID beside the log); "
    "starts as a copy.",
)
@click.option(
    "--outbox", default=None, help="Base URL of the messages service (default: the parent's)."
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a parameter of the parent.",
)
@click.option(
    "--set-result",
    "set_result",
    default=None,
    metavar="JSON",
    help="Record step --at-step with this result instead of running it (a chat step: its answer's "
    "text as a JSON string); the fork runs from the step after it.",
)
@click.option(
    "--no-start",
    is_flag=True,
    help="Only create the fork (its id is printed); run it later with `steplog run`.",
)
@_engine_options
@guard
def fork(
    run_id: str,
    at_step: int,
    new_run_id: str | None,
    db: LogLocation | None,
    workdir: Path | None,
    outbox: str | None,
    params: tuple[str, ...],
    set_result: str | None,
    no_start: bool,
    **engine: Any,
) -> None:
    """Start a new run from RUN_ID's steps before --at-step (copied, not run again), then run it.
    With --set-result, step --at-step is recorded with the given result and the fork runs from
    the step after it."""
    from steplog.control.commands import fork as fork_run
    from steplog.control.edit import NOT_EDITED

    edit: Any = NOT_EDITED
    if set_result is not None:
        try:
            edit = json.loads(set_result)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--set-result is not JSON ({exc.msg} at character {exc.pos}); a text is quoted: "
                """--set-result '"the corrected answer"'"""
            ) from None

    if not no_start:
        _check_tracing()
    path = log_path({"db": db})
    agent, prepared = fork_run(
        run_id,
        at_step,
        new_run_id=new_run_id,
        db=path,
        params=parse_params(params),
        limits=limits(engine),
        workdir=workdir,
        outbox=outbox,
        model=engine["model"],
        launch=_launch_given(engine),
        set_result=edit,
    )
    click.echo(prepared.run_id)
    edited = f", step {at_step} recorded with the edited result" if prepared.edited else ""
    click.echo(
        f"steplog: run {prepared.run_id} forked from {run_id} at step {at_step} ({prepared.copied} "
        f"step(s) copied{edited}, workdir {prepared.workdir})",
        err=True,
    )
    if no_start:
        return
    # The limits were the fork's own from its creation; the engine takes them from the log.
    execute_with(
        agent, {**engine, **{k: None for k in _LIMIT_OPTIONS}}, run_id=prepared.run_id, db=path
    )


_LIMIT_OPTIONS = ("max_steps", "max_tokens", "max_seconds", "max_cost", "max_retries")


def _launch_given(o: dict[str, Any]) -> Launch | None:
    """The engine options given for ``retry``/``fork`` as a ``Launch``, or ``None`` when all are
    defaults: the run keeps how it was queued (a fork: its parent's)."""
    from steplog.log.launch import Launch

    launch = Launch.from_options(o)
    return None if launch == Launch() else launch


@cli.command()
@click.argument("agent")
@click.option("--run-id", default=None, help="The new run's id (default: a new one, printed).")
@db_option
@_click_option(WORKDIR)
@_click_option(OUTBOX)
@_click_option(PARAM)
@_click_option(TAG)
@_engine_options
@guard
def submit(
    agent: str,
    run_id: str | None,
    db: LogLocation | None,
    workdir: Path | None,
    outbox: str | None,
    params: tuple[str, ...],
    tags: tuple[str, ...],
    **engine: Any,
) -> None:
    """Record a run of AGENT as `queued` for `steplog worker`; print its id. Nothing runs here.

    Takes the options of `steplog run` and refuses what it refuses (exit 2, nothing written).
    """
    from steplog.control.queue import submit as submit_run
    from steplog.log.launch import Launch
    from steplog.runtime.agent import resolve

    rid = submit_run(
        resolve(agent),
        run_id=run_id,
        db=db,
        workdir=workdir,
        outbox=outbox,
        params=parse_params(params),
        limits=limits(engine),
        model=engine["model"],
        launch=Launch.from_options(engine),
        tags=parse_tags(tags),
    )
    click.echo(rid)


@cli.command()
@db_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Runs worked on at once, each in an engine process of its own.",
)
@click.option(
    "--lease-seconds",
    type=float,
    default=None,
    help="Lease of this worker's claims and engines (default 15): how long another host waits "
    "for a silent one before taking its runs over.",
)
@click.option("--agents", default=None, metavar="SPEC,...", help="Claim runs of these agents only.")
@click.option(
    "--run-prefix",
    default="",
    metavar="PREFIX",
    help="Claim only runs whose id starts with PREFIX (the worker storm's own runs in a "
    "shared log).",
)
@click.option(
    "--drain", is_flag=True, help="Exit 0 once no run is left to claim and its engines are done."
)
@click.option(
    "--poll",
    type=Seconds(0.01, 60),
    default=0.2,
    show_default=True,
    help="Seconds between looks at the queue when idle.",
)
@click.option(
    "--grace",
    type=Seconds(0, 3600),
    default=30.0,
    show_default=True,
    help="On SIGTERM: seconds the engines get to stop at a safe point before they are killed.",
)
@guard
def worker(
    db: LogLocation | None,
    concurrency: int,
    lease_seconds: float | None,
    agents: str | None,
    run_prefix: str,
    drain: bool,
    poll: float,
    grace: float,
) -> None:
    """Run queued runs, and runs whose engine is gone, until stopped (SIGTERM: exit 0).

    Many workers, on one host or many, may share one log. Exit 0 when stopped by a signal (or
    drained), 2 on bad usage, 1 when the log cannot be written.
    """
    from steplog.control.worker import Worker
    from steplog.log.db import default_db_path
    from steplog.log.lease import DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS
    from steplog.policies import check_seconds
    from steplog.runtime.agent import resolve

    lease = DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds
    check_seconds("--lease-seconds", lease, zero_ok=False, most=MAX_LEASE_SECONDS)
    _check_tracing()  # its engines would each refuse them
    specs = [resolve(a.strip()).default_spec() for a in (agents or "").split(",") if a.strip()]
    if agents is not None and not specs:
        raise UsageError(
            "--agents needs at least one agent spec, e.g. --agents demo,my_pkg.agent:main"
        )
    sys.exit(
        Worker(
            db or default_db_path(),
            concurrency=concurrency,
            lease_seconds=lease,
            agents=specs,
            run_prefix=run_prefix,
            drain=drain,
            poll=poll,
            grace=grace,
        ).run()
    )


def _check_tracing() -> None:
    """Tracing settings an engine would refuse (``otelenv.check_environment``), refused before
    a command that then runs one writes anything (``run`` is checked by the engine itself)."""
    from steplog.tracing.env import check_environment

    check_environment()


def _open_for_reading(db: LogLocation | None) -> Any:
    from steplog.log.db import open_readonly

    path = log_path({"db": db})
    return path, open_readonly(path, one_shot=True)


@cli.command()
@click.argument("run_id")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object: run_id, agent, status, reason, result, "
    "steps_committed, step_executions (beyond steps_committed: work redone), incarnations, budget "
    "(used and limit of each), workdir, outbox; forked_from, waiting_for and blocked when they "
    "apply.",
)
@guard
def status(run_id: str, db: LogLocation | None, as_json: bool) -> None:
    """Show one run."""
    from steplog.log.integrity import probe, refusing_damage
    from steplog.log.status import run_status

    path, conn = _open_for_reading(db)
    try:
        with refusing_damage(path):
            probe(conn, path, run_id)
            s = run_status(conn, run_id, db=path)
    finally:
        conn.close()
    if as_json:
        click.echo(json.dumps(s, ensure_ascii=False))
        return
    click.echo(_describe(s))


def _waits(s: dict[str, Any]) -> str:
    """What a waiting run waits for, in a few words."""
    if "waiting_for_topic" in s:
        return f" for a message on topic {s['waiting_for_topic']!r}"
    if "sleeping_until" in s:
        return f" (asleep until {s['sleeping_until']})"
    return f" for signal {s['waiting_for']!r}"


def _describe(s: dict[str, Any]) -> str:
    def fmt(b: dict[str, Any]) -> str:
        return f"{b['used']}" + (f"/{b['limit']}" if b["limit"] is not None else "")

    budget = s["budget"]
    # Executions beyond the committed steps are retries after errors, steps cut short by a stop, a
    # kill or a wait, and the step in progress: `steplog verdict` tells which were redone by kills.
    extra = s["step_executions"] - s["steps_committed"]
    beyond = (
        f" ({extra} beyond the committed: retries, interrupted or in progress)" if extra > 0 else ""
    )
    engine = {
        "gone": " (its engine is gone: run the same command to resume)",
        "none": " (no engine holds it: run the same command to resume)",
    }
    state = s["status"] + (_waits(s) if s["status"] == RunStatus.WAITING else "")
    state += (
        engine.get(s["engine"], "") if s["status"] in (RunStatus.RUNNING, RunStatus.WAITING) else ""
    )
    if "forked_from" in s:
        state += (
            f"  (forked from {s['forked_from']['run_id']} at step {s['forked_from']['at_step']})"
        )
    if s.get("worker"):
        state += f"  (worker {s['worker']['host']}:{s['worker']['pid']})"
    return (
        f"{s['run_id']}  {s['agent']}  {state}"
        + (f" ({s['reason']})" if s["reason"] else "")
        + f"\n  steps {fmt(budget['steps'])}  executions {s['step_executions']}{beyond}"
        + f"  incarnations {s['incarnations']}"
        + f"\n  tokens {fmt(budget['tokens'])}"
        + (" (estimated)" if budget["tokens"]["estimated"] else "")
        + f"  cost ${fmt(budget['cost_usd'])}  seconds {fmt(budget['seconds'])}"
        + (f"\n  version {s['version']}" if s.get("version") else "")
        + (f"\n  blocked: {s['blocked']['reason']}" if s.get("blocked") else "")
    )


@cli.command()
@click.argument("run_id")
@db_option
@click.option("--name", "name", default=None, help="Only this stream (e.g. tokens, events).")
@click.option(
    "--from",
    "from_offset",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Start at this offset (the offset after the last one you saw, to read on).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep reading across kills and restarts; exit 0 once the run is over and all is out.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object per line: {"offset", "stream", "step", "attempt", "cut", "value"}.',
)
@guard
def stream(
    run_id: str,
    db: LogLocation | None,
    name: str | None,
    from_offset: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Print a run's streams (run.emit, a model's tokens), one entry per line.

    An entry is printed once the step attempt that wrote it is over, so whether it was cut
    short (by a kill, a stop or a failure: not the step's recorded answer) is final: a
    follower prints exactly what a reader after the run prints."""
    from steplog.log.streams import entries

    names = None if name is None else (name,)
    for entry in entries(
        log_path({"db": db}), run_id, names=names, from_offset=from_offset, follow=follow
    ):
        if as_json:
            line = json.dumps(entry.as_json(), ensure_ascii=False)
        else:
            # JSON-quoted: model output reaches the terminal as text, never as escape codes.
            where = "" if entry.step is None else f" step {entry.step}#{entry.attempt}"
            cut = " (cut)" if entry.cut else ""
            line = (
                f"{entry.offset:>6} {entry.stream}{where}{cut}: "
                f"{json.dumps(entry.value, ensure_ascii=False)}"
            )
        click.echo(line)


@cli.command()
@db_option
@filter_options
@click.option("--limit", type=int, default=None, metavar="N", help="At most N runs (the newest).")
@click.option(
    "--json", "as_json", is_flag=True, help="A JSON list of status objects, newest first."
)
@click.option(
    "--version",
    "version",
    default=None,
    metavar="V",
    help="Only runs on code version V (the version that last worked on them; docs/versions.md).",
)
@click.option(
    "--patch",
    default=None,
    metavar="NAME",
    help=(
        "Only the live runs that have no run.patched(NAME) marker: those the old branch may "
        "still be needed for (docs/versions.md)."
    ),
)
@guard
def runs(
    db: LogLocation | None,
    status: str | None,
    agent: str | None,
    tag: tuple[str, ...],
    since: str | None,
    until: str | None,
    search: str | None,
    limit: int | None,
    as_json: bool,
    version: str | None,
    patch: str | None,
) -> None:
    """List the runs in the log, newest first; the options narrow the list."""
    from steplog.log.find import find_runs, query_from_options
    from steplog.log.integrity import probe, refusing_damage

    query = query_from_options(
        status=status,
        agent=agent,
        tags=tag,
        since=since,
        until=until,
        search=search,
        version=version,
        limit=None if patch is not None else limit,  # --patch narrows after the query
    )
    path, conn = _open_for_reading(db)
    try:
        with refusing_damage(path):
            probe(conn, path, None)
            rows = find_runs(conn, query)
            if patch is not None:
                from steplog.log.versions import runs_before_patch

                wanted = set(runs_before_patch(conn, patch))
                rows = [r for r in rows if r["run_id"] in wanted][:limit]
    finally:
        conn.close()
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        click.echo("no runs match" if query.filtered else "no runs yet")
    for s in rows:
        state = (
            "stopped"
            if s["status"] == RunStatus.RUNNING and s["engine"] in ("gone", "none")
            else s["status"]
        )
        worker = f"  worker {s['worker']['host']}:{s['worker']['pid']}" if s.get("worker") else ""
        tagged = "  " + " ".join(f"{k}={v}" for k, v in s["tags"].items()) if s["tags"] else ""
        blocked = f"  blocked: {s['blocked']['reason']}" if s.get("blocked") else ""
        click.echo(
            f"{s['run_id']:<28} {s['agent']:<20} {state:<10} steps {s['steps_committed']:>5}  "
            f"incarnations {s['incarnations']}{worker}{blocked}{tagged}"
        )


@cli.command()
@click.argument("run_id")
@db_option
@click.option(
    "--outbox",
    default=None,
    metavar="URL|FILE",
    help=(
        "Read the run's deliveries here (default: the URL the run recorded, else outbox.db beside "
        "the log)."
    ),
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object: verdict (PASS, FAIL, UNTESTED or RUNNING), explanation, "
    "kills, redone, duplicates, missing, deliveries, checks (name, passed, evidence, source), "
    "resume_latency.",
)
@guard
def verdict(run_id: str, db: LogLocation | None, outbox: str | None, as_json: bool) -> None:
    """Did RUN_ID survive its kills? The monitor's verdict strip, from the command line.

    Exit 1 on FAIL, else 0 (PASS, UNTESTED, RUNNING).
    """
    from steplog.log.integrity import probe, refusing_damage
    from steplog.verdict.judge import verdict_of

    path, conn = _open_for_reading(db)
    try:
        with refusing_damage(path):
            probe(conn, path, run_id)
    finally:
        conn.close()
    with refusing_damage(path):
        v = verdict_of(path, run_id, outbox=outbox, one_shot=True)
    if as_json:
        click.echo(json.dumps(v.summary_json(), ensure_ascii=False))
    else:
        click.echo(
            f"{v.label}  {run_id} ({'outcome ' if v.passed is not None else ''}{v.status}): "
            f"{v.explanation}"
        )
        for c in v.checks:
            mark = {True: "ok  ", False: "FAIL", None: "--  "}[c.ok]
            click.echo(f"  {mark} {c.name}: {c.detail}  [{c.source}]")
    sys.exit(1 if v.label == "FAIL" else 0)


@cli.command()
@db_option
@guard
def check(db: LogLocation | None) -> None:
    """Check the log's integrity (read-only): "ok" and what it holds, or what is wrong (exit 2)."""
    from steplog.errors import CorruptDatabase
    from steplog.log.integrity import check as check_log

    report = check_log(log_path({"db": db}))
    if not report.ok:
        for problem in report.problems:
            click.echo(problem)
        raise CorruptDatabase(report.summary())
    click.echo(report.summary())


@cli.command()
@db_option
@click.option(
    "--by",
    default="model",
    show_default=True,
    metavar="model|agent|day|run|tag:KEY",
    help="How to group: the run's model, agent, the local day a step finished, run, or a tag.",
)
@click.option("--since", default=None, metavar="ISO|SPAN", help="From this time (2026-12-01, 2h).")
@click.option("--until", default=None, metavar="ISO|SPAN", help="Before this time.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="A JSON list of rows: the group's key, tokens, cost_usd, runs, steps (most cost first).",
)
@guard
def cost(
    db: LogLocation | None, by: str, since: str | None, until: str | None, as_json: bool
) -> None:
    """What the runs cost: tokens and dollars by model, agent, day, run or tag, steps that
    finished in the window counted (a fork's copied steps count in its parent)."""
    from steplog.cli.cost_table import cost_lines
    from steplog.log.cost import check_grouping, cost_by
    from steplog.log.integrity import probe, refusing_damage
    from steplog.log.when import parse_when

    check_grouping(by)
    start = None if since is None else parse_when(since, option="--since")
    end = None if until is None else parse_when(until, option="--until")
    path, conn = _open_for_reading(db)
    try:
        with refusing_damage(path):
            probe(conn, path, None)
            rows = cost_by(conn, by, since=start, until=end)
    finally:
        conn.close()
    if as_json:
        click.echo(json.dumps([r.as_json(by) for r in rows], ensure_ascii=False))
        return
    for text in cost_lines(rows, by):
        click.echo(text)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="0 picks a free port.",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The outbox's own SQLite file (default: outbox.db in the user data directory).",
)
@click.option(
    "--port-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the bound port number here once listening.",
)
@click.option(
    "--delay", type=Seconds(0, 3600), default=0.0, help="Seconds each delivery takes (tests)."
)
@guard
def outbox(host: str, port: int, db: Path | None, port_file: Path | None, delay: float) -> None:
    """Run the outbox: an idempotent messages service on HOST:PORT."""
    from steplog.outbox import serve
    from steplog.outbox.server import default_db_path

    where = db or default_db_path()
    url_host = f"[{host}]" if ":" in host else host

    def ready(bound: int) -> None:
        click.echo(
            f"steplog outbox listening on http://{url_host}:{bound} (ledger in {where}); run "
            f"agents with --outbox http://{url_host}:{bound}; Ctrl-C stops it"
        )

    serve(host=host, port=port, db=where, port_file=port_file, delay=delay, ready=ready)


@cli.command()
@click.argument("agent")
@click.option(
    "--kills",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="SIGKILLs in the storm, at seeded random moments over the whole run (0: no storm).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the kill moments.")
@click.option(
    "--sweep", is_flag=True, help="Also crash once at every crash point of every step, and resume."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object (the verdict and run metadata)."
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a JUnit XML file: one testcase per check, one per sweep case.",
)
@click.option(
    "--param", "params", multiple=True, metavar="KEY=VALUE", help="An agent parameter (repeatable)."
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Sweep cases run at once.",
)
@click.option(
    "--time-limit",
    type=Seconds(1, 7 * 86_400),
    default=600.0,
    show_default=True,
    help="Seconds allowed for each of the reference, the storm and the sweep.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep every run's log, workdir and outbox in this folder (default: a temp folder, "
    "removed).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="The worker storm instead: --runs queued runs, this many `steplog worker`s sharing them, "
    "--kills of whole workers (SIGKILL, then a new worker).",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Runs queued for the worker storm (with --workers).",
)
@click.option(
    "--db",
    type=_LogParam(),
    default=None,
    help="Run the kill test's runs in this PostgreSQL log (postgresql://USER@HOST:PORT/DBNAME), "
    "each under its own run id (default: a SQLite file per run, in the kill test's folder). With "
    "--workers: new runs with ids storm-DATE-TIME-HEX-NNN that only the storm's workers claim and "
    "only its verdict counts; they stay in the database. Outbox and workdirs stay in the kill "
    "test's folder.",
)
@click.option(
    "--upgrade",
    "upgrade",
    default=None,
    metavar="NEW_AGENT",
    help="Kill runs of AGENT and resume them on NEW_AGENT's code (a new version of the same "
    "agent): compatible, or refused at the step named (docs/versions.md).",
)
@guard
def killtest(
    agent: str,
    kills: int,
    seed: int,
    sweep: bool,
    as_json: bool,
    junit: Path | None,
    params: tuple[str, ...],
    jobs: int,
    time_limit: float,
    keep: Path | None,
    workers: int | None,
    runs: int,
    db: LogLocation | None,
    upgrade: str | None,
) -> None:
    """Kill AGENT's engine again and again; PASS if nothing was duplicated, lost or redone twice.

    With --workers N: kill whole workers that share a queue of --runs runs instead; PASS if every
    run succeeded and the outbox holds every message once. With --upgrade NEW_AGENT: kill runs of
    AGENT and resume them on NEW_AGENT's code; PASS if it resumes them all. Exit 0 on PASS, 1 on
    FAIL, 2 on bad usage.
    """
    from steplog.killtest.command import run_command, run_worker_storm_command
    from steplog.log.db import is_server

    if db is not None and not is_server(db):
        raise UsageError(
            "killtest --db takes a postgresql:// URL; with SQLite each run of the kill test gets a "
            "file of its own (see --keep)"
        )
    if upgrade is not None:
        from steplog.killtest.command import run_upgrade_command

        if workers is not None or sweep or junit is not None or db is not None:
            raise UsageError(
                "--upgrade runs the upgrade test, which has no --workers, --sweep, --junit or "
                "--db; drop those"
            )
        sys.exit(
            run_upgrade_command(
                agent,
                upgrade,
                as_json=as_json,
                params=parse_params(params),
                time_limit=time_limit,
                keep=keep,
            )
        )
    if workers is not None:
        if sweep or junit is not None:
            raise UsageError(
                "--workers runs the worker storm, which has no --sweep or --junit; drop those"
            )
        sys.exit(
            run_worker_storm_command(
                agent,
                workers=workers,
                runs=runs,
                kills=kills,
                seed=seed,
                as_json=as_json,
                params=parse_params(params),
                time_limit=time_limit,
                keep=keep,
                db=db,
            )
        )
    sys.exit(
        run_command(
            agent,
            kills=kills,
            seed=seed,
            sweep=sweep,
            as_json=as_json,
            junit=junit,
            params=parse_params(params),
            jobs=jobs,
            time_limit=time_limit,
            keep=keep,
            db=db,
        )
    )


def _status_list(value: str | None) -> frozenset[str] | None:
    return None if value is None else frozenset(s.strip() for s in value.split(",") if s.strip())


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@db_option
@click.option(
    "--older-than",
    type=float,
    default=None,
    metavar="DAYS",
    help="Runs finished more than DAYS ago.",
)
@click.option(
    "--status",
    "statuses",
    default=None,
    metavar="S,...",
    help="Only runs in these finished statuses (default: succeeded,gave_up,failed,cancelled).",
)
@click.option(
    "--keep-last",
    type=int,
    default=None,
    metavar="N",
    help="Of the runs selected, keep the newest N.",
)
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE.jsonl.gz",
    help="First write the runs to this new file (what `steplog import` loads), fsynced.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what would be pruned and the space it frees; write nothing.",
)
@click.option(
    "--reclaim",
    type=click.Choice(["auto", "vacuum", "incremental", "none"]),
    default="auto",
    show_default=True,
    help="How the space is given back: vacuum rewrites the log (fast; holds the write "
    "lock), incremental frees it in short transactions, none leaves it for new rows; auto "
    "rewrites logs keeping up to 128 MiB, else incremental.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object: runs, rows, bytes before/after."
)
@guard
def prune(
    run_ids: tuple[str, ...],
    db: LogLocation | None,
    older_than: float | None,
    statuses: str | None,
    keep_last: int | None,
    archive: Path | None,
    dry_run: bool,
    reclaim: str,
    as_json: bool,
) -> None:
    """Remove whole finished runs (never a queued, running or waiting one), then reclaim the space.

    Select runs by RUN_ID and/or the options (all given criteria must hold); at least one is needed.
    """
    from steplog.log.db import default_db_path
    from steplog.log.prune import FINISHED, Selection, describe
    from steplog.log.prune import prune as prune_log

    chosen = _status_list(statuses)
    only_reclaim = reclaim != "auto"
    if not (
        run_ids
        or older_than is not None
        or chosen is not None
        or keep_last is not None
        or only_reclaim
    ):
        raise UsageError(
            "say which runs to prune: RUN_ID..., --older-than DAYS, --status S,... or --keep-last "
            "N (`--status succeeded` prunes every succeeded run)"
        )
    selection = Selection(
        run_ids=run_ids,
        statuses=FINISHED if chosen is None else chosen,
        older_than_days=older_than,
        keep_last=keep_last,
    )
    if only_reclaim and not (
        run_ids or older_than is not None or chosen is not None or keep_last is not None
    ):
        selection = Selection(
            statuses=frozenset()
        )  # --reclaim alone: give space back, prune nothing
    report = prune_log(
        db or default_db_path(), selection, archive=archive, dry_run=dry_run, reclaim=reclaim
    )
    click.echo(json.dumps(report.as_json()) if as_json else describe(report))


@cli.command(name="export")
@click.argument("run_id")
@db_option
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this new file (gzip if it ends in .gz) instead of stdout.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace the --output file if it exists (it stays whole until then).",
)
@guard
def export_run(
    run_id: str, db: LogLocation | None, fmt: str, output: Path | None, force: bool
) -> None:
    """Print one finished run's whole history (run row, steps, effects, events) as JSON lines:
    what `import` loads.

    A run that has not finished is refused (exit 2): its copy could run again elsewhere.
    """
    from steplog.log.archive import durable_output, refuse_existing, run_lines
    from steplog.log.integrity import probe, refusing_damage

    if output is not None and not force:
        refuse_existing(output, "steplog export", force_option="--force")  # before the log is read
    path, conn = _open_for_reading(db)
    lines = None
    try:
        with refusing_damage(path):
            probe(conn, path, run_id)
            lines = run_lines(conn, run_id)
            first = next(lines)  # an unknown or unfinished run: refused before anything is written
            if output is None:
                _print_whole(first, lines)
            else:
                gz = output.suffix == ".gz"
                with durable_output(output, compress=gz, overwrite=force) as out:
                    out.write(first)
                    out.writelines(lines)
    finally:
        if lines is not None:
            lines.close()  # ends its read transaction while the connection is open
        conn.close()


def _print_whole(first: str, rest: Any) -> None:
    """Print an export only once it has all been read: a log that fails half-way (a damaged
    page) prints nothing, as ``-o`` leaves no file. Kept in memory up to 16 MiB, then in a
    private temporary file."""
    import shutil
    import tempfile

    from steplog.errors import OutputError

    with tempfile.SpooledTemporaryFile(max_size=16 << 20, mode="w+", encoding="utf-8") as spool:
        try:
            spool.write(first)
            spool.writelines(rest)
            spool.seek(0)
        except OSError as exc:
            raise OutputError(
                f"the export could not be held in {tempfile.gettempdir()} before printing "
                f"({exc.strerror or exc}); free some space there or use "
                "-o FILE"
            ) from None
        shutil.copyfileobj(spool, sys.stdout)


@cli.command(name="import")
@click.argument("file", metavar="FILE")
@db_option
@guard
def import_file(file: str, db: LogLocation | None) -> None:
    """Load the runs of FILE (from `export` or `prune --archive`; plain or .gz; - for stdin) into
    the log.

    A run id the log already has is refused, and then nothing is imported.
    """
    from steplog.log.archive import import_runs
    from steplog.log.db import default_db_path

    path = db or default_db_path()
    loaded = import_runs(file, path)
    n = len(loaded)
    click.echo(
        f"imported {n} run{'s' if n != 1 else ''} into {path}: "
        + ", ".join(r.run_id for r in loaded[:5])
        + (f" and {n - 5} more" if n > 5 else "")
    )
    for r in loaded:
        if r.unfinished:
            click.echo(
                f"steplog: run {r.run_id} was {r.unfinished} when it was archived: imported "
                "as cancelled, so this copy never runs (fork it to carry on from a step)",
                err=True,
            )


def main() -> None:
    try:
        cli.main(prog_name="steplog", standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "steplog"
        fail(
            exc.format_message().replace("\n", " ").rstrip(".") + f"; see `{where} --help`",
            EXIT_USAGE,
        )
    except SystemExit:
        raise
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
