"""Is the log damaged? The full check behind ``steplog check``, and the cheap probe the engine
runs before its first write.

Why a probe and not ``PRAGMA quick_check`` at every start: on a log of 100,000 steps (58 MB)
``quick_check`` takes 0.27 s with the file in the page cache (``integrity_check`` 0.88 s), and
both grow with the file; a resume after a kill must stay well under a second. The probe instead
reads, before anything is written, every page the engine is about to read or write for one run
(its row, its steps and effects in full, and the b-tree paths that new run, step, effect and
event rows take): a few milliseconds for a new run, ~35 ms to resume a run of 100,000 steps.
Damage elsewhere in the file is left to ``steplog check``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from steplog.errors import CorruptDatabase
from steplog.log.db import LogConnection, is_damage, is_postgres, open_readonly
from steplog.log.location import LogLocation


def damaged(path: LogLocation, what: str) -> CorruptDatabase:
    """The one-line refusal of a damaged log."""
    return CorruptDatabase(
        f"{path} is damaged ({what}); it was left untouched: `steplog check --db {path}` says what is "
        "wrong; restore it from a backup or point --db at a new path"
    )


@contextmanager
def refusing_damage(path: LogLocation) -> Iterator[None]:
    """Turn SQLite's "malformed" or "not a database" met inside the block into ``damaged``."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damaged(path, str(exc)) from exc
        raise


_PROBES = (
    # the run row, and where a new run row and its primary-key entry go
    ("SELECT * FROM run WHERE id = ?", True),
    ("SELECT * FROM run WHERE rowid = (SELECT max(rowid) FROM run)", False),
    # the run's steps read in full (replay reads them all), and where new step rows go
    (
        "SELECT max(length(name) + coalesce(length(decision), 0) + coalesce(length(result), 0)"
        " + coalesce(length(error), 0)) FROM step WHERE run_id = ?",
        True,
    ),
    ("SELECT * FROM step WHERE rowid = (SELECT max(rowid) FROM step)", False),
    # the run's effects in full, and where new ledger rows and their keys go
    (
        "SELECT max(length(key) + length(target) + coalesce(length(response), 0)) FROM effect WHERE run_id = ?",
        True,
    ),
    ("SELECT key FROM effect WHERE key >= ? ORDER BY key LIMIT 1", True),
    ("SELECT * FROM effect WHERE rowid = (SELECT max(rowid) FROM effect)", False),
    # where the run's next event row and its index entry go
    ("SELECT id FROM event WHERE run_id = ? ORDER BY id DESC LIMIT 1", True),
    ("SELECT * FROM event WHERE id = (SELECT max(id) FROM event)", False),
    ("SELECT * FROM sqlite_sequence", False),
)


def probe(conn: LogConnection, path: LogLocation, run_id: str | None) -> None:
    """Read every page the engine is about to touch for ``run_id``; ``CorruptDatabase`` if one is
    damaged. Call it before the first write (inside the claim's transaction, before any change).
    A PostgreSQL server checks its own pages (checksums, WAL): nothing to probe there.

    The readers call it too, before they print anything (``status``, ``verdict``, ``export``
    with their run, ``runs`` with ``None``: the log's tails only). A reader needs few of these
    pages for its answer, but the tails are where every engine's next write lands: a command
    that read "ok" off a log whose tail is damaged would tell the person nothing is wrong until
    an engine fails on it. Cheap on any log (a few milliseconds; a run of 100,000 steps ~35 ms)."""
    if is_postgres(conn):
        return
    with refusing_damage(path):
        for sql, takes_run in _PROBES:
            if takes_run and run_id is None:
                continue
            conn.execute(sql, (run_id,) if takes_run else ()).fetchall()


@dataclass
class Report:
    """What ``steplog check`` found."""

    path: LogLocation
    version: int
    problems: list[str] = field(default_factory=list)
    runs: int = 0
    steps: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.runs} runs, {self.steps} steps, schema v{self.version}"
        first = "; ".join(p.replace("\n", " ") for p in self.problems[:2])
        more = (
            f" (and {len(self.problems) - 2} more, listed on stdout)"
            if len(self.problems) > 2
            else ""
        )
        return f"{self.path} is damaged: {first}{more}; restore it from a backup or point --db at a new path"


def check(path: LogLocation) -> Report:
    """``PRAGMA integrity_check`` on a read-only connection (immutable when no -wal exists).

    A non-log file, or one damaged where SQLite keeps its schema, raises ``LogError`` like any
    other command would. SQLite aborts a whole ``integrity_check`` at the first page it cannot
    read at all, so then each table is checked on its own, to say which ones are damaged.
    """
    conn = open_readonly(
        path, one_shot=True
    )  # missing, foreign, newer, empty: refused like every reader does
    if is_postgres(conn):
        return _check_postgres(conn, path)
    try:
        report = Report(path=path, version=int(conn.execute("PRAGMA user_version").fetchone()[0]))
        try:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            report.problems = (
                []
                if rows == ["ok"]
                else [r.removeprefix("*** in database main ***\n") for r in rows]
            )
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            report.problems = list(_table_by_table(conn)) or [f"the file as a whole: {exc}"]
        if report.ok:
            _count(conn, report)
    finally:
        conn.close()
    return report


def _table_by_table(conn: LogConnection) -> Iterator[str]:
    tables = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    for table in tables:
        try:
            rows = [r[0] for r in conn.execute(f'PRAGMA integrity_check("{table}")')]
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            yield f"table {table}: its pages cannot be read ({exc})"
            continue
        if rows != ["ok"]:
            yield from (
                f"table {table}: {r.removeprefix('*** in database main ***' + chr(10))}"
                for r in rows
            )


def _check_postgres(conn: LogConnection, path: LogLocation) -> Report:
    """A PostgreSQL log: the server guards its pages (``integrity_check`` is SQLite's); what is
    checked here is steplog's part: the schema version (by ``open_readonly``), the append-only
    triggers on ``event``, and that every step and effect belongs to a run."""
    from steplog.log.pgschema import META_TABLE

    try:
        version = int(
            conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = 'schema_version'").fetchone()[
                0
            ]
        )
        report = Report(path=path, version=version)
        triggers = {
            r[0]
            for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'event'::regclass AND NOT tgisinternal"
            )
        }
        for name in ("event_is_append_only_update", "event_is_append_only_delete"):
            if name not in triggers:
                report.problems.append(
                    f"the event table lost its trigger {name} (it is no longer append-only)"
                )
        for table in ("step", "effect"):
            orphans = int(
                conn.execute(
                    f"SELECT count(*) FROM {table} t WHERE NOT EXISTS"
                    " (SELECT 1 FROM run r WHERE r.id = t.run_id)"
                ).fetchone()[0]
            )
            if orphans:
                report.problems.append(
                    f"table {table}: {orphans} row(s) of runs that are not in the run table"
                )
        if report.ok:
            _count(conn, report)
    finally:
        conn.close()
    return report


def _count(conn: LogConnection, report: Report) -> None:
    """The runs and steps a healthy log holds (the "ok" line says them)."""
    report.runs = int(conn.execute("SELECT count(*) FROM run").fetchone()[0])
    report.steps = int(conn.execute("SELECT count(*) FROM step").fetchone()[0])
