"""A fake OpenAI-compatible server for tests: real HTTP on 127.0.0.1, scriptable failures.

    with FakeOpenAI() as fake:
        fake.script("429", "ok")               # the next two calls; then the default ("ok")
        model = OpenAICompatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test")
        ...
        assert fake.call_count == 2 and fake.calls[0].idempotency_key == "..."

Behaviours (strings, one per call, taken in order from the script queue):

``ok``          200, a reply whose content is a deterministic function of the request, with usage
``ok_cached``   like ``ok`` with ``prompt_tokens_details.cached_tokens`` = ``CACHED_TOKENS``
``no_usage``    like ``ok`` without a ``usage`` object
``hang``        sends nothing until the client gives up (or the fake closes)
``429``         rate limited, ``Retry-After: 1``
``quota``       429 with ``code: insufficient_quota`` (OpenAI's "out of credit")
``500``         internal server error
``401``         bad key; the error message echoes the whole key the client sent (worst case)
``400`` ``404`` the matching OpenAI-style error body
``malformed``   200, ``application/json``, a body that is not JSON
``no_choices``  200, a well-formed completion object without ``choices``
``no_content``  200, one choice whose message has no content

``reply_content(body)`` and ``usage_for(body, content, cached)`` give what ``ok`` sends, so tests
can compute the expected reply.
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
    {
        "ok",
        "ok_cached",
        "no_usage",
        "hang",
        "429",
        "quota",
        "500",
        "401",
        "400",
        "404",
        "malformed",
        "no_choices",
        "no_content",
    }
)
CACHED_TOKENS = 7
HANG_LIMIT_S = 30.0
"""A hanging call gives up after this long even if nobody closes the fake."""


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    path: str
    idempotency_key: str | None
    authorization: str | None
    body: Mapping[str, Any] | None
    behaviour: str


def reply_content(body: Mapping[str, Any] | None) -> str:
    """The ``ok`` reply's content: names the model and echoes the last message's start."""
    messages = (body or {}).get("messages") or [{}]
    last = str(messages[-1].get("content", ""))
    return f"fake reply from {(body or {}).get('model', '?')} to: {last[:60]}"


def usage_for(body: Mapping[str, Any] | None, content: str, cached: int) -> dict[str, Any]:
    prompt = 10 + sum(
        len(str(m.get("content", ""))) // 4 for m in (body or {}).get("messages") or []
    )
    completion = 1 + len(content) // 4
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class FakeOpenAI:
    """A fake ``/v1/chat/completions`` on 127.0.0.1 with a free port, in a background thread."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        """Every request received, in order (``len(fake.calls)`` is the total)."""
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

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
            raise ValueError(
                f"unknown fake behaviours {sorted(unknown)}; known: {sorted(BEHAVIOURS)}"
            )
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> FakeOpenAI:
        # A short poll interval so that close() (shutdown) returns promptly.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _take_behaviour(self) -> str:
        with self._lock:
            return self._queue.pop(0) if self._queue else "ok"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the body waits for the
            # client's delayed ACK of the headers: 40 ms per call on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                behaviour = (
                    fake._take_behaviour()
                    if self.path.rstrip("/") == "/v1/chat/completions"
                    else "404"
                )
                call = Call(
                    self.path,
                    self.headers.get("Idempotency-Key"),
                    self.headers.get("Authorization"),
                    body,
                    behaviour,
                )
                fake._record(call)
                self._respond(call)

            def _respond(self, call: Call) -> None:
                behaviour = call.behaviour
                if behaviour == "hang":
                    fake._closing.wait(HANG_LIMIT_S)
                    self.close_connection = True
                    return
                if behaviour == "malformed":
                    self._send(200, b'{"id": "chatcmpl-fake", "choices": [', {})
                    return
                status, payload, headers = _payload(call)
                self._send(status, json.dumps(payload).encode(), headers)

            def _send(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    self.close_connection = True

        return Handler


def _error(
    status: int, message: str, kind: str, code: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, {}


def _payload(call: Call) -> tuple[int, dict[str, Any], dict[str, str]]:
    behaviour, body = call.behaviour, call.body
    if behaviour == "429":
        status, payload, _ = _error(
            429, "Rate limit reached for requests", "requests", "rate_limit_exceeded"
        )
        return status, payload, {"Retry-After": "1"}
    if behaviour == "quota":
        return _error(
            429, "You exceeded your current quota.", "insufficient_quota", "insufficient_quota"
        )
    if behaviour == "500":
        return _error(500, "The server had an error while processing your request.", "server_error")
    if behaviour == "401":
        # Worst case for secret hygiene: echo the whole key back, as some proxies do.
        auth = (call.authorization or "").removeprefix("Bearer ") or "(none)"
        return _error(
            401, f"Incorrect API key provided: {auth}.", "invalid_request_error", "invalid_api_key"
        )
    if behaviour == "400":
        return _error(400, "Invalid value for 'max_tokens'.", "invalid_request_error")
    if behaviour == "404":
        return _error(
            404,
            "The model does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        )
    content = reply_content(body)
    completion: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": str((body or {}).get("model", "fake")),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage_for(body, content, CACHED_TOKENS if behaviour == "ok_cached" else 0),
    }
    if behaviour == "no_usage":
        del completion["usage"]
    elif behaviour == "no_choices":
        del completion["choices"]
    elif behaviour == "no_content":
        completion["choices"][0]["message"] = {"role": "assistant", "content": None}
    return 200, completion, {}
