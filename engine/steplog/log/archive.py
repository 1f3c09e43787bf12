"""One run's whole history as JSON lines: what ``steplog export`` writes, ``steplog import`` loads
and ``steplog prune --archive`` keeps before it deletes.

The format (UTF-8, one JSON object a line; a file holds one run or many, one after another, and
may be gzip-compressed, which ``import`` recognises by its first bytes)::

    {"steplog_export": 1, "schema": 2, "run_id": "r1", "exported_at": 1764547200.0}
    {"table": "run", "row": {"id": "r1", "agent": "demo", ...every column...}}
    {"table": "step", "row": {...}}            one line per row of every table in
    {"table": "effect", "row": {...}}          ``schema.RUN_TABLES``, in that order
    {"table": "event", "row": {...}}           (events in id order)
    {"end": "r1", "rows": {"run": 1, "step": 12, "effect": 6, "event": 40}}

The ``end`` line makes a cut-off file detectable: a run without it is refused, never half loaded.
Rows are copied column by column, so ``status --json`` and ``verdict`` of an imported run read
exactly as before it left. One exception: imported events get new ids at the end of the log
(their order kept), because a tailing reader only ever looks above its bookmark.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sqlite3
import sys
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from steplog.errors import ArchiveError, OutputError, RunNotFinished, UsageError
from steplog.log.backend import backend_of
from steplog.log.connection import LogConnection
from steplog.log.location import LogLocation
from steplog.log.schema import RUN_TABLES, SCHEMA_VERSION
from steplog.log.status import TERMINAL

FORMAT_VERSION = 1
"""``steplog_export`` in the first line; bumped only if a reader of version 1 would misread."""

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ArchivedRun:
    """One run read back from an export: its rows by table, in ``RUN_TABLES`` order."""

    run_id: str
    schema: int
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unfinished: str | None = None
    """Set by ``insert_run`` to the status the run had in the archive when it was not finished
    there (an archive from an older steplog): it was imported ``cancelled``
    (``IMPORTED_UNFINISHED``)."""

    def counts(self) -> dict[str, int]:
        return {table: len(self.rows.get(table, [])) for table, _ in RUN_TABLES}


# -- writing ---------------------------------------------------------------------------------


def _order_by(conn: LogConnection, table: str) -> str:
    """The table's primary key columns, in key order: rows come out in a stable order whatever
    the table's storage (rowid or not)."""
    # Every table of a run has one (``schema.RUN_TABLES``); "1" only keeps the SQL valid.
    return ", ".join(f'"{name}"' for name in backend_of(conn).primary_key(conn, table)) or "1"


def run_lines(conn: LogConnection, run_id: str) -> Generator[str, None, None]:
    """The export lines of one finished run, read in one snapshot.

    Raises ``UnknownRun`` if the log has no such run, and ``RunNotFinished`` if it is queued,
    running or waiting in that snapshot, before the first line: a copy of an unfinished run,
    imported into another log, would be a second run that an engine there resumes, in the same
    workdir and with the same idempotency keys, repeating step bodies and effects the first one
    is doing (or did after the snapshot)."""
    conn.execute(
        "BEGIN"
    )  # a read transaction: every table read from the same snapshot (PostgreSQL: REPEATABLE READ)
    try:
        found = conn.execute("SELECT status FROM run WHERE id = ?", (run_id,)).fetchone()
        if found is None:
            from steplog.errors import UnknownRun

            raise UnknownRun(f"no run {run_id!r} in this log; `steplog runs` lists the runs there")
        if found[0] not in TERMINAL:
            raise RunNotFinished(
                f"run {run_id} is {found[0]}; only a finished run is exported (a copy of a live "
                "one could run again elsewhere and repeat its effects): wait for it to end, or "
                f"stop it for good with `steplog cancel {run_id}`, then export it"
            )
        yield _dumps(
            {
                "steplog_export": FORMAT_VERSION,
                "schema": SCHEMA_VERSION,
                "run_id": run_id,
                "exported_at": time.time(),
            }
        )
        counts: dict[str, int] = {}
        for table, column in RUN_TABLES:
            cur = conn.execute(
                f'SELECT * FROM "{table}" WHERE "{column}" = ? ORDER BY {_order_by(conn, table)}',
                (run_id,),
            )
            names = [d[0] for d in cur.description]
            n = 0
            for values in cur:
                n += 1
                yield _dumps({"table": table, "row": dict(zip(names, values, strict=True))})
            counts[table] = n
        yield _dumps({"end": run_id, "rows": counts})
    finally:
        conn.execute("COMMIT")


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


