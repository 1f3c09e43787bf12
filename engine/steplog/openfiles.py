"""Which SQLite files this process holds open, so that nothing pulls the locks from under them.

POSIX advisory locks belong to the *process*: closing any file descriptor on a file drops every
lock the process holds on it, including those of SQLite connections opened elsewhere in the
process. A WAL reader relies on its shared lock on the database file: without it, an engine that
closes its own connection believes it is the last one, checkpoints and deletes the ``-wal`` and
``-shm`` files under the reader, which from then on sees no new commit and, when a new WAL is
made, reads "database disk image is malformed". The monitor (a tailer thread, verdict and detail
jobs) opens the same log many times, and ``steplog.db.inspect`` used to read the header with a
plain ``open()`` each time: the runs list stopped following the log after the first run ended.

So every connection ``steplog.db`` makes is counted here by the file's identity (device, inode),
and ``inspect`` reads header bytes only from a file this process does not hold; a held file is
inspected through SQLite. ``lock`` serialises inspecting and connecting, so a connection being
made in one thread is never caught between the two by another.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

lock = threading.RLock()
_held: dict[tuple[int, int], int] = {}


def identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def held(path: Path) -> bool:
    """Does a connection of this process have ``path`` open?"""
    key = identity(path)
    with lock:
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
                with lock:
                    left = _held.get(key, 0) - 1
                    if left > 0:
                        _held[key] = left
                    else:
                        _held.pop(key, None)


def connect(path: Path, target: str, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(target, **kwargs)``, counted as holding ``path`` until closed."""
    with lock:
        conn = sqlite3.connect(target, factory=CountedConnection, **kwargs)
        key = identity(path)
        if key is not None:
            conn._steplog_file = key
            _held[key] = _held.get(key, 0) + 1
    return conn
