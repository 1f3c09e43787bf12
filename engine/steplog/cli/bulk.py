"""``steplog cancel`` / ``retry`` on many runs: by id, by the ``runs`` filters, or both.

Every run is acted on by itself, through the same run control as one run (``control.commands``);
one that cannot be is refused with its reason and the others go on. The command prints a line
per run and a summary, and exits 2 when any was refused, so a script sees that not everything
happened. ``--dry-run`` prints what would happen to each and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import click

from steplog.errors import EXIT_USAGE, SteplogError, UsageError
from steplog.log.location import LogLocation

F = TypeVar("F", bound=Callable[..., Any])

_FILTERS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "--status",
        {
            "default": None,
            "metavar": "S,...",
            "help": "Runs in any of these statuses (queued, running, waiting, succeeded, "
            "gave_up, failed, cancelled).",
        },
    ),
    ("--agent", {"default": None, "metavar": "AGENT", "help": "Runs of this agent."}),
    (
        "--tag",
        {
            "multiple": True,
            "metavar": "KEY=VALUE",
            "help": "Runs with this tag (repeatable: runs with all of them).",
        },
    ),
    (
        "--since",
        {
            "default": None,
            "metavar": "WHEN",
            "help": "Runs created at or after WHEN: ISO 8601 (2026-12-07T09:30Z; no offset: "
            "local time) or a span back from now (30m, 2h, 3d).",
        },
    ),
    (
        "--until",
        {"default": None, "metavar": "WHEN", "help": "Runs created before WHEN (as --since)."},
    ),
    (
        "--search",
        {
            "default": None,
            "metavar": "TEXT",
            "help": "Runs whose id, agent, params, reason or tags contain TEXT (any case).",
        },
    ),
)
"""The filters of ``steplog runs``, declared once for every command that finds runs."""


def filter_options(fn: F) -> F:
    """The ``runs`` filters on a command (its parameters ``status``, ``agent``, ``tag``,
    ``since``, ``until``, ``search``)."""
    for name, kwargs in reversed(_FILTERS):
        fn = click.option(name, **kwargs)(fn)
    return fn


def dry_run_option(fn: F) -> F:
    """``--dry-run`` on a command that acts on many runs."""
    return click.option(
        "--dry-run", is_flag=True, help="Print what would be done to each run; change nothing."
    )(fn)


@dataclass(frozen=True)
class Selection:
    """The runs a command acts on, newest first (``status --json`` objects), and the ids given
    that name no run of the log."""

    runs: list[dict[str, Any]]
    unknown: list[str]

    def unknown_refusals(self) -> list[tuple[str, str]]:
        return [(rid, f"no run {rid} in this log") for rid in self.unknown]


def given(options: dict[str, Any]) -> bool:
    """Whether any filter was given."""
    return any(options.get(name[2:]) for name, _kw in _FILTERS)


def select_runs(
    db: LogLocation | None, run_ids: tuple[str, ...], options: dict[str, Any]
) -> Selection:
    """The runs named (``run_ids``) and/or matching the filters in ``options``; with both, the
    named runs that match. Neither: ``UsageError`` (acting on every run needs a filter that says
    so, e.g. ``--status failed``)."""
    from steplog.cli.drive import log_path
    from steplog.log.db import open_readonly
    from steplog.log.find import RunQuery, find_runs, query_from_options
    from steplog.log.integrity import probe, refusing_damage

    query = query_from_options(
        status=options.get("status"),
        agent=options.get("agent"),
        tags=options.get("tag") or (),
        since=options.get("since"),
        until=options.get("until"),
        search=options.get("search"),
    )
    if not run_ids and not query.filtered:
        raise UsageError(
            "name the runs (RUN_ID ...) or filter them (--status failed, --agent A, --tag K=V, "
            "--since 2h, --search TEXT); `steplog runs` with the same filters lists them first"
        )
    path = log_path({"db": db})
    conn = open_readonly(path, one_shot=True)
    try:
        with refusing_damage(path):
            probe(conn, path, None)
            if not run_ids:
                return Selection(find_runs(conn, query), [])
            named = tuple(dict.fromkeys(run_ids))
            known = {s["run_id"] for s in find_runs(conn, RunQuery(run_ids=named))}
            found = find_runs(conn, replace(query, run_ids=named))
            order = {rid: i for i, rid in enumerate(named)}
            found.sort(key=lambda s: order[s["run_id"]])
            return Selection(found, [rid for rid in named if rid not in known])
    finally:
        conn.close()


@dataclass
class Outcome:
    """What a command did to many runs: a line per run, the refusals apart."""

    verb: str
    """``cancelled``, ``retried``... for the summary."""
    done: list[tuple[str, str]] = field(default_factory=list)
    pending: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def attempt(self, run_id: str, act: Callable[[], tuple[bool, str]]) -> None:
        """Run ``act`` for one run: ``(True, line)`` done, ``(False, line)`` asked but not yet
        done; a steplog error is that run's refusal, never the end of the others."""
        try:
            finished, line = act()
        except SteplogError as exc:
            if exc.exit_code != EXIT_USAGE:
                raise
            self.refused.append((run_id, str(exc)))
            return
        (self.done if finished else self.pending).append((run_id, line))

    def report(self, dry_run: bool) -> int:
        """Print a line per run and the summary; the exit code (2 if any run was refused)."""
        if not (self.done or self.pending or self.refused):
            click.echo("no run matches; nothing done", err=True)
            return 0
        for _rid, line in [*self.done, *self.pending]:
            click.echo(line)
        for rid, why in self.refused:
            click.echo(f"refused {rid}: {why}", err=True)
        would = "would be " if dry_run else ""
        parts = [f"{len(self.done)} {would}{self.verb}"]
        if self.pending:
            parts.append(f"{len(self.pending)} {would}asked to stop (live engines)")
        parts.append(f"{len(self.refused)} refused")
        click.echo(("dry run, nothing changed: " if dry_run else "") + ", ".join(parts), err=True)
        return EXIT_USAGE if self.refused else 0
