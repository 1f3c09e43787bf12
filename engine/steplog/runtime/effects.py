"""The idempotent effects behind ``Run.write_file``, ``Run.http_post`` (``HttpClient``) and
``Run.merge``.

Each is safe to repeat with the same key: a file is replaced atomically under a stable name, an
HTTP request carries an ``Idempotency-Key`` the far side deduplicates on, and a database row is
merged (upserted), never inserted twice.

The idempotency ledger that records each effect is the log's (``steplog.log.ledger``, written by
the journal). ``merge`` is the one place here that speaks SQL: its database is the *user's*, a
SQLite file in the run's workdir, an effect target like a file or an HTTP endpoint, not the log.
So it uses ``sqlite3`` directly, and ``tests/engine/test_log_seam.py`` lists it (and
``target_storage_problem``) as the exception they are.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import PermanentError, TransientError, UsageError
from steplog.log import interrupts
from steplog.log.db import private_dir, rolled_back_on_error

if TYPE_CHECKING:
    import httpx

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EffectRejected(PermanentError):
    """The far side refused the effect for good (a 4xx other than 409/429)."""


def digest(value: bytes | str | Any) -> str:
    """A stable hash of an effect's request, to notice a replay that would send something else."""
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, bytes):
        value = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    import hashlib  # here: loading OpenSSL costs a run that makes no effect ~2 ms at start

    return hashlib.sha256(value).hexdigest()


