"""Where a log lives: a SQLite file (``Path``) or a PostgreSQL database (``PgUrl``).

``--db`` and ``$STEPLOG_DB`` take either; ``parse`` tells them apart by the URL scheme. A ``PgUrl``
answers the few questions the engine asks a log's path (``parent`` for default workdirs and the
demo outbox's file, ``exists``), so the runtime needs no ``if postgres:`` branch.

Secrets: ``str(url)`` is the whole URL (what a child process is handed), but formatting it
(``f"{url}"``, ``repr``) drops the password, so no message, no log row and no JSON output ever
carries it. Prefer ``PGPASSWORD`` or ``~/.pgpass`` to a password in the URL: libpq reads them,
and an URL on a command line is visible to other users of the machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union
from urllib.parse import unquote, urlsplit, urlunsplit

from .errors import UsageError

SCHEMES = ("postgresql://", "postgres://")


class PgUrl(str):
    """A ``postgresql://USER@HOST:PORT/DBNAME`` URL of a steplog log (a ``str``: the full URL)."""

    __slots__ = ()

    @property
    def redacted(self) -> str:
        """The URL without its password (the form every message and record uses)."""
        return redact_url(str.__str__(self))

    def __format__(self, spec: str) -> str:
        return format(self.redacted, spec)

    def __repr__(self) -> str:
        return f"PgUrl({self.redacted!r})"

    @property
    def dbname(self) -> str:
        return unquote(urlsplit(self).path.lstrip("/")) or (urlsplit(self).username or "postgres")

    @property
    def parent(self) -> Path:
        """A folder on this machine for what sits "beside" a file log: default workdirs
        (``runs/RUN_ID``) and the demo outbox's file. One per server and database."""
        import platformdirs

        parts = urlsplit(self)
        name = f"pg-{parts.hostname or 'local'}-{parts.port or 5432}-{self.dbname}"
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return Path(platformdirs.user_data_dir("steplog", appauthor=False)) / safe

    def exists(self) -> bool:
        """Is there a log here: does the database hold any table (an empty one is a log not
        made yet, as a missing file is)? Connects; an unreachable server raises ``LogError``."""
        from .pg import connect, tables

        conn = connect(self)
        try:
            return bool(tables(conn))
        finally:
            conn.close()


LogLocation = Union[Path, PgUrl]
"""A SQLite file or a PostgreSQL database: what ``--db`` names."""


def redact_url(url: str) -> str:
    """``url`` with any password replaced by nothing (``user@host``), for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def is_url(value: str) -> bool:
    return value.startswith(SCHEMES)


def parse(value: str | os.PathLike[str]) -> LogLocation:
    """A ``--db`` value as a location: a PostgreSQL URL, else a file path (``~`` expanded).

    Other URL schemes are refused rather than taken for a file named ``sqlite:/x``."""
    if isinstance(value, PgUrl):
        return value
    text = os.fspath(value)
    if is_url(text):
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            raise UsageError(f"--db {redact_url(text)!r}: the port is not a number") from None
        if not parts.path.strip("/"):
            raise UsageError(f"--db {redact_url(text)!r} names no database; use postgresql://USER@HOST:PORT/DBNAME")
        return PgUrl(text)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise UsageError(f"--db {redact_url(text)!r}: {scheme}:// logs are not supported; give a file path "
                         "(SQLite) or a postgresql://USER@HOST:PORT/DBNAME URL")
    return Path(text).expanduser()


def resolve(db: str | os.PathLike[str] | None) -> LogLocation:
    """``db`` as a location, else ``$STEPLOG_DB``, else ``steplog.db`` in the user data directory."""
    if db is not None and os.fspath(db) != "":
        return parse(db)
    env = os.environ.get("STEPLOG_DB")
    if env:
        return parse(env)
    import platformdirs  # imported here: only the default path needs it

    return Path(platformdirs.user_data_dir("steplog", appauthor=False)) / "steplog.db"


def is_postgres(location: object) -> bool:
    return isinstance(location, PgUrl)
