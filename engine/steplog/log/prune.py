"""``steplog prune``: remove whole finished runs from the log, archive them first if asked, and
give the space back.

The one audited way rows leave the log. For each run, inside one write transaction: a ``pruned``
row is inserted in state 'pruning' (the schema's trigger refuses it unless the run is finished: a
queued, running or waiting run can never lose a row); only while that row exists may the run's
events and run row be deleted (the append-only triggers say so); every per-run table of
``schema.RUN_TABLES`` is emptied of the run; the row becomes 'done' with the counts. A
``runs_pruned`` event (run id ``""``) tells tailing readers which runs are gone. A run is never
pruned in part: either the transaction commits or nothing changed.

Runs are deleted in batches of about ``BATCH_ROWS`` rows, one transaction each, that locks only
the runs it prunes (``db.run_locked``'s lock of each, then its row): on PostgreSQL engines of
other runs go on side by side; on SQLite, whose writers take turns on the file's lock, an engine
waits milliseconds, never its busy timeout. Then the space: ``--reclaim`` is the log's own
(``space`` for a file, ``pgspace`` for PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steplog.errors import RunNotFinished, UnknownRun, UsageError
from steplog.log.archive import durable_output, refuse_existing, write_runs
from steplog.log.backend import backend_for, backend_of
from steplog.log.connection import LogConnection
from steplog.log.db import for_update, inspect, log_file, open_log, open_readonly, run_write
from steplog.log.events import EventKind
from steplog.log.journal import append_event, dumps
from steplog.log.lease import LEASE_COLUMNS, lease_vacancy
from steplog.log.location import LogLocation
from steplog.log.runstatus import ACTIVE, TERMINAL
from steplog.log.schema import RUN_TABLES
from steplog.log.space import FILE_SPACE, RECLAIM, VACUUM_MAX_BYTES, Pacer, file_bytes

FINISHED = TERMINAL
"""Statuses a run can be pruned in: the terminal ones. The schema's trigger holds the same list."""

NOT_PRUNABLE = ACTIVE

__all__ = ["RECLAIM", "VACUUM_MAX_BYTES"]  # re-exported: where ``prune``'s callers find them

BATCH_ROWS = 5_000
"""Rows deleted per transaction (whole runs only): tens of milliseconds of holding the write
lock."""

BATCH_RUNS = 200
"""At most this many runs per transaction: each is locked (``db.run_locked``'s lock), and
PostgreSQL keeps such locks in a shared table of a few thousand for all sessions."""

_PER_RUN_QUERIES = 64
"""Up to this many runs are sized one by one through the run index; more by one grouped scan."""

_ROW_OVERHEAD = 24
"""Bytes a row costs beyond its values (record header, cell pointer, index entries), roughly."""


@dataclass(frozen=True)
class Selection:
    """Which runs to prune. Every given criterion must hold; ``run_ids`` empty means any run."""

    run_ids: tuple[str, ...] = ()
    statuses: frozenset[str] = FINISHED
    older_than_days: float | None = None
    """Finished more than this many days ago."""
    keep_last: int | None = None
    """Of the runs the other criteria select, keep the newest N (by finish time)."""

    def __post_init__(self) -> None:
        live = sorted(set(self.statuses) & set(NOT_PRUNABLE))
        if live:
            raise UsageError(
                f"--status {','.join(live)}: prune removes finished runs only "
                f"({', '.join(sorted(FINISHED))}), never a queued, running or waiting one"
            )
        unknown = sorted(set(self.statuses) - FINISHED)
        if unknown:
            raise UsageError(
                f"--status {','.join(unknown)} is not a run status; use some of "
                f"{','.join(sorted(FINISHED))}"
            )
        if self.older_than_days is not None and not (
            self.older_than_days >= 0 and self.older_than_days < 1e6
        ):
            raise UsageError(
                f"--older-than must be a number of days, 0 or more (got {self.older_than_days})"
            )
        if self.keep_last is not None and self.keep_last < 0:
            raise UsageError(f"--keep-last must be 0 or more (got {self.keep_last})")


