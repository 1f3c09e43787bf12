"""The room a PostgreSQL log takes, and giving back what ``steplog prune`` freed (``space.Space``).

A deleted row's room stays in its table until ``VACUUM`` marks it reusable (autovacuum does so
by itself, later). ``--reclaim`` means here:

- ``incremental`` (and ``auto``): ``VACUUM`` of the log's run tables now. It takes no lock that
  an engine's or a reader's statements wait for, so engines go on stepping: the room is reused by
  new rows, and empty pages at the end of a table go back to the file system;
- ``vacuum``: ``VACUUM FULL``, a rewrite of each run table with only its kept rows: the tables
  shrink on disk, but each is locked against every reader and writer while it is rewritten
  (refused, as on a file, while an engine works on a log of more than ``VACUUM_MAX_BYTES``);
- ``none``: nothing now; autovacuum (where the server runs it) marks the room reusable later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from steplog.log.connection import LogConnection
from steplog.log.schema import RUN_TABLES

_TABLES = ", ".join(f'"{t}"' for t, _ in RUN_TABLES) + ', "pruned"'
"""What prune deletes from, and writes its records to."""

_SIZE = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
    "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
)
"""The log's tables with their indexes and out-of-line (TOAST) values."""


class PgSpace:
    """A PostgreSQL log's room: its tables, given back by ``VACUUM`` (module docstring)."""

    words: Mapping[str, str] = {
        "vacuum": ", tables rewritten by VACUUM FULL",
        "incremental": ", by VACUUM (new rows reuse the room)",
    }
    writers_take_turns = False

    def size(self, conn: LogConnection, location: str | os.PathLike[str]) -> int:
        return int(conn.execute(_SIZE).fetchone()[0])

    def mode(self, conn: LogConnection) -> str:
        on = conn.execute("SELECT current_setting('autovacuum')").fetchone()[0] == "on"
        return "autovacuum" if on else "none"

    def value_bytes(self, column: str) -> str:
        return f"coalesce(pg_column_size({column}), 0)"

    def refuse(self, conn: LogConnection, how: str) -> None:
        """Nothing: every way is open to every PostgreSQL log."""

    def reclaim(self, conn: LogConnection, how: str) -> tuple[str, int]:
        if how in ("auto", "incremental"):
            conn.execute(f"VACUUM {_TABLES}")
            return "incremental", 0
        if how == "vacuum":
            conn.execute(f"VACUUM FULL {_TABLES}")
            return "vacuum", 0
        return "none", 0

    def settle(self, conn: LogConnection) -> None:
        """Nothing: the server's WAL is its own."""

    def left_in_place(self, freed_pages: int) -> str | None:
        return (
            "the deleted rows' room stays in the tables until a VACUUM (autovacuum, where it is "
            "on) marks it reusable; `steplog prune --reclaim incremental` runs VACUUM now"
        )


PG_SPACE = PgSpace()
