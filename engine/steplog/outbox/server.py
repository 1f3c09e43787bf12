"""The outbox's HTTP face: stdlib ``ThreadingHTTPServer``, Stripe-like idempotency on ``/messages``.

``POST /messages`` (``Idempotency-Key`` + JSON object) → 201 ``{"id": n}`` first, 200 replay of
that answer with ``Idempotent-Replayed: true`` for the same key and body, 422 for the same key with
another body, 409 while the first request with the key is still being processed, 400 without a key
or a JSON object or with a body shorter than its Content-Length (408 when the rest never comes:
each read waits ``OutboxHandler.timeout`` seconds at most). ``GET /messages`` lists deliveries
and attempts, ``GET /health`` says it is up, anything else is a JSON 404. ``serve`` runs it until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from steplog.errors import UsageError
from steplog.outbox.ledger import JSONObject, body_hash, canonical_json
from steplog.outbox.store import OutboxStore

log = logging.getLogger("steplog.outbox")

MAX_BODY_BYTES = 1 << 20
MAX_KEY_CHARS = 255  # Stripe's limit; a longer "key" is a bug in the sender
MAX_DEPTH = 100
"""Nesting levels a body may have. Deeper ones are refused (400): the parser would hit Python's
recursion limit on some, and a stored one would make every ``GET /messages`` fail."""


class OutboxServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the store and the artificial processing delay."""

    # Not daemon threads: server_close() joins requests still running, so a SIGTERM lets a
    # delivery finish and answer instead of cutting it off (a cut one is still safe: see store).
    daemon_threads = False
    # The listen backlog (the stdlib's is 5): connections waiting for accept(). 200 clients
    # connecting at once overflowed 5 and a third to a half of them were reset or timed out;
    # the kernel caps this at net.core.somaxconn (4096 on current Linux, 128 on older ones).
    request_queue_size = 1024

    store: OutboxStore  # attached by ``serve`` after the bind, before any request is handled
    delay: float = 0.0

    def __init__(self, host: str, port: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), OutboxHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves socket.getfqdn(host), a reverse DNS lookup that can
        # stall start-up for seconds on a machine without DNS; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The stdlib prints the traceback to stderr; route it to the logger like everything else.
        log.exception("request from %s failed", client_address)


