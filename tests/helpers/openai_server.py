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
``refusal``     200, the model declines: no content, a ``refusal`` (streamed: in the deltas)

A request with ``"stream": true`` gets the same answer as server-sent events (chunked): one
``data: {chunk}`` per word of the content, a last chunk with the finish reason, a usage chunk when
``stream_options.include_usage`` (not for ``no_usage``), then ``data: [DONE]``. Modifiers, joined
to a behaviour with ``+`` (``"ok+words:200+slow:5"``), each with a whole number:

``words:N``        N more words in the content (a long answer: N more chunks when streamed)
``slow:MS``        MS milliseconds before each streamed chunk
``cut:K``          streamed: the connection is dropped after K content chunks
``bad_chunk:K``    streamed: after K content chunks, a chunk that is not JSON (then nothing more)
``error_event:K``  streamed: after K content chunks, an error event (then nothing more)

``reply_content(body, words)`` and ``usage_for(body, content, cached)`` give what ``ok`` sends, so
tests can compute the expected reply; ``pieces(content)`` the streamed chunks' texts.
"""

from __future__ import annotations

import json
import re
import threading
import time
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
        "refusal",
    }
)
MODIFIERS = frozenset({"words", "slow", "cut", "bad_chunk", "error_event"})
CACHED_TOKENS = 7
REFUSAL = "I can't help with that request."
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


def reply_content(body: Mapping[str, Any] | None, words: int = 0) -> str:
    """The ``ok`` reply's content: names the model and echoes the last message's start (and
    ``words`` more words, ``ok+words:N``)."""
    messages = (body or {}).get("messages") or [{}]
    last = str(messages[-1].get("content", ""))
    more = "".join(f" w{i}" for i in range(words))
    return f"fake reply from {(body or {}).get('model', '?')} to: {last[:60]}{more}"


_PIECE = re.compile(r"\s*\S+|\s+")


def pieces(content: str) -> list[str]:
    """The texts of the content chunks a streamed ``ok`` sends (one per word, its space first)."""
    return _PIECE.findall(content)


def parse_behaviour(behaviour: str) -> tuple[str, dict[str, int]]:
    """``"ok+words:20+cut:3"`` -> ``("ok", {"words": 20, "cut": 3})``; ValueError if unknown."""
    base, *mods = behaviour.split("+")
    if base not in BEHAVIOURS:
        raise ValueError(f"unknown fake behaviour {base!r}; known: {sorted(BEHAVIOURS)}")
    found: dict[str, int] = {}
    for mod in mods:
        name, _, value = mod.partition(":")
        if name not in MODIFIERS or not value.isdigit():
            raise ValueError(
                f"unknown fake modifier {mod!r}; known: NAME:N for NAME in {sorted(MODIFIERS)}"
            )
        found[name] = int(value)
    return base, found


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

    def __init__(self, default: str = "ok") -> None:
        parse_behaviour(default)
        self.default = default
        """What a call gets once the script is used up."""
        self.calls: list[Call] = []
        """Every request received, in order (``len(fake.calls)`` is the total)."""
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
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
        """Queue behaviours for the next calls; once used up, calls get ``default``."""
        for behaviour in behaviours:
            parse_behaviour(behaviour)
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
            return self._queue.pop(0) if self._queue else self.default

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
                behaviour, mods = parse_behaviour(call.behaviour)
                if behaviour == "hang":
                    fake._closing.wait(HANG_LIMIT_S)
                    self.close_connection = True
                    return
                if behaviour == "malformed":
                    self._send(200, b'{"id": "chatcmpl-fake", "choices": [', {})
                    return
                status, payload, headers = _payload(call, behaviour, mods)
                if status == 200 and (call.body or {}).get("stream"):
                    self._stream(call, payload, mods)
                    return
                self._send(status, json.dumps(payload).encode(), headers)

            def _stream(self, call: Call, completion: dict[str, Any], mods: dict[str, int]) -> None:
                """The completion as server-sent events, one HTTP chunk per event."""
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in _events(call, completion, mods):
                        if event is None:  # cut: drop the connection, no terminating chunk
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        if mods.get("slow"):
                            time.sleep(mods["slow"] / 1000)
                        data = f"data: {event}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError, OSError):  # the client gave up
                    self.close_connection = True

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


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (after a cut or a broken stream) is no error of the fake's."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _error(
    status: int, message: str, kind: str, code: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, {}


def _events(call: Call, completion: dict[str, Any], mods: dict[str, int]) -> list[str | None]:
    """The events of a streamed answer (JSON texts; ``None``: drop the connection there)."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    stream_options = (call.body or {}).get("stream_options") or {}
    usage = completion.get("usage")
    with_usage = bool(stream_options.get("include_usage"))

    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if with_usage:
            body["usage"] = None
        return json.dumps(body)

    message = completion["choices"][0]["message"]
    if message.get("refusal"):
        return [
            chunk({"role": "assistant", "refusal": ""}, None),
            *(chunk({"refusal": text}, None) for text in pieces(message["refusal"])),
            chunk({}, "stop"),
            "[DONE]",
        ]
    texts = pieces(message["content"] or "")
    events: list[str | None] = [chunk({"role": "assistant", "content": ""}, None)]
    for i, text in enumerate(texts):
        if i == mods.get("cut"):
            return [*events, None]
        if i == mods.get("bad_chunk"):
            return [*events, '{"id": "chatcmpl-fake", "choices": [{"delta": {"cont']
        if i == mods.get("error_event"):
            error = {"message": "The server had an error while streaming.", "type": "server_error"}
            return [*events, json.dumps({"error": error})]
        events.append(chunk({"content": text}, None))
    events.append(chunk({}, completion["choices"][0]["finish_reason"]))
    if with_usage and usage is not None:
        events.append(json.dumps({**head, "choices": [], "usage": usage}))
    events.append("[DONE]")
    return events


def _payload(
    call: Call, behaviour: str, mods: dict[str, int]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = call.body
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
    content = reply_content(body, mods.get("words", 0))
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
    elif behaviour == "refusal":
        completion["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "refusal": REFUSAL,
        }
    return 200, completion, {}


def serve(default: str = "ok") -> None:
    """``python -m helpers.openai_server [DEFAULT]``: a fake in a process of its own (the
    benchmarks', so its CPU is not the client's); prints its base URL, serves until stdin closes."""
    import sys

    with FakeOpenAI(default=default) as fake:
        print(fake.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    import sys

    serve(*sys.argv[1:2])