@dataclass(frozen=True)
class Candidate:
    run_id: str
    agent: str
    status: str
    created_at: float
    finished_at: float | None
    rows: dict[str, int]
    bytes: int
    """About how many bytes its rows take (values plus a per-row overhead): what pruning frees."""


@dataclass
class Report:
    """What a prune did (or, dry, would do)."""

    dry_run: bool
    pruned: list[Candidate] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(run id, why) of selected runs left alone: one became live again, or its engine is live."""
    archive: str | None = None
    file_bytes_before: int = 0
    file_bytes_after: int = 0
    freed_pages: int = 0
    auto_vacuum: str = "incremental"
    reclaimed_by: str = "none"
    """"vacuum", "incremental" or "none": how the freed pages were given back (``space``)."""
    reclaim_words: Mapping[str, str] = field(default_factory=lambda: FILE_SPACE.words)
    """How the summary names each way of reclaiming, on this log (``Space.words``)."""
    left_in_place: str | None = None
    """The summary's line when the freed room stays where it is (``Space.left_in_place``)."""
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent choosing, archiving, deleting and giving space back."""

    @property
    def rows(self) -> int:
        return sum(sum(c.rows.values()) for c in self.pruned)

    @property
    def estimated_bytes(self) -> int:
        return sum(c.bytes for c in self.pruned)

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "runs": [c.run_id for c in self.pruned],
            "rows": self.rows,
            "rows_by_table": {t: sum(c.rows.get(t, 0) for c in self.pruned) for t, _ in RUN_TABLES},
            "estimated_bytes": self.estimated_bytes,  # measured by a dry run only
            "skipped": [{"run_id": r, "why": why} for r, why in self.skipped],
            "archive": self.archive,
            "file_bytes_before": self.file_bytes_before,
            "file_bytes_after": self.file_bytes_after,
            "reclaimed_bytes": max(0, self.file_bytes_before - self.file_bytes_after),
            "freed_pages": self.freed_pages,
            "auto_vacuum": self.auto_vacuum,
            "reclaimed_by": self.reclaimed_by,
            "seconds": round(self.seconds, 3),
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
        }


def log_bytes(path: Path) -> int:
    """A log file's size on disk: the file and its -wal."""
    return file_bytes(path)


# -- choosing ----------------------------------------------------------------------------------


def _live(lease: Sequence[Any], now: float) -> bool:
    """Does a live engine hold the run? ``lease``: its ``LEASE_COLUMNS``."""
    return lease[0] is not None and lease_vacancy(lease, now) is None