def refuse_existing(path: Path, what: str, *, force_option: str | None = None) -> None:
    """``OutputError`` if ``path`` exists (``force_option``: the option that allows overwriting)."""
    if path.exists():
        how = f"pass {force_option} to replace it, or " if force_option else ""
        raise OutputError(
            f"{path} exists; {what} never overwrites a file unasked: {how}choose "
            "a new name or move it away"
        )


@contextmanager
def durable_output(path: Path, *, compress: bool, overwrite: bool = False) -> Iterator[IO[str]]:
    """A text file written beside ``path`` and moved into place only once complete and fsynced
    (with its folder), so ``path`` is either absent (as it was, with ``overwrite``) or whole.
    Mode 0600: it holds the log's data.

    A file system error (a full disk, a read-only or missing folder) is an ``OutputError`` and
    the temporary file is removed: nothing is left half written."""
    if not overwrite:
        refuse_existing(path, "steplog")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as raw:
            binary = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if compress else raw
            with io.TextIOWrapper(binary, encoding="utf-8", newline="\n") as text:
                yield text
                text.flush()
                if compress:
                    binary.close()  # writes the gzip trailer into ``raw``
                raw.flush()
                os.fsync(raw.fileno())
        if not overwrite:
            refuse_existing(path, "steplog")
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(
            f"cannot write {path} ({exc.strerror or exc}); nothing of it was left "
            "and the log is unchanged: free some space or choose another file"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_runs(
    conn: LogConnection, run_ids: Iterable[str], out: IO[str]
) -> dict[str, dict[str, int]]:
    """Write the runs one after another; returns the rows per table of each run written.

    A run that is no longer finished when its turn comes (``steplog retry`` set it going again
    since it was chosen) is left out, and so out of the result: it is not archived."""
    written: dict[str, dict[str, int]] = {}
    for run_id in run_ids:
        lines = run_lines(conn, run_id)
        try:
            last = next(lines)  # refused (and nothing written) before its first line
            out.write(last)
            for last in lines:
                out.write(last)
        except RunNotFinished:
            continue
        finally:
            lines.close()  # a failed write ends the read transaction here, on an open connection
        written[run_id] = json.loads(last)["rows"]  # the end line
    return written


# -- reading ---------------------------------------------------------------------------------


def _open_text(source: str | Path) -> IO[str]:
    if str(source) == "-":
        data: BinaryIO | gzip.GzipFile = sys.stdin.buffer
        head = data.peek(2)[:2] if hasattr(data, "peek") else b""
    else:
        path = Path(source)
        if not path.is_file():
            raise UsageError(
                f"{path} does not exist or is not a file; give the file `steplog export` or "
                "`steplog prune --archive` wrote"
            )
        data = open(path, "rb")
        head = data.read(2)
        data.seek(0)
    if head == _GZIP_MAGIC:
        data = gzip.GzipFile(fileobj=data, mode="rb")
    return io.TextIOWrapper(data, encoding="utf-8")


def read_runs(source: str | Path) -> Iterator[ArchivedRun]:
    """The runs in an export file (plain or gzip, or ``-`` for stdin), each checked whole:
    header, rows of known tables, and an ``end`` line whose counts match."""
    name = "stdin" if str(source) == "-" else str(source)
    current: ArchivedRun | None = None
    lineno = 0
    with _open_text(source) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise ArchiveError(
                        f"{name} line {lineno} is not JSON; this is not a steplog export "
                        "(or it is damaged): give the file `steplog export` wrote"
                    ) from None
                if not isinstance(obj, dict):
                    raise ArchiveError(f"{name} line {lineno} is not a steplog export record")
                current = _take(obj, current, name, lineno)
                if current is not None and "end" in obj:
                    yield current
                    current = None
        except (EOFError, gzip.BadGzipFile, UnicodeDecodeError, OSError) as exc:
            raise ArchiveError(
                f"{name} is cut off or damaged after line {lineno} ({exc}); nothing of it "
                "was imported: use a complete copy"
            ) from None
    if current is not None:
        raise ArchiveError(
            f"{name} ends inside run {current.run_id!r} (no end line): the file is cut off; "
            "nothing of it was imported: use a complete copy"
        )
    if lineno == 0:
        raise ArchiveError(f"{name} is empty; give the file `steplog export` wrote")


def _valid_run_id(value: Any, where: str) -> str:
    """The header's run id, if it is one ``steplog run --run-id`` accepts (``runids.check_run_id``):
    every tool that names runs (status, cancel, workdirs ``runs/RUN_ID``) relies on that charset."""
    from steplog.log.runids import check_run_id

    try:
        if not isinstance(value, str):
            raise UsageError("not text")
        check_run_id(value)
    except UsageError:
        raise ArchiveError(
            f"{where}: {value!r} is not a run id (letters, digits, '-', '_' "
            "and '.', at most 100, starting with a letter or digit); nothing was imported: this "
            "file was not written by `steplog export` as it is"
        ) from None
    return value


def _take(
    obj: dict[str, Any], current: ArchivedRun | None, name: str, lineno: int
) -> ArchivedRun | None:
    """Fold one line into the run being read; returns it (finished when ``obj`` is its end line)."""
    where = f"{name} line {lineno}"
    if "steplog_export" in obj:
        if current is not None:
            raise ArchiveError(
                f"{where} starts a new run inside run {current.run_id!r}: the file is damaged"
            )
        if obj["steplog_export"] != FORMAT_VERSION or not isinstance(obj.get("schema"), int):
            raise ArchiveError(
                f"{where}: export format {obj['steplog_export']!r} is not one this steplog reads "
                f"({FORMAT_VERSION}); upgrade steplog"
            )
        if obj["schema"] > SCHEMA_VERSION:
            raise ArchiveError(
                f"{where}: exported from a newer steplog (schema {obj['schema']}, this one knows "
                f"{SCHEMA_VERSION}); upgrade steplog to import it"
            )
        return ArchivedRun(_valid_run_id(obj.get("run_id"), where), int(obj["schema"]))
    if current is None:
        raise ArchiveError(
            f"{where} is not the start of a steplog export; give the file `steplog export` wrote"
        )
    if "end" in obj:
        if obj["end"] != current.run_id or obj.get("rows") != current.counts():
            raise ArchiveError(
                f"{where}: run {current.run_id!r} ends with counts {obj.get('rows')} but "
                f"{current.counts()} rows were read: the file is damaged"
            )
        return current
    table, row = obj.get("table"), obj.get("row")
    known = dict(RUN_TABLES)
    if not isinstance(row, dict) or table not in known:
        raise ArchiveError(
            f"{where}: a row of table {table!r}, which this steplog does not know; "
            "upgrade steplog to import it"
        )
    if row.get(known[table]) != current.run_id:
        raise ArchiveError(
            f"{where}: a {table} row of another run inside run {current.run_id!r}: the file is "
            "damaged"
        )
    current.rows.setdefault(table, []).append(row)
    return current


# -- loading into a log ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """How one table of this log takes rows: its columns and the id column whose values the
    database makes up (``Backend.new_ids``): an imported row gets a new one."""

    columns: frozenset[str]
    new_ids: str | None


def _targets(conn: LogConnection) -> dict[str, _Target]:
    backend = backend_of(conn)
    return {
        table: _Target(frozenset(backend.columns(conn, table)), backend.new_ids(conn, table))
        for table, _ in RUN_TABLES
    }


_NO_LEASE = {
    "lease_pid": None,
    "lease_host": None,
    "lease_boot": None,
    "lease_proc_start": None,
    "lease_expires": None,
    "lease_expires_boot": None,
}


IMPORTED_UNFINISHED = "imported from an archive taken while it ran"
"""The reason of a run imported ``cancelled`` because the archive held it unfinished."""


_VALUES_PER_INSERT = 800
"""Values bound per ``INSERT`` of several rows: one statement (one round trip to a server) per
few dozen rows. Few enough that the statement stays under 4 kB, which psycopg parses once and
caches (measured: a statement of 4,000 values cost 14 ms to parse, each time)."""


def _insert(conn: LogConnection, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (all with the same columns) in one statement, in their order (new ids
    are given in that order)."""
    names = ", ".join(f'"{k}"' for k in rows[0])
    marks = "(" + ", ".join("?" for _ in rows[0]) + ")"
    conn.execute(
        f'INSERT INTO "{table}" ({names}) VALUES {", ".join(marks for _ in rows)}',
        tuple(v for row in rows for v in row.values()),
    )


def insert_run(conn: LogConnection, run: ArchivedRun, targets: dict[str, _Target]) -> None:
    """Insert every row of ``run`` (inside the caller's transaction).

    A run the archive holds unfinished (queued, running or waiting: only an older steplog
    exported one) goes in ``cancelled``, as ``steplog cancel`` ends a run no engine holds, with
    reason ``IMPORTED_UNFINISHED``: no engine will ever claim or resume it, so this copy can
    never redo a step body or send an effect again. (Its original may still be running where it
    came from, in the same workdir, under the same idempotency keys.)"""
    for table, _ in RUN_TABLES:
        target = targets[table]
        pending: list[dict[str, Any]] = []
        for row in run.rows.get(table, []):
            values = {k: v for k, v in row.items() if k != target.new_ids}
            if table == "run" and values.get("lease_pid") is not None:
                # No engine of this log holds an imported run (an unfinished one's lease came with
                # it).
                values.update({k: v for k, v in _NO_LEASE.items() if k in values})
            unknown = set(values) - target.columns
            if unknown:
                raise ArchiveError(
                    f"run {run.run_id!r} has {table} column(s) {', '.join(sorted(unknown))} this "
                    "steplog does not know; upgrade steplog to import it"
                )
            if pending and (
                pending[0].keys() != values.keys()
                or (len(pending) + 1) * len(values) > _VALUES_PER_INSERT
            ):
                _insert(conn, table, pending)
                pending = []
            pending.append(values)
        if pending:
            _insert(conn, table, pending)
    status = run.rows["run"][0].get("status") if run.rows.get("run") else None
    if status not in TERMINAL:
        from steplog.log.claim import finish_cancelled

        row = {"id": run.run_id, "incarnation": run.rows["run"][0].get("incarnation") or 0}
        conn.execute(
            "UPDATE run SET cancel_requested = ? WHERE id = ?", (IMPORTED_UNFINISHED, run.run_id)
        )
        finish_cancelled(conn, row, IMPORTED_UNFINISHED, time.time())  # type: ignore[arg-type]
        run.unfinished = str(status)


IMPORT_BATCH_ROWS = 20_000
"""Rows inserted per transaction (whole runs only), so a live engine on the log never waits long."""

IMPORT_BATCH_RUNS = 200
"""At most this many runs per transaction: each is locked (``db.run_locked``'s lock), and
PostgreSQL keeps such locks in a shared table of a few thousand for all sessions."""


def import_runs(source: str | Path, db: LogLocation) -> list[ArchivedRun]:
    """Load every run of an export file into the log at ``db`` (a file or a PostgreSQL URL);
    returns them (rows dropped).

    All or nothing up front: the whole file is read and checked, and every run id looked up,
    before the first insert; an id the log already has is refused (``RunExists``), nothing
    written. Then each run goes in whole, inside one transaction (several runs per transaction)
    that holds the lock of each run it adds (``db.run_locked``'s), in one order: an engine
    creating one of those ids meanwhile waits, then finds it there; engines of other runs go on."""
    from steplog.errors import RunExists
    from steplog.log.db import open_log, run_write

    if str(source) == "-":  # read twice below: keep stdin in a private temp file
        import shutil
        import tempfile

        with tempfile.NamedTemporaryFile(prefix="steplog-import-", delete=False) as tmp:
            shutil.copyfileobj(sys.stdin.buffer, tmp)
        try:
            return import_runs(tmp.name, db)
        finally:
            os.unlink(tmp.name)
    seen: dict[str, dict[str, int]] = {}
    for run in read_runs(source):  # pass 1: the whole file is well formed
        if run.run_id in seen:
            raise ArchiveError(f"{source} holds run {run.run_id!r} twice; import each run once")
        seen[run.run_id] = run.counts()
    conn = open_log(db)
    try:
        existing = [
            r for r in seen if conn.execute("SELECT 1 FROM run WHERE id = ?", (r,)).fetchone()
        ]
        if existing:
            more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
            raise RunExists(
                f"run {existing[0]!r}{more} is already in {db}; import never overwrites a run: "
                "prune it first, or import into another --db"
            )
        targets = _targets(conn)
        loaded: list[ArchivedRun] = []
        pending: list[ArchivedRun] = []

        def flush() -> None:
            try:
                with run_write(conn):
                    for run_id in sorted(r.run_id for r in pending):
                        backend_of(conn).lock_run(conn, run_id)
                    for r in pending:
                        insert_run(conn, r, targets)
            except sqlite3.IntegrityError as exc:
                raise ArchiveError(
                    f"a run of {source} clashes with rows already in {db} ({exc}); runs before it "
                    f"were imported: {', '.join(r.run_id for r in loaded) or 'none'}"
                ) from None
            loaded.extend(ArchivedRun(r.run_id, r.schema, unfinished=r.unfinished) for r in pending)
            pending.clear()

        rows = 0
        for run in read_runs(source):  # pass 2: insert
            pending.append(run)
            rows += sum(run.counts().values())
            if rows >= IMPORT_BATCH_ROWS or len(pending) >= IMPORT_BATCH_RUNS:
                flush()
                rows = 0
        if pending:
            flush()
        return loaded
    finally:
        conn.close()
