"""The room a log takes, and giving back what ``steplog prune`` freed: what a SQLite file and a
PostgreSQL database (``pgspace``) each do their own way. ``prune`` asks the log's backend for its
``Space`` (``Backend.space``) and never looks at which database it is.

``--reclaim`` (``RECLAIM``) means, on a SQLite file:

- ``vacuum``: ``VACUUM`` rewrites the log with only its kept pages (and switches an older log to
  incremental auto-vacuum). It holds the write lock throughout, but it is fast: it copies kept
  data only (measured: 62 MB kept of 662 MB in 1.1 s);
- ``incremental``: ``PRAGMA incremental_vacuum`` in short paced transactions, for logs made with
  ``auto_vacuum = INCREMENTAL`` (every log this steplog creates). Nothing waits long, but each
  kept page near the end of the file is moved with a search of the free list, so it is slow
  when much is freed (measured: 548 MB given back in 11 minutes beside a busy engine);
- ``none``: the freed pages stay inside the file and new rows reuse them (the file stops growing);
- ``auto`` (the default): ``vacuum`` when the kept data is at most ``VACUUM_MAX_BYTES`` (a rewrite
  of a couple of seconds, which an engine waits out well within its busy timeout), else
  ``incremental`` where the log supports it, else ``none``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from steplog.errors import UsageError
from steplog.log.connection import LogConnection, immediate

RECLAIM = ("auto", "vacuum", "incremental", "none")
"""How prune gives the freed space back (the module docstring; ``pgspace`` for PostgreSQL)."""

VACUUM_MAX_BYTES = 128 * 1024 * 1024
"""``auto`` rewrites a file log when it keeps at most this much data (about two seconds); a
rewrite of a bigger log is refused while an engine works on it (``prune``)."""

VACUUM_PAGES = 128
"""Pages given back per ``incremental_vacuum`` transaction. Each page still in use near the end of
the file is moved down into a free one, and SQLite searches its free list for each move, so with
a large free list a move costs milliseconds: small transactions keep an engine's wait short."""


class Space(Protocol):
    """How one kind of log measures its room and gives freed room back."""

    words: Mapping[str, str]
    """What the summary adds after "reclaimed N MB" for each way (``"vacuum"``, ...)."""
    writers_take_turns: bool
    """Every write transaction of the log waits for one lock (SQLite's file lock): a loop of
    prune's transactions must leave it free between them (``Pacer``)."""

    def size(self, conn: LogConnection, location: str | os.PathLike[str]) -> int:
        """Bytes the log takes on disk now."""
        ...

    def mode(self, conn: LogConnection) -> str:
        """How the log gives space back by itself (``auto_vacuum`` in ``prune --json``)."""
        ...

    def value_bytes(self, column: str) -> str:
        """SQL for the bytes a value of ``column`` (quoted) takes; 0 for NULL."""
        ...

    def refuse(self, conn: LogConnection, how: str) -> None:
        """``UsageError`` for a reclaim this log cannot do (before anything is deleted)."""
        ...

    def reclaim(self, conn: LogConnection, how: str) -> tuple[str, int]:
        """Give freed room back as ``how`` (one of ``RECLAIM``) says: (the way it was done,
        ``"none"`` included; pages freed by the prune, where the log counts them)."""
        ...

    def settle(self, conn: LogConnection) -> None:
        """After the reclaim: let the size on disk shrink now, if it can (a file's WAL)."""
        ...

    def left_in_place(self, freed_pages: int) -> str | None:
        """The summary's line when the freed room stays where it is (``--reclaim none``)."""
        ...


class Pacer:
    """Leaves the write lock free after each transaction for as long as the transaction held it.

    SQLite's lock is not fair: a writer waiting on ``busy_timeout`` sleeps and retries (every
    100 ms once it has waited a while), and a loop that takes the lock again at once wins nearly
    every time, so an engine on the same log would starve (measured: steps waiting seconds).
    Half the time free makes prune take about twice as long and keeps an engine's steps going.
    ``Pacer(False)`` does not wait: the log's writers do not take turns."""

    def __init__(self, pace: bool = True) -> None:
        self._pace = pace
        self._t = 0.0

    def __enter__(self) -> None:
        self._t = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        if self._pace:
            time.sleep(min(0.25, time.monotonic() - self._t))


def file_bytes(path: Path) -> int:
    """A log file's size on disk: the file and its -wal."""
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def _pragma(conn: LogConnection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


class FileSpace:
    """A SQLite file's room: pages, given back by ``VACUUM`` or ``incremental_vacuum``."""

    words: Mapping[str, str] = {
        "vacuum": ", rewritten by VACUUM",
        "incremental": ", by incremental vacuum",
    }
    writers_take_turns = True

    def size(self, conn: LogConnection, location: str | os.PathLike[str]) -> int:
        return file_bytes(Path(location))

    def mode(self, conn: LogConnection) -> str:
        mode = _pragma(conn, "auto_vacuum")
        return {0: "none", 1: "full", 2: "incremental"}.get(mode, str(mode))

    def value_bytes(self, column: str) -> str:
        return f"coalesce(length(CAST({column} AS BLOB)), 0)"

    def refuse(self, conn: LogConnection, how: str) -> None:
        if how == "incremental" and _pragma(conn, "auto_vacuum") != 2:
            raise UsageError(
                "--reclaim incremental: this log was made before incremental vacuum; use "
                "--reclaim vacuum once (it switches the log over), or auto"
            )

    def reclaim(self, conn: LogConnection, how: str) -> tuple[str, int]:
        mode = _pragma(conn, "auto_vacuum")
        free = _pragma(conn, "freelist_count")
        kept = (_pragma(conn, "page_count") - free) * _pragma(conn, "page_size")
        if how == "auto":
            how = (
                "vacuum"
                if free and kept <= VACUUM_MAX_BYTES
                else "incremental"
                if mode == 2
                else "none"
            )
        if how == "vacuum":
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # an older log switches on the way
            conn.execute("VACUUM")
        elif how == "incremental" and mode == 2:
            pacer = Pacer()
            while _pragma(conn, "freelist_count") > 0:
                with pacer, immediate(conn):
                    conn.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
        else:
            how = "none"
        return how, free

    def settle(self, conn: LogConnection, *, patience: float = 5.0) -> None:
        """Copy the WAL into the log and cut it to zero, which is when the file on disk shrinks.
        It needs a moment with no reader inside the WAL; with engines at work that may take a
        few tries (each waits out a write, then lets the writers go on). If there is none, the
        WAL is reused from its start by the next writes and cut at a later quiet checkpoint."""
        deadline = time.monotonic() + patience
        while (
            int(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)

    def left_in_place(self, freed_pages: int) -> str | None:
        if not freed_pages:
            return None
        return (
            f"{freed_pages:,} freed pages stay in the file for new rows; "
            "`steplog prune --reclaim vacuum` gives them back (when no engine is working)"
        )


FILE_SPACE = FileSpace()
