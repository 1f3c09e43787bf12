"""A fake Anthropic Messages API for tests: real HTTP on 127.0.0.1, SSE streaming, scripted faults.

    with FakeAnthropic() as fake:
        fake.script("529", "ok")               # the next two calls; then the default ("ok")
        model = AnthropicModel("claude-haiku-4-5", base_url=fake.base_url, api_key="sk-ant-test")
        ...
        assert fake.calls_by_key() == {"run:1": 2}

``POST /v1/messages`` answers JSON, or server-sent events when the body says ``"stream": true``
(``message_start``, ``content_block_start``, ``content_block_delta`` per piece of text,
``content_block_stop``, ``message_delta`` with the output tokens, ``message_stop``), as the real API
does. Behaviours (one per call, taken in order from the script queue):

``ok``          200, a reply whose text is a deterministic function of the request, with usage
``ok_cached``   like ``ok``, with ``CACHE_READ`` tokens read from and ``CACHE_WRITE`` written to the
                prompt cache (``CACHE_WRITE_1H`` of them to the 1-hour cache)
``slow``        like ``ok``, streamed: the first piece at once, the rest after ``SLOW_S`` seconds
``cut``         streamed: ``message_start`` and one piece of text, then the connection is closed
``sse_error``   streamed: ``message_start``, then an ``error`` event (``overloaded_error``), as the
                API reports overload in the middle of a stream
``429``         rate limited, ``retry-after: 1``
``529``         overloaded (Anthropic's own status), no ``retry-after``
``500``         internal server error
``401``         bad key; the error message echoes the whole key the client sent (worst case)
``400`` ``404`` the matching Anthropic-style error body
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

BEHAVIOURS = frozenset(
    {"ok", "ok_cached", "slow", "cut", "sse_error", "429", "529", "500", "401", "400", "404"}
)
CACHE_READ = 11
CACHE_WRITE = 5
CACHE_WRITE_1H = 2
"""Of the ``CACHE_WRITE`` tokens, how many went to the 1-hour cache (billed at 2x input)."""
SLOW_S = 30.0
"""How long a ``slow`` stream stops after its first piece (a kill lands inside the call)."""


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    path: str
    idempotency_key: str | None
    api_key: str | None
    body: Mapping[str, Any] | None
    behaviour: str


def reply_text(body: Mapping[str, Any] | None) -> str:
    """The ``ok`` reply's text: names the model and echoes the last message's start."""
    messages = (body or {}).get("messages") or [{}]
    last = str(messages[-1].get("content", ""))
    return f"fake claude {(body or {}).get('model', '?')} to: {last[:60]}"


def pieces(text: str) -> list[str]:
    """The text deltas a stream sends: words with their following space."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def usage_for(body: Mapping[str, Any] | None, text: str, cached: bool) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` counts only the prompt tokens *not* read from or
    written to the cache."""
    prompt = 10 + len(str((body or {}).get("system", ""))) // 4
    prompt += sum(len(str(m.get("content", ""))) // 4 for m in (body or {}).get("messages") or [])
    return {
        "input_tokens": prompt,
        "output_tokens": 1 + len(text) // 4,
        "cache_read_input_tokens": CACHE_READ if cached else 0,
        "cache_creation_input_tokens": CACHE_WRITE if cached else 0,
        "cache_creation": {
            "ephemeral_5m_input_tokens": CACHE_WRITE - CACHE_WRITE_1H if cached else 0,
            "ephemeral_1h_input_tokens": CACHE_WRITE_1H if cached else 0,
        },
    }


class FakeAnthropic:
    """A fake ``/v1/messages`` on 127.0.0.1 with a free port, in a background thread."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The base URL as the SDK takes it (``ANTHROPIC_BASE_URL``): no ``/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self.calls)

    def calls_by_key(self) -> Counter[str | None]:
        """How many requests arrived with each ``Idempotency-Key`` (None: without one)."""
        with self._lock:
            return Counter(call.idempotency_key for call in self.calls)

    def script(self, *behaviours: str) -> None:
        """Queue behaviours for the next calls; once used up, calls get ``ok``."""
        unknown = set(behaviours) - BEHAVIOURS
        if unknown:
            raise ValueError(f"unknown behaviours {sorted(unknown)}; known: {sorted(BEHAVIOURS)}")
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> FakeAnthropic:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-anthropic", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # releases slow streams
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _take(self, call: Call) -> Call:
        with self._lock:
            behaviour = self._queue.pop(0) if self._queue else "ok"
            call = Call(call.path, call.idempotency_key, call.api_key, call.body, behaviour)
            self.calls.append(call)
        return call

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # see openai_server: 40 ms a call otherwise

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                call = Call(
                    self.path,
                    self.headers.get("Idempotency-Key"),
                    self.headers.get("x-api-key")
                    or (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    or None,
                    body,
                    "",
                )
                if self.path.split("?")[0].rstrip("/") != "/v1/messages":
                    self._json(*_error(404, "not_found_error", f"no route {self.path}"))
                    return
                call = fake._take(call)
                try:
                    self._respond(call)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    self.close_connection = True

            def _respond(self, call: Call) -> None:
                b = call.behaviour
                if b in _ERRORS:
                    status, kind, message, headers = _ERRORS[b]
                    if b == "401":
                        message = f"invalid x-api-key: {call.api_key or '(none)'}"
                    self._json(status, _error_body(kind, message), headers)
                    return
                text = reply_text(call.body)
                usage = usage_for(call.body, text, cached=b == "ok_cached")
                model = str((call.body or {}).get("model", "fake"))
                if (call.body or {}).get("stream") or b in ("slow", "cut", "sse_error"):
                    self._stream(b, model, text, usage)
                    return
                message = _message(model, text, usage)
                self._json(200, message, {})

            def _json(self, status: int, payload: object, headers: Mapping[str, str]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_fake")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _event(self, name: str, data: Mapping[str, Any]) -> None:
                chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()

            def _stream(self, b: str, model: str, text: str, usage: Mapping[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                start = _message(model, "", {**usage, "output_tokens": 1})
                start["content"], start["stop_reason"] = [], None
                self._event("message_start", {"type": "message_start", "message": start})
                if b == "sse_error":
                    error = _error_body("overloaded_error", "Overloaded")
                    self._event("error", error)
                    self._end()
                    return
                block = {"type": "text", "text": ""}
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                )
                for i, piece in enumerate(pieces(text)):
                    if i == 1 and b == "cut":
                        self.close_connection = True
                        return  # no terminating chunk: the client sees the body end early
                    if i == 1 and b == "slow" and fake._closing.wait(SLOW_S):
                        return
                    delta = {"type": "text_delta", "text": piece}
                    self._event(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": delta},
                    )
                self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
                self._event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": usage["output_tokens"]},
                    },
                )
                self._event("message_stop", {"type": "message_stop"})
                self._end()

            def _end(self) -> None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler


_ERRORS: dict[str, tuple[int, str, str, dict[str, str]]] = {
    "429": (
        429,
        "rate_limit_error",
        "Number of requests has exceeded your rate limit",
        {"retry-after": "1"},
    ),
    "529": (529, "overloaded_error", "Overloaded", {}),
    "500": (500, "api_error", "Internal server error", {}),
    "401": (401, "authentication_error", "invalid x-api-key", {}),
    "400": (400, "invalid_request_error", "max_tokens: Field required", {}),
    "404": (404, "not_found_error", "model: claude-nope", {}),
}


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}


def _error(status: int, kind: str, message: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, _error_body(kind, message), {}


def _message(model: str, text: str, usage: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": dict(usage),
    }
