"""What a failure of the database under a log means for a command: one line and an exit code.

Every command reads or writes the log; when the database itself fails (not a ``SteplogError``,
which says what it is), the command line asks ``explain`` for the one line a person is shown and
the documented exit code, whichever database the log is on.
"""

from __future__ import annotations

import sqlite3

from steplog.errors import EXIT_LEASE_HELD, EXIT_USAGE, EXIT_WRITE_FAILED
from steplog.log.backend import backend_of
from steplog.log.connection import LogFailure, LogOperationFailed
from steplog.log.integrity import damaged
from steplog.log.location import LogLocation
from steplog.log.sqlite import is_damage, is_read_only, read_only_log


def explain(exc: LogFailure, path: LogLocation) -> tuple[str, int] | None:
    """(message, exit code) for ``exc`` met on the log at ``path``, or ``None``: not a failure
    of the log's own (the caller lets it through)."""
    text = str(exc)
    if isinstance(exc, LogOperationFailed):
        if is_read_only(exc):  # made read-only after the up-front check
            return str(read_only_log(path, text)), EXIT_USAGE
        if "database is locked" in text:
            return (
                f"{path} stayed locked by another process for 10 s (a stopped or very busy "
                "engine?); nothing was written: try again, or look for a stopped steplog process",
                EXIT_LEASE_HELD,
            )
        if "disk is full" in text or "disk I/O" in text:
            return (
                f"the log could not be written ({exc}); free disk space and run the same command "
                "again: the run resumes from its last checkpoint",
                EXIT_WRITE_FAILED,
            )
    server = backend_of(exc).server_failure(exc, path)  # a lost connection, a server restarting
    if server is not None:
        return server, EXIT_WRITE_FAILED
    damage = isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, LogOperationFailed)
    if damage and is_damage(exc):  # a read that met damage outside the pages checked up front
        return str(damaged(path, text)), EXIT_USAGE
    return None