def _sizes(
    conn: LogConnection, run_ids: set[str], *, measure: bool
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Rows per table of each run in ``run_ids`` and, if ``measure``, the bytes they take (which
    reads every value: the dry run and the monitor's offer need it, the prune itself does not)."""
    rows: dict[str, dict[str, int]] = {r: {} for r in run_ids}
    size: dict[str, int] = dict.fromkeys(run_ids, 0)
    backend = backend_of(conn)
    for table, column in RUN_TABLES:
        cols = backend.columns(conn, table)
        width = " + ".join(backend.space.value_bytes(f'"{c}"') for c in cols) if measure else "0"
        found: Iterable[tuple[Any, ...]]
        if len(run_ids) <= _PER_RUN_QUERIES:
            found = (
                conn.execute(
                    f'SELECT ?, count(*), sum({width}) FROM "{table}" WHERE "{column}" = ?', (r, r)
                ).fetchone()
                for r in run_ids
            )
        else:
            found = conn.execute(
                f'SELECT "{column}", count(*), sum({width}) FROM "{table}" GROUP BY "{column}"'
            )
        for run_id, n, values in found:
            if run_id in rows and n:
                rows[run_id][table] = n
                size[run_id] += int(values or 0) + n * _ROW_OVERHEAD if measure else 0
    return rows, size


def select(
    conn: LogConnection,
    selection: Selection,
    *,
    now: float | None = None,
    measure: bool = True,
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The runs ``selection`` names that may be pruned now, and (id, why) of named ones that may
    not.
    ``measure``: estimate the bytes each frees (``Candidate.bytes``; 0 when not measured).

    Runs named by id must exist (``UnknownRun``) and be finished (``RunNotFinished``)."""
    now = time.time() if now is None else now
    found = {
        r[0]: r
        for r in conn.execute(
            f"SELECT id, agent, status, created_at, finished_at, {LEASE_COLUMNS} FROM run"
        )
    }
    for run_id in selection.run_ids:
        row = found.get(run_id)
        if row is None:
            raise UnknownRun(f"no run {run_id!r} in this log; `steplog runs` lists the runs there")
        if row[2] not in FINISHED:
            raise RunNotFinished(
                f"run {run_id} is {row[2]}; prune removes finished runs only "
                "(wait for it to finish, or cancel it first)"
            )
        if _live(row[5:], now):
            raise RunNotFinished(
                f"run {run_id} is held by a live engine (pid {row[5]}); prune it once that engine "
                "exits"
            )
    chosen = [
        r
        for r in found.values()
        if r[2] in selection.statuses
        and r[2] in FINISHED
        and (not selection.run_ids or r[0] in selection.run_ids)
        and (
            selection.older_than_days is None
            or (r[4] or r[3]) < now - selection.older_than_days * 86_400
        )
    ]
    chosen.sort(key=lambda r: (r[4] or r[3], r[3], r[0]), reverse=True)  # newest first
    if selection.keep_last:
        chosen = chosen[selection.keep_last :]
    skipped = [
        (r[0], f"its engine (pid {r[5]}) still holds it") for r in chosen if _live(r[5:], now)
    ]
    chosen = [r for r in chosen if not _live(r[5:], now)]
    rows, size = _sizes(conn, {r[0] for r in chosen}, measure=measure) if chosen else ({}, {})
    candidates = [
        Candidate(r[0], r[1], r[2], r[3], r[4], rows[r[0]], size[r[0]]) for r in reversed(chosen)
    ]
    return candidates, skipped


def estimate(location: LogLocation, run_ids: Sequence[str]) -> list[Candidate]:
    """What pruning these runs would free, read-only (the monitor asks before it offers)."""
    conn = open_readonly(location, one_shot=True)
    try:
        return select(conn, Selection(run_ids=tuple(run_ids)))[0]
    finally:
        conn.close()


# -- pruning -----------------------------------------------------------------------------------


def _batches(candidates: list[Candidate]) -> Iterable[list[Candidate]]:
    batch: list[Candidate] = []
    rows = 0
    for c in candidates:
        batch.append(c)
        rows += sum(c.rows.values())
        if rows >= BATCH_ROWS or len(batch) >= BATCH_RUNS:
            yield batch
            batch, rows = [], 0
    if batch:
        yield batch


def _prune_batch(
    conn: LogConnection,
    batch: list[Candidate],
    archive: str | None,
    report: Report,
    archived: dict[str, dict[str, int]] | None = None,
) -> None:
    """Prune ``batch`` in one transaction. ``archived``: the rows per table each run had when it
    was written to the archive; a run that has other rows now (it was retried, ran and ended
    again in between) is left alone, so nothing is deleted that the archive does not hold."""
    now = time.time()
    done: list[str] = []
    backend = backend_of(conn)
    with run_write(conn):
        # Each run's own lock, in one order (two prunes never wait for each other in a ring),
        # then its row: what ``db.run_locked`` takes for one run, here for the batch's runs only.
        for run_id in sorted({c.run_id for c in batch}):
            backend.lock_run(conn, run_id)
        for c in batch:
            row = conn.execute(
                f"SELECT status, {LEASE_COLUMNS} FROM run WHERE id = ?{for_update(conn)}",
                (c.run_id,),
            ).fetchone()
            if row is None:
                report.skipped.append((c.run_id, "it was gone already"))
                continue
            if row[0] not in FINISHED or _live(row[1:], now):
                report.skipped.append(
                    (
                        c.run_id,
                        f"it became {row[0]} since it was selected"
                        if row[0] not in FINISHED
                        else "an engine took it since it was selected",
                    )
                )
                continue
            if archived is not None and _rows_now(conn, c.run_id) != archived.get(c.run_id):
                report.skipped.append(
                    (
                        c.run_id,
                        "it changed since it was archived (the archive holds it as it was; prune "
                        "it again to archive and remove it as it is)",
                    )
                )
                continue
            record = conn.execute(
                "INSERT INTO pruned (run_id, agent, status, created_at, finished_at, pruned_at, "
                "archive) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (c.run_id, c.agent, c.status, c.created_at, c.finished_at, now, archive),
            ).fetchone()[0]
            counts: dict[str, int] = {}
            for table, column in reversed(RUN_TABLES):  # the run row last
                counts[table] = conn.execute(
                    f'DELETE FROM "{table}" WHERE "{column}" = ?', (c.run_id,)
                ).rowcount
            conn.execute(
                "UPDATE pruned SET state = 'done', rows = ? WHERE id = ?", (dumps(counts), record)
            )
            report.pruned.append(
                Candidate(c.run_id, c.agent, c.status, c.created_at, c.finished_at, counts, c.bytes)
            )
            done.append(c.run_id)
        if done:
            # Of no run (run id ""): it tells tailing readers which runs are gone.
            append_event(
                conn, "", 0, EventKind.RUNS_PRUNED, {"runs": done, "archive": archive}, ts=now
            )


def _rows_now(conn: LogConnection, run_id: str) -> dict[str, int]:
    """The run's rows per table, counted as ``archive.run_lines`` counts them (zeros included)."""
    count = 'SELECT count(*) FROM "{}" WHERE "{}" = ?'
    return {
        table: int(conn.execute(count.format(table, column), (run_id,)).fetchone()[0])
        for table, column in RUN_TABLES
    }


def _check_reclaim(conn: LogConnection, location: LogLocation, how: str) -> None:
    """Refuse, before anything is deleted, a reclaim this log cannot do now (``Space.refuse``),
    or a rewrite of a big log (more than ``VACUUM_MAX_BYTES`` now) while an engine works on it:
    the rewrite would hold every table past the engine's patience (SQLite's busy timeout)."""
    space = backend_of(conn).space
    space.refuse(conn, how)
    size = space.size(conn, location)
    if how != "vacuum" or size <= VACUUM_MAX_BYTES:
        return
    now = time.time()
    live = [
        r[0]
        for r in conn.execute(f"SELECT id, {LEASE_COLUMNS} FROM run WHERE lease_pid IS NOT NULL")
        if _live(r[1:], now)
    ]
    if live:
        more = f" (and {len(live) - 1} more)" if len(live) > 1 else ""
        raise RunNotFinished(
            f"--reclaim vacuum rewrites this {size / 1e6:,.0f} MB log and would stall the engine "
            "of run "
            f"{live[0]}{more} past its busy timeout; nothing was pruned: run it when no engine is "
            "working, or use --reclaim auto or incremental"
        )


def _there(location: LogLocation) -> bool:
    """Is there a log at ``location`` (a file, or a database holding a log's schema)? Opening
    it for writing would make one."""
    path = log_file(location)
    return path.exists() if path is not None else inspect(location) > 0


def prune(
    path: LogLocation,
    selection: Selection,
    *,
    archive: Path | None = None,
    dry_run: bool = False,
    reclaim: str = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Prune the runs ``selection`` names from the log at ``path`` (a file or a PostgreSQL
    URL); see the module docstring.

    ``archive``: first write them (``steplog.log.archive`` format, gzip) to this new file, fsynced.
    ``dry_run``: only say what would go (the log is opened read-only). ``reclaim``: one of
    ``RECLAIM``. ``progress(done, total)`` is called after each batch."""
    if reclaim not in RECLAIM:
        raise UsageError(f"--reclaim {reclaim!r}: use one of {', '.join(RECLAIM)}")
    started = time.monotonic()
    space = backend_for(path).space
    report = Report(
        dry_run=dry_run, archive=str(archive) if archive else None, reclaim_words=space.words
    )
    if not _there(path):  # open_log would make an empty log there
        raise UsageError(f"no log at {path}; pass --db with the log to prune (nothing was created)")
    if archive is not None:
        refuse_existing(archive, "prune --archive")
    if dry_run:
        conn = open_readonly(path, one_shot=True)
        try:
            report.pruned, report.skipped = select(conn, selection)
            report.file_bytes_before = report.file_bytes_after = space.size(conn, path)
            report.auto_vacuum = space.mode(conn)
        finally:
            conn.close()
        report.seconds = time.monotonic() - started
        return report
    conn = open_log(path)
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        report.phases[name] = now - clock
        clock = now

    try:
        report.file_bytes_before = space.size(conn, path)
        _check_reclaim(conn, path, reclaim)
        candidates, report.skipped = select(conn, selection, measure=False)
        phase("choosing")
        written: dict[str, dict[str, int]] | None = None
        if archive is not None and candidates:
            with durable_output(archive, compress=archive.suffix == ".gz") as out:
                written = write_runs(conn, [c.run_id for c in candidates], out)
            phase("archiving")
            # Only what the archive holds is removed: a run set going again since it was chosen
            # (``steplog retry``) was left out of it, and stays.
            report.skipped += [
                (c.run_id, "it was set going again before it was archived")
                for c in candidates
                if c.run_id not in written
            ]
            candidates = [c for c in candidates if c.run_id in written]
        archived = str(archive.resolve()) if archive is not None else None
        done = 0
        pacer = Pacer(space.writers_take_turns)
        for batch in _batches(candidates):
            with pacer:
                _prune_batch(conn, batch, archived, report, written)
            done += len(batch)
            if progress is not None:
                progress(done, len(candidates))
        phase("deleting")
        report.reclaimed_by, report.freed_pages = space.reclaim(conn, reclaim)
        report.auto_vacuum = space.mode(conn)
        if report.reclaimed_by == "none" and (report.pruned or report.freed_pages):
            report.left_in_place = space.left_in_place(report.freed_pages)
        space.settle(conn)
        phase("reclaiming")
        report.file_bytes_after = space.size(conn, path)
    finally:
        conn.close()
    report.seconds = time.monotonic() - started
    return report


def describe(report: Report) -> str:
    """The command's human summary (a few lines)."""
    verb = "would prune" if report.dry_run else "pruned"
    n = len(report.pruned)
    by_table = ", ".join(f"{v:,} {t}" for t, v in report.as_json()["rows_by_table"].items() if v)
    lines = [
        f"{verb} {n} run{'s' if n != 1 else ''}"
        + (f" ({report.rows:,} rows: {by_table})" if n else "")
    ]
    if report.dry_run:
        if n:
            lines.append(f"  frees about {_mb(report.estimated_bytes)}")
    else:
        if report.archive and n:
            lines.append(f"  archived first to {report.archive}")
        lines.append(
            f"  log {_mb(report.file_bytes_before)} -> {_mb(report.file_bytes_after)} (reclaimed "
            f"{_mb(max(0, report.file_bytes_before - report.file_bytes_after))})"
            + report.reclaim_words.get(report.reclaimed_by, "")
        )
        if report.left_in_place:
            lines.append(f"  {report.left_in_place}")
    for run_id, why in report.skipped:
        lines.append(f"  left {run_id}: {why}")
    return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"
