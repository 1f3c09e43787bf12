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
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from steplog.errors import UsageError

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
        from steplog.log.pg import connect
        from steplog.log.pgschema import tables

        conn = connect(self)
        try:
            return bool(tables(conn))
        finally:
            conn.close()


LogLocation = Path | PgUrl
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
        _check_url(text)
        return PgUrl(text)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise UsageError(
            f"--db {redact_url(text)!r}: {scheme}:// logs are not supported; give a file path "
            "(SQLite) or a postgresql://USER@HOST:PORT/DBNAME URL"
        )
    return Path(text).expanduser()


_FORM = "use postgresql://USER@HOST:PORT/DBNAME"
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _check_url(text: str) -> None:
    """Refuse a PostgreSQL URL that no connection could be made from, before anything reads it
    (``UsageError``, its password left out): libpq, or ``urlsplit`` itself, would fail on it
    later with a traceback or a message about something else."""

    def refuse(why: str) -> UsageError:
        exc = UsageError(f"--db {_shown(text)!r}: {why}; {_FORM}")
        # What --db's parser says after the option's name.
        exc.detail = f"{why}; {_FORM}"  # type: ignore[attr-defined]
        return exc

    try:
        parts = urlsplit(text)
        netloc = parts.netloc  # raises on an unclosed "[" (an IPv6 address)
    except ValueError as exc:
        raise refuse(f"not a URL ({exc})") from None
    if any(c in text for c in "\x00\r\n\t "):
        raise refuse("it holds a space or control character (percent-encode it: %20)")
    if _PERCENT.search(text):
        raise refuse("a '%' that does not start a %XX escape (write a literal % as %25)")
    for piece in (netloc, parts.path, parts.query):
        try:
            decoded = unquote(piece, errors="strict")
        except UnicodeDecodeError:
            raise refuse("a %XX escape that is not UTF-8 text") from None
        if "\x00" in decoded:
            raise refuse("it holds %00, a NUL character")
    port = netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    if port and not (port.isdigit() and 0 < int(port) <= 65535):
        # Not echoed unless a number: in "user:secret/db" (no "@") the password reads as the port.
        raise refuse(
            f"the port is out of range (1 to 65535): {port}"
            if port.isdigit()
            else "the port is not a number"
        )
    if not unquote(parts.path).strip("/"):
        raise refuse("it names no database")


def _shown(text: str) -> str:
    """``text`` as a message may show it: without its password, even when it does not parse."""
    try:
        return redact_url(text)
    except ValueError:
        scheme, _, rest = text.partition("://")
        return f"{scheme}://" + (f"...@{rest.rpartition('@')[2]}" if "@" in rest else rest)


def resolve(db: str | os.PathLike[str] | None) -> LogLocation:
    """``db`` as a location, else ``$STEPLOG_DB``, else ``steplog.db`` in the user data
    directory."""
    if db is not None and os.fspath(db) != "":
        return parse(db)
    env = os.environ.get("STEPLOG_DB")
    if env:
        return parse(env)
    import platformdirs  # imported here: only the default path needs it

    return Path(platformdirs.user_data_dir("steplog", appauthor=False)) / "steplog.db"


def as_location(value: str | os.PathLike[str]) -> LogLocation:
    """``value`` as a location, taken as it is: a ``PgUrl`` stays one, anything else is a
    ``Path`` (``parse`` reads text; this keeps what was parsed already)."""
    return value if isinstance(value, PgUrl) else Path(value)


def private_dir(path: Path) -> Path:
    """Make ``path`` and any missing parents with mode 0700 (``mkdir -p`` gives parents 0755)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
    return path


def without_secrets(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str] | None]:
    """``argv`` and ``env`` with a PostgreSQL URL's password moved from the one to the other.

    A command line is readable by every user of the machine (``ps``, ``/proc/PID/cmdline``); an
    environment only by its own user. So ``postgresql://me:pw@host/db`` becomes
    ``postgresql://me@host/db`` on the command line and ``PGPASSWORD=pw``, which libpq reads when
    the URL has none. Left as it is when two URLs carry different passwords (one variable cannot
    hold both)."""
    out, password = [], None
    for arg in argv:
        if is_url(arg) and (secret := urlsplit(arg).password) is not None:
            if password is not None and unquote(secret) != password:
                return list(argv), None if env is None else dict(env)
            password, arg = unquote(secret), redact_url(arg)
        out.append(arg)
    if password is None:
        return out, None if env is None else dict(env)
    return out, {**(os.environ if env is None else env), "PGPASSWORD": password}
