"""Which SQLite files this process holds open, so that nothing pulls the locks from under them.

POSIX advisory locks belong to the *process*: closing any file descriptor on a file drops every
lock the process holds on it, including those of SQLite connections opened elsewhere in the
process. A WAL reader relies on its shared lock on the database file: without it, an engine that
closes its own connection believes it is the last one, checkpoints and deletes the ``-wal`` and
``-shm`` files under the reader, which from then on sees no new commit and, when a new WAL is
made, reads "database disk image is malformed". The monitor (a tailer thread, verdict and detail
jobs) opens the same log many times, and ``steplog.log.db.inspect`` used to read the header with a
plain ``open()`` each time: the runs list stopped following the log after the first run ended.

So every connection ``steplog.db`` makes is counted here by the file's identity (device, inode),
and ``inspect`` reads header bytes only from a file this process does not hold; a held file is
inspected through SQLite. ``guarded`` serialises inspecting and connecting, so a connection being
made in one thread is never caught between the two by another.

The lock is taken inside an ``interrupts.critical`` section on the main thread: a stop request
raised at the wrong bytecode (between ``__enter__`` and the ``with`` block, or as the block exits
and before ``__exit__`` releases) would leave the lock held by the main thread for good, and
every other thread that opens a log (the monitor's tailer) would then wait forever. The stop is
raised as the section ends instead, with the lock released.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from steplog.log import interrupts

_lock = threading.RLock()
_held: dict[tuple[int, int], int] = {}


class _Guarded:
    """``with guarded:``: the lock, held in a section no stop request cuts (see the module doc)."""

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            interrupts.critical().__enter__()
        _lock.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _lock.release()
        if threading.current_thread() is threading.main_thread():
            interrupts.critical().__exit__(exc_type, exc, tb)  # raises a stop deferred inside


guarded = _Guarded()


def lock_is_free() -> bool:
    """Can another thread take the lock? (For tests: a hold leaked by one thread hangs the rest.)"""
    taken: list[bool] = []

    def probe() -> None:
        if _lock.acquire(timeout=1.0):
            _lock.release()
            taken.append(True)

    thread = threading.Thread(target=probe, name="steplog-lock-probe")
    thread.start()
    thread.join()
    return bool(taken)


def identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def held(path: Path) -> bool:
    """Does a connection of this process have ``path`` open?"""
    key = identity(path)
    with guarded:
        return key is not None and _held.get(key, 0) > 0


class CountedConnection(sqlite3.Connection):
    """A ``sqlite3.Connection`` that is counted in ``_held`` until it is closed."""

    _steplog_file: tuple[int, int] | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            key, self._steplog_file = self._steplog_file, None
            if key is not None:
                with guarded:
                    left = _held.get(key, 0) - 1
                    if left > 0:
                        _held[key] = left
                    else:
                        _held.pop(key, None)


def connect(path: Path, target: str, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(target, **kwargs)``, counted as holding ``path`` until closed."""
    conn: CountedConnection | None = None
    try:
        with guarded:
            conn = sqlite3.connect(target, factory=CountedConnection, **kwargs)
            key = identity(path)
            if key is not None:
                conn._steplog_file = key
                _held[key] = _held.get(key, 0) + 1
    except BaseException:
        if conn is not None:
            conn.close()  # a stop deferred inside the section: not a connection left counted
        raise
    return conn