def confined(workdir: Path, relpath: str) -> Path:
    """``workdir/relpath``: a file strictly inside the workdir.

    Refused: absolute paths, anything that escapes the workdir, and anything that names a
    directory (the workdir itself, ``sub/..``, a trailing ``/`` or ``.``, an existing folder): a
    temp file written "beside" such a target would land in the workdir's parent.
    """
    if not relpath or os.path.isabs(relpath):
        raise UsageError(f"effect path {relpath!r} must be relative to the run's workdir")
    root = workdir.resolve()
    target = (root / relpath).resolve()
    if target != root and root not in target.parents:
        raise UsageError(
            f"effect path {relpath!r} escapes the run's workdir {root}; keep file effects inside it"
        )
    last = relpath.replace(os.sep, "/").rsplit("/", 1)[-1]
    if target == root or last in ("", ".", "..") or target.is_dir():
        raise UsageError(
            f"effect path {relpath!r} names a directory, not a file inside the run's workdir "
            f"{root}; "
            "name a file, such as 'out/result.txt'"
        )
    return target


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(workdir: Path, relpath: str, content: str | bytes, key: str) -> dict[str, Any]:
    """Write atomically: a temp file beside the target, fsync, rename over it, fsync the dir.

    A reader (or a kill) sees either the old file or the new one, never half of one.
    """
    data = content.encode() if isinstance(content, str) else content
    target = confined(workdir, relpath)
    private_dir(target.parent)
    tmp = target.with_name(f".{target.name}.{digest(key)[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return {"path": relpath, "bytes": len(data), "sha256": digest(data)}


DEFAULT_HTTP_TIMEOUT = 30.0
"""Seconds an HTTP effect may take (connect, each read, each write) unless the call says
otherwise."""


class HttpClient:
    """The one HTTP client of a run: built on the first post, kept alive, closed when the run ends.

    Building an ``httpx`` client costs ~40 ms of CPU (an SSL context with the CA bundle, even for
    plain ``http://``), so one per call made every post cost that much; one per run pays it once
    and reuses kept-alive connections. ``httpx`` itself is imported on the first post only: a run
    that never posts never imports it.

    ``transport`` is the seam for tests (any ``httpx.BaseTransport``, e.g. ``httpx.MockTransport``).
    Without one the client gets an ``httpx.HTTPTransport`` with ``retries=0``: nothing below the
    engine ever re-sends a request by itself, after a timeout or on a pooled connection the server
    closed. A failed request raises ``TransientError`` and the engine's retry policy sends it again,
    recorded, with the same ``Idempotency-Key``; a killed engine's sockets die with it.
    """

    def __init__(
        self, *, timeout: float = DEFAULT_HTTP_TIMEOUT, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.timeout = timeout
        self._transport = transport
        self._client: httpx.Client | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def _get(self) -> httpx.Client:
        with self._lock:
            if self._closed:
                raise UsageError(
                    "this run's HTTP client is closed: the run has ended; start or resume the run "
                    "to post"
                )
            if self._client is None:
                import httpx  # ~0.1 s to import: only runs that post pay for it

                # retries=0 (httpx's default, spelled out): see the class docstring.
                transport = self._transport or httpx.HTTPTransport(retries=0)
                self._client = httpx.Client(transport=transport, timeout=self.timeout)
            return self._client

    def post(
        self,
        url: str,
        body: Any,
        key: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST JSON with an ``Idempotency-Key``; transient failures raise ``TransientError``.

        ``timeout`` (seconds) overrides the client's for this call only.
        """
        client = self._get()
        import httpx  # already imported by _get: a dictionary lookup

        sent = {k: v for k, v in (headers or {}).items() if k.lower() != "idempotency-key"}
        sent["Idempotency-Key"] = key  # the step's key always wins over a caller's header
        try:
            response = client.post(
                url,
                json=body,
                headers=sent,
                timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
            )
        except httpx.TransportError as exc:
            raise TransientError(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status in (408, 409, 425, 429) or status >= 500:
            # 409: the first request with this key is still in flight at the far side.
            raise TransientError(f"POST {url} answered {status}; will retry with the same key")
        if status >= 400:
            raise EffectRejected(f"POST {url} answered {status}: {response.text[:200]}")
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = response.text
        return {"status": status, "body": parsed}

    def close(self) -> None:
        """Close the pooled connections. Idempotent; later posts are refused."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()


def check_merge(
    workdir: Path, db: str, table: str, key: dict[str, Any], values: dict[str, Any]
) -> Path:
    """The file a merge writes; ``UsageError`` for a bad path, identifier or an empty key."""
    for ident in (table, *key, *values):
        if not isinstance(ident, str) or not _IDENT.fullmatch(ident):
            raise UsageError(f"merge: {ident!r} is not a plain SQL identifier (letters, digits, _)")
    if not key:
        raise UsageError("merge: key must name at least one column")
    return confined(workdir, db)


def merge(
    workdir: Path, db: str, table: str, key: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any]:
    """Upsert one row: the key columns identify it, the values are set. Never a second row.

    The database is the user's merge target (module docstring), opened here with ``sqlite3``."""
    import sqlite3  # already loaded by the log: no import cost

    path = check_merge(workdir, db, table, key, values)
    private_dir(path.parent)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        conn.execute("PRAGMA synchronous = FULL")
        with interrupts.critical(), rolled_back_on_error(conn):
            conn.execute("BEGIN IMMEDIATE")
            key_cols = ", ".join(f'"{k}"' for k in key)
            cols = {**key, **values}
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{table}" ('
                + ", ".join(f'"{c}"' for c in cols)
                + f", PRIMARY KEY ({key_cols}))"
            )
            existing = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
            for col in cols:
                if col not in existing:
                    conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{col}"')
            names = ", ".join(f'"{c}"' for c in cols)
            marks = ", ".join("?" for _ in cols)
            updates = (
                ", ".join(f'"{c}" = excluded."{c}"' for c in values)
                or f'"{next(iter(key))}" = excluded."{next(iter(key))}"'
            )
            conn.execute(
                f'INSERT INTO "{table}" ({names}) VALUES ({marks}) ON CONFLICT ({key_cols}) DO '
                f"UPDATE SET {updates}",
                [_sql_value(v) for v in cols.values()],
            )
            conn.execute("COMMIT")
    finally:
        conn.close()
    return {"db": db, "table": table, "key": key}


def _sql_value(v: Any) -> Any:
    if v is None or isinstance(v, (int, float, str, bytes)):
        return v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def target_storage_problem(exc: BaseException | None) -> str | None:
    """A full disk, an I/O error or a read-only file behind a merge target's error, in SQLite's
    own words (``run.storage_problem`` asks); ``None`` for anything else."""
    import sqlite3

    if isinstance(exc, sqlite3.OperationalError) and any(
        w in str(exc) for w in ("database or disk is full", "disk I/O error", "readonly database")
    ):
        return f"SQLite: {exc}"
    return None
