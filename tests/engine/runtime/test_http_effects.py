"""``run.http_post`` goes through one kept-alive HTTP client per run, closed when the run ends;
the model adapter likewise keeps one client for the run and is closed at its end.

A loopback HTTP/1.1 server on 127.0.0.1 counts the TCP connections it accepts and sees closed;
the client's transport (the seam, ``HttpClient(transport=...)``) records requests and its close.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import steplog
import steplog.runtime.engine
from helpers.openai_server import FakeOpenAI
from steplog.errors import TransientError, UsageError
from steplog.llm.openai_compat import OpenAICompatModel
from steplog.log.interrupts import StopRequested
from steplog.runtime.effects import EffectRejected, HttpClient

ENGINE = Path(steplog.__file__).parents[1]


class CountingServer:
    """POST anything: 201 ``{"id": n, "key": KEY}``, kept alive. Counts connections and requests."""

    def __init__(self) -> None:
        self.accepted = 0
        self.closed = 0
        self.keys: list[str | None] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.accepted += 1

            def finish(self) -> None:  # the client closed the connection (or the server shut down)
                super().finish()
                with server._lock:
                    server.closed += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server._lock:
                    server.keys.append(self.headers.get("Idempotency-Key"))
                    n = len(server.keys)
                data = json.dumps({"id": n, "key": self.headers.get("Idempotency-Key")}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_closed(self, n: int, timeout: float = 5.0) -> int:
        """How many connections the clients closed, once ``n`` are (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        while self.closed < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.closed

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def server() -> Iterator[CountingServer]:
    s = CountingServer()
    yield s
    s.close()


class RecordingTransport(httpx.BaseTransport):
    """The real transport, with every request and the close recorded."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport(retries=0)
        self.requests: list[httpx.Request] = []
        self.closed = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.closed += 1
        self.inner.close()


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[tuple[HttpClient, RecordingTransport]]:
    """Every ``HttpClient`` the engine makes for a run, each with a recording transport."""
    made: list[tuple[HttpClient, RecordingTransport]] = []

    def make() -> HttpClient:
        transport = RecordingTransport()
        made.append((HttpClient(transport=transport), transport))
        return made[-1][0]

    monkeypatch.setattr(steplog.runtime.engine, "HttpClient", make)
    return made


POSTS = 5


@steplog.agent
def poster(run: steplog.Run, url: str = "", end: str = "success") -> int:
    for i in range(POSTS):
        run.http_post(f"{url}/messages", {"i": i})
    if end == "failure":
        raise ValueError("the agent broke after posting")
    if end == "stop":
        raise StopRequested(signal.SIGTERM)  # what the signal handler raises at a safe point
    return POSTS


@pytest.mark.parametrize("end", ["success", "failure", "stop"])
def test_one_connection_carries_every_post_of_a_run_and_is_closed_when_the_run_ends(
    db: Path, server: CountingServer, clients: list[tuple[HttpClient, RecordingTransport]], end: str
) -> None:
    if end == "success":
        assert poster.run("r", db=db, url=server.url, end=end) == POSTS
    elif end == "failure":
        with pytest.raises(steplog.RunFailed, match="the agent broke after posting"):
            poster.run("r", db=db, url=server.url, end=end)
    else:
        with pytest.raises(StopRequested):
            poster.run("r", db=db, url=server.url, end=end)
    assert len(clients) == 1
    client, transport = clients[0]
    assert len(transport.requests) == POSTS
    assert server.keys == [
        f"r:{seq}" for seq in range(1, POSTS + 1)
    ]  # each exactly once, with its key
    assert server.accepted == 1  # one TCP connection for all of them
    assert (
        client.closed and transport.closed == 1
    )  # closed by the engine, not left to the collector
    assert server.wait_closed(1) == 1


@steplog.agent
def asker(run: steplog.Run) -> list[str]:
    return [
        run.chat([{"role": "user", "content": f"q{i}"}], name=f"ask {i}", max_tokens=8).text
        for i in range(3)
    ]


def test_the_model_adapter_keeps_one_client_for_the_run_and_closes_it_at_the_end(
    db: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[OpenAICompatModel] = []
    closed: list[OpenAICompatModel] = []
    real_init, real_close = OpenAICompatModel.__init__, OpenAICompatModel.close

    def init(self: OpenAICompatModel, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)

    def close(self: OpenAICompatModel) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(OpenAICompatModel, "__init__", init)
    monkeypatch.setattr(OpenAICompatModel, "close", close)
    assert len(asker.run("m", db=db, model="fake-model", base_url=fake_openai.base_url)) == 3
    assert fake_openai.call_count == 3
    assert len(made) == 1 and closed == made
    assert made[0]._client.is_closed


def test_a_run_that_never_posts_never_builds_a_client_nor_imports_httpx(tmp_path: Path) -> None:
    script = (
        "import sys, steplog\n"
        "@steplog.agent\n"
        "def quiet(run):\n"
        "    return run.step('one', int, 1)\n"
        f"quiet.run('q', db={str(tmp_path / 'log.db')!r})\n"
        "print('httpx' in sys.modules)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ENGINE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


# --- HttpClient on its own, through a mock transport ---------------------------------------------


def mock(handler: Any) -> tuple[HttpClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        response: httpx.Response = handler(request)
        return response

    return HttpClient(transport=httpx.MockTransport(record)), seen


def test_the_default_timeout_applies_unless_a_call_gives_its_own() -> None:
    client, seen = mock(lambda r: httpx.Response(201, json={"id": 1}))
    assert client.post("http://far.test/m", {"a": 1}, "k1") == {"status": 201, "body": {"id": 1}}
    client.post("http://far.test/m", {"a": 2}, "k2", timeout=0.25)
    assert seen[0].extensions["timeout"] == {
        "connect": 30.0,
        "read": 30.0,
        "write": 30.0,
        "pool": 30.0,
    }
    assert seen[1].extensions["timeout"] == {
        "connect": 0.25,
        "read": 0.25,
        "write": 0.25,
        "pool": 0.25,
    }
    client.close()


def test_the_step_key_is_sent_and_wins_over_a_callers_header() -> None:
    client, seen = mock(lambda r: httpx.Response(200, json={}))
    client.post(
        "http://far.test/m", {"a": 1}, "run:3", headers={"idempotency-key": "mine", "X-Trace": "t"}
    )
    assert seen[0].headers.get_list("Idempotency-Key") == ["run:3"]
    assert seen[0].headers["X-Trace"] == "t"
    assert json.loads(seen[0].content) == {"a": 1}


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 503])
def test_answers_worth_retrying_are_transient(status: int) -> None:
    client, _ = mock(lambda r: httpx.Response(status))
    with pytest.raises(TransientError, match=f"answered {status}; will retry with the same key"):
        client.post("http://far.test/m", {}, "k")


def test_a_refusal_is_final_and_a_transport_error_transient() -> None:
    client, _ = mock(lambda r: httpx.Response(422, text="different body"))
    with pytest.raises(EffectRejected, match="answered 422: different body"):
        client.post("http://far.test/m", {}, "k")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client, _ = mock(unreachable)
    with pytest.raises(TransientError, match="ConnectError"):
        client.post("http://far.test/m", {}, "k")


def test_the_real_transport_never_retries_by_itself() -> None:
    client = HttpClient()
    pool = client._get()._transport._pool  # type: ignore[attr-defined]  # httpx/httpcore internals
    assert pool._retries == 0  # a re-send is the engine's decision, recorded, with the same key
    client.close()


def test_a_closed_client_refuses_to_post_and_closing_twice_is_harmless() -> None:
    client, seen = mock(lambda r: httpx.Response(201, json={}))
    client.close()
    client.close()
    with pytest.raises(UsageError, match="closed"):
        client.post("http://far.test/m", {}, "k")
    assert seen == []
