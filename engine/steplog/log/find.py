"""Finding runs: ``steplog runs`` with filters, and the monitor's runs list, page by page.

A ``RunQuery`` says which runs (every field narrows; tags AND together) and ``find_runs`` reads
them newest first (``created_at``, then id, descending: the order of every runs list), as
``steplog status --json`` objects with their tags. A page after the first starts below the last
run of the one before (``RunQuery.before``: keyset paging, so page 1,000 of 100,000 runs costs
what page 1 does, where an OFFSET would skip 50,000 rows).

Indexes (schema v10): ``run_by_created`` walks the newest runs without a sort, ``run_by_status``
and ``run_by_agent`` the newest of a status or an agent, ``run_tag_by_value`` finds the runs of a
tag. A text search reads runs newest first until it has its page (``LIKE`` has no index to use;
every run when nothing matches): well under a second for 100,000 runs
(``tests/benchmarks/test_find_runs_bench.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from steplog.errors import UsageError
from steplog.log.runstatus import RunStatus
from steplog.log.tags import TAG_TABLE, has_tags_table, parse_tag
from steplog.log.when import parse_when

if TYPE_CHECKING:
    from steplog.log.connection import LogConnection


@dataclass(frozen=True)
class RunQuery:
    """Which runs to read. Every field given narrows the list; the defaults read every run."""

    statuses: tuple[RunStatus, ...] = ()
    """Runs in any of these statuses (empty: any status)."""
    agent: str | None = None
    """Runs of this agent, as the log names it (``status --json``'s ``"agent"``)."""
    tags: tuple[tuple[str, str], ...] = ()
    """Runs with every one of these ``(key, value)`` tags."""
    since: float | None = None
    """Runs created at or after this Unix time."""
    until: float | None = None
    """Runs created before this Unix time."""
    search: str | None = None
    """Text found (any case) in the run's id, agent, params, reason or a tag's key or value."""
    version: str | None = None
    """Runs started on this code version (``@steplog.agent(version=...)``, issue 31): a log
    without versions has no run of any."""
    limit: int | None = None
    """At most this many runs (``None``: all)."""
    run_ids: tuple[str, ...] = ()
    """Only these runs (empty: any): which of them match (a list told of new runs asks this)."""
    before: tuple[float, str] | None = None
    """Only runs older than this one, as ``(created_at, run_id)``: the next page after a page
    whose last run it is (``next_page``)."""

    def next_page(self, last: dict[str, Any]) -> RunQuery:
        """The same query for the runs after ``last`` (the last status object of a page)."""
        return replace(self, before=(float(last["created_at"]), str(last["run_id"])))

    @property
    def filtered(self) -> bool:
        """Whether anything but the paging narrows it."""
        return bool(
            self.statuses
            or self.agent
            or self.tags
            or self.since is not None
            or self.until is not None
            or self.search
            or self.version is not None
        )


def query_from_options(
    *,
    status: str | None = None,
    agent: str | None = None,
    tags: Iterable[str] = (),
    since: str | None = None,
    until: str | None = None,
    search: str | None = None,
    version: str | None = None,
    limit: int | None = None,
) -> RunQuery:
    """A ``RunQuery`` from text as typed (``--status failed,gave_up --tag team=a --since 2h``);
    ``UsageError`` with the fix for the first thing that is not right."""
    return RunQuery(
        statuses=parse_statuses(status),
        agent=agent or None,
        tags=tuple(parse_tag(t) for t in tags),
        since=None if not since else parse_when(since, option="--since"),
        until=None if not until else parse_when(until, option="--until"),
        search=search or None,
        version=version,
        limit=check_limit(limit),
    )


def parse_statuses(text: str | None) -> tuple[RunStatus, ...]:
    """``failed,gave_up`` as statuses; an unknown one is refused with the list of known ones."""
    if not text:
        return ()
    out: list[RunStatus] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        try:
            out.append(RunStatus(word.replace("-", "_").replace(" ", "_").lower()))
        except ValueError:
            known = ",".join(s.value for s in RunStatus)
            raise UsageError(
                f"--status {word!r} is not a run status; give one or more of {known}"
            ) from None
    return tuple(dict.fromkeys(out))


def check_limit(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit} must be 1 or more (leave it out for every run)")
    return limit


def _like(text: str) -> str:
    """``text`` as a ``LIKE`` pattern that matches it anywhere, its own ``%`` and ``_`` literal."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def where_clause(conn: LogConnection, q: RunQuery) -> tuple[str, tuple[Any, ...]]:
    """The ``WHERE`` condition over table ``run`` for ``q`` (without paging), and its values.
    Shared with ``count_runs`` and, for a grouping over the same runs, other readers of the log
    package (``steplog cost``)."""
    from steplog.log.db import has_column

    parts: list[str] = []
    args: list[Any] = []
    if q.run_ids:
        parts.append(f"id IN ({', '.join('?' for _ in q.run_ids)})")
        args.extend(q.run_ids)
    if q.statuses:
        parts.append(f"status IN ({', '.join('?' for _ in q.statuses)})")
        args.extend(str(s) for s in q.statuses)
    if q.agent:
        parts.append("agent = ?")
        args.append(q.agent)
    if q.since is not None:
        parts.append("created_at >= ?")
        args.append(q.since)
    if q.until is not None:
        parts.append("created_at < ?")
        args.append(q.until)
    tagged = has_tags_table(conn)
    for key, value in q.tags:
        if not tagged:
            parts.append("1 = 0")  # a log before tags: no run has one
            continue
        parts.append(f"id IN (SELECT run_id FROM {TAG_TABLE} WHERE key = ? AND value = ?)")
        args.extend((key, value))
    if q.version is not None:
        if has_column(conn, "run", "version"):
            parts.append("version = ?")
            args.append(q.version)
        else:
            parts.append("1 = 0")  # a log before versions: no run has one
    if q.search:
        from steplog.log.backend import backend_of

        like = f"{backend_of(conn).like_any_case} ? ESCAPE '\\'"
        pattern = _like(q.search)
        fields = ["id", "agent", "params", "reason"]
        ors = [f"{f} {like}" for f in fields]
        args.extend(pattern for _ in fields)
        if tagged:
            ors.append(f"id IN (SELECT run_id FROM {TAG_TABLE} WHERE key {like} OR value {like})")
            args.extend((pattern, pattern))
        parts.append(f"({' OR '.join(ors)})")
    return (" AND ".join(parts) or "1 = 1"), tuple(args)


def find_runs(conn: LogConnection, q: RunQuery) -> list[dict[str, Any]]:
    """The runs ``q`` selects, newest first, as ``steplog status --json`` objects (with
    ``"tags"``). Read-only; works on a log of any schema version (an old one has no tags)."""
    from steplog.log.status import select_statuses

    where, args = where_clause(conn, q)
    if q.before is not None:
        created, rid = q.before
        where += " AND (created_at < ? OR (created_at = ? AND id < ?))"
        args = (*args, created, created, rid)
    tail = "ORDER BY created_at DESC, id DESC"
    if q.limit is not None:
        tail += f" LIMIT {int(q.limit)}"
    return select_statuses(conn, where, args, tail)


def count_runs(conn: LogConnection, q: RunQuery) -> int:
    """How many runs ``q`` selects (its limit and paging aside)."""
    where, args = where_clause(conn, q)
    return int(conn.execute(f"SELECT count(*) FROM run WHERE {where}", args).fetchone()[0])


def runs_by_id(conn: LogConnection, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The status objects of these runs that are in the log, by id (a list refreshing rows it
    shows)."""
    from steplog.log.status import select_statuses

    out: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(run_ids))
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        for s in select_statuses(conn, f"id IN ({', '.join('?' for _ in chunk)})", tuple(chunk)):
            out[s["run_id"]] = s
    return out


@dataclass(frozen=True)
class Page:
    """One page of a query: its runs and whether more follow."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    more: bool = False


def read_page(conn: LogConnection, q: RunQuery, size: int) -> Page:
    """``size`` runs of ``q`` (from ``q.before``), and whether there are more after them."""
    runs = find_runs(conn, replace(q, limit=size + 1))
    return Page(runs[:size], len(runs) > size)


__all__ = [
    "Page",
    "RunQuery",
    "check_limit",
    "count_runs",
    "find_runs",
    "parse_statuses",
    "query_from_options",
    "read_page",
    "runs_by_id",
    "where_clause",
]