class OutboxHandler(BaseHTTPRequestHandler):
    """One request. HTTP/1.0: the connection closes after the answer, so shutdown never waits on
    idle keep-alives."""

    server: OutboxServer
    server_version = "steplog-outbox/1"
    timeout = 5.0  # seconds a client may take to send its request before the socket is dropped

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _guarded(self, method: Callable[[], None]) -> None:
        """Answer a JSON 500 when the outbox itself fails, instead of dropping the connection."""
        try:
            method()
        except ConnectionError:
            pass  # the client hung up; whatever was delivered stays delivered, once
        except Exception:
            log.exception("%s %s failed", self.command, self.path)
            self._error(
                500, "internal_error", "the outbox failed; retry with the same idempotency key"
            )

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if path == "/messages":
            self._reply(200, self.server.store.ledger().to_json())
        elif path == "/health":
            self._reply(200, {"ok": True})
        else:
            self._not_found()

    def _post(self) -> None:
        if urlsplit(self.path).path != "/messages":
            self._not_found()
            return
        store = self.server.store
        key = self.headers.get("Idempotency-Key")
        try:
            raw = self._read_body()
        except _IncompleteBody as cut:
            store.record(key or None, None, cut.status, "rejected")
            self.close_connection = True
            self._error(cut.status, cut.code, cut.message)
            return
        if raw is None:
            store.record(key, None, 413, "rejected")
            self._error(413, "body_too_large", f"the body exceeds {MAX_BODY_BYTES} bytes")
            return
        if not key or len(key) > MAX_KEY_CHARS:
            store.record(key or None, None, 400, "rejected")
            self._error(
                400,
                "missing_idempotency_key",
                f"send an Idempotency-Key header of 1 to {MAX_KEY_CHARS} characters",
            )
            return
        body = _parse_object(raw)
        if isinstance(body, str):
            store.record(key, None, 400, "rejected")
            self._error(400, "invalid_body", body)
            return
        canonical = canonical_json(body)
        digest = body_hash(body)
        verdict = store.claim(key, digest)
        if verdict is None:
            self._deliver(key, canonical, digest)
        elif verdict.outcome == "replayed":
            self._reply(200, {"id": verdict.delivery_id}, {"Idempotent-Replayed": "true"})
        elif verdict.outcome == "conflict":
            self._error(
                422,
                "idempotency_key_reused",
                f"idempotency key {key!r} was first used with a different body",
            )
        else:
            self._error(
                409,
                "idempotency_key_in_use",
                f"a request with idempotency key {key!r} is still in flight; retry later",
            )

    def _deliver(self, key: str, canonical: str, digest: str) -> None:
        store = self.server.store
        try:
            if self.server.delay > 0:
                time.sleep(
                    self.server.delay
                )  # simulated processing: the window in which 409 is real
            delivery_id = store.complete(key, canonical, digest)
        except Exception:
            log.exception("delivery for idempotency key %r failed", key)
            store.abandon(key, digest)
            self._error(
                500,
                "internal_error",
                "the outbox failed; nothing was delivered, retry with the same key",
            )
            return
        self._reply(201, {"id": delivery_id})

    def do_PUT(self) -> None:
        self._not_found()  # "anything else" is a 404, wrong method included

    do_PATCH = do_DELETE = do_PUT

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (an unknown method, a malformed request line, a URI or header
        too long) in the same JSON shape as every other answer, not its HTML page. An unknown
        method is "anything else": a 404, as for a wrong path."""
        self.close_connection = True
        if code == 501:
            self._not_found()
            return
        codes = {
            400: "bad_request",
            408: "request_timeout",
            414: "uri_too_long",
            431: "headers_too_large",
            505: "http_version_not_supported",
        }
        self._error(
            code,
            codes.get(code, "bad_request"),
            message or explain or "the request could not be read",
        )

    def _read_body(self) -> bytes | None:
        """The request body, ``b""`` without a Content-Length, ``None`` when too large.

        ``_IncompleteBody`` when fewer bytes came than the Content-Length announced: the client
        closed its side early (400), or sent nothing more for ``timeout`` seconds (408). The
        bytes that did come may happen to parse as a JSON object, but they are not what the
        client sent: nothing is delivered."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return b""
        if length > MAX_BODY_BYTES:
            return None
        length = max(length, 0)
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raise _IncompleteBody(
                408,
                "request_timeout",
                f"the body did not arrive within {self.timeout:g} s "
                f"(Content-Length {length}); nothing was delivered: send the whole body",
            ) from None
        if len(raw) < length:
            raise _IncompleteBody(
                400,
                "incomplete_body",
                f"the body ended after {len(raw)} of the {length} bytes "
                "its Content-Length announced; nothing was delivered: send the whole body",
            )
        return raw

    def _not_found(self) -> None:
        self._error(
            404,
            "not_found",
            f"no such resource: {self.command} {self.path}; try POST /messages or GET /messages",
        )

    def _error(self, status: int, code: str, message: str) -> None:
        self._reply(status, {"error": {"code": code, "message": message}})

    def _reply(
        self, status: int, payload: JSONObject, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer is the headers alone
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        log.debug("%s " + format, self.address_string(), *args)


class _IncompleteBody(Exception):
    """A request body cut short (``OutboxHandler._read_body``): the answer to give."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _parse_object(raw: bytes) -> JSONObject | str:
    """The body as a JSON object, or why it is not one (the 400's message)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    too_deep = f"the body is nested more than {MAX_DEPTH} levels deep; send a flatter JSON object"
    try:
        value = json.loads(raw, parse_constant=refuse)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return "the body must be a JSON object"
    except RecursionError:
        return too_deep
    if not isinstance(value, dict):
        return "the body must be a JSON object"
    if _depth(value) > MAX_DEPTH:
        return too_deep
    # What json.loads lets through but no ledger can hold: 1e999 (infinite), "\ud800" (no UTF-8).
    try:
        canonical_json(value).encode("utf-8")
    except ValueError:
        return "the body must be a JSON object of finite numbers and valid Unicode text"
    return value


def _depth(value: Any) -> int:
    """Nesting levels of a parsed JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def bind(host: str, port: int) -> OutboxServer:
    """Listen on ``host:port`` (0: the OS picks), or raise ``UsageError`` with what to do
    instead."""
    try:
        return OutboxServer(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is in use; pick another --port or use --port 0"
            ) from exc
        if exc.errno == errno.EACCES:
            raise UsageError(
                f"port {port} on {host} needs privileges; pick a port above 1023 or use --port 0"
            ) from exc
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"cannot listen on {host} port {port}: {reason}; use --host 127.0.0.1"
        ) from exc


def write_port_file(path: Path, port: int) -> None:
    """Write ``port`` to ``path`` atomically: a reader sees no file or the whole number, never
    half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{port}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_db_path() -> Path:
    """``outbox.db`` in the user data directory (created 0700), never the current directory."""
    import platformdirs  # only the default needs it

    directory = Path(platformdirs.user_data_dir("steplog", appauthor=False))
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory / "outbox.db"


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    db: Path | None = None,
    port_file: Path | None = None,
    delay: float = 0.0,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Run the outbox until SIGTERM or SIGINT, then finish the requests in progress and return.

    The port is bound before the data file is touched, so a busy port writes nothing. Once
    listening, the bound port goes to ``port_file`` (atomically) and then to ``ready``.
    ``db=None`` means ``default_db_path()``. Called from a thread other than the main one,
    signals cannot be caught there and ``serve`` runs until the process ends.
    """
    server = bind(host, port)
    store: OutboxStore | None = None
    try:
        store = server.store = OutboxStore(Path(db) if db is not None else default_db_path())
        server.delay = delay
        released = store.release_orphans()
        if released:
            log.warning(
                "released %d idempotency key(s) left in flight by a killed outbox", released
            )

        def announce() -> None:  # once SIGTERM is handled: a stop right after it is a clean one
            if port_file is not None:
                write_port_file(Path(port_file), server.port)
            if ready is not None:
                ready(server.port)

        _serve_until_signalled(server, announce)
    finally:
        server.server_close()  # joins the requests still in progress, before their store closes
        if store is not None:
            store.close()


def _serve_until_signalled(server: OutboxServer, announce: Callable[[], None]) -> None:
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)

    def loop() -> None:
        try:
            server.serve_forever(poll_interval=0.1)
        finally:
            stop.set()  # a crashed loop must not leave serve() waiting forever

    thread = threading.Thread(target=loop, name="steplog-outbox-http", daemon=True)
    thread.start()
    try:
        announce()
        # A timed wait, so the main thread regularly returns to the interpreter to run handlers.
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        thread.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
