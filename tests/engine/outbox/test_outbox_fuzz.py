"""The outbox under generated requests: whatever arrives on the socket, it answers and stays whole.

Hypothesis writes raw HTTP requests (any method, path, header, Content-Length and body bytes,
JSON that is almost valid) to a real outbox process over loopback, and a stateful model replays
keys and bodies against it. What must hold for every request:

- a complete HTTP answer with a JSON body, never a 5xx and never a dropped connection;
- the process lives on (``/health`` answers after every example);
- idempotency: the first good POST of a key is 201, the same body again 200 with the same id,
  another body 422; every key is delivered at most once, with the body first sent;
- ``GET /messages`` stays valid JSON whatever bodies were sent.

``STEPLOG_FUZZ_EXAMPLES`` sets the examples per test (default 150, a few seconds each run).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from steplog.outbox import OutboxProcess, start_outbox

EXAMPLES = int(os.environ.get("STEPLOG_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def outbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutboxProcess]:
    process = start_outbox(tmp_path_factory.mktemp("fuzz") / "outbox.db")
    yield process
    process.stop()


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status_line = lines[0]
        self.status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
        self.headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
        }

    def json(self) -> Any:
        return json.loads(self.body)


def exchange(outbox: OutboxProcess, request: bytes) -> Answer:
    """Send ``request`` whole, close our side, and read the answer to the end."""
    host, port = outbox.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)  # a short body is short, not a five-second wait for more
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return Answer(b"".join(chunks))


def http_request(method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers
    )
    return head.encode("latin-1") + b"\r\n" + body


def post(outbox: OutboxProcess, key: str | None, body: bytes) -> Answer:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if key is not None:
        headers.append(("Idempotency-Key", key))
    return exchange(outbox, http_request("POST", "/messages", headers, body))


def assert_answered_in_json(answer: Answer) -> None:
    assert answer.status != 0, f"no HTTP answer: {answer.status_line!r}"
    assert answer.status < 500, (answer.status_line, answer.body[:300])
    assert answer.headers.get("content-type") == "application/json", (
        answer.status_line,
        answer.headers,
    )
    payload = answer.json()
    assert isinstance(payload, dict)
    if answer.status >= 400:
        assert set(payload["error"]) == {"code", "message"} and payload["error"]["message"]


def assert_alive_and_listing(outbox: OutboxProcess) -> dict[str, Any]:
    health = exchange(outbox, http_request("GET", "/health", [], b""))
    assert (health.status, health.json()) == (200, {"ok": True})
    listing = exchange(outbox, http_request("GET", "/messages", [], b""))
    assert listing.status == 200
    ledger: dict[str, Any] = listing.json()  # valid JSON whatever bodies were stored
    return ledger


# -- what a hostile or broken client sends -----------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
almost_json = st.sampled_from(
    [
        b'{"x": 1e999}',
        b'{"x": -1e999}',
        b'{"x": "\\ud800"}',
        b'{"x": "\\udfff\\ud800"}',
        b'{"x": NaN}',
        b'{"x": Infinity}',
        b'{"x": 1' + b"0" * 5000 + b"}",
        b'{"a": 1, "a": 2}',
        b"\xef\xbb\xbf{}",
        b'{"x": "\x00"}',
        b"[" * 200 + b"]" * 200,
        b'{"x":' * 150 + b"1" + b"}" * 150,
        b"{",
        b"",
        b'{"x": 1}{"y": 2}',
        b'{"\xff": 1}',
        b"null",
        b"1",
        b'"s"',
    ]
)
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4).map(
        lambda v: json.dumps(v, ensure_ascii=False).encode()
    ),
    almost_json,
    st.binary(max_size=64),
)
keys = st.one_of(
    st.none(),
    st.just(""),
    st.just(" "),
    st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF), min_size=1, max_size=40
    ),
    st.just("k" * 256),
    st.just("k" * 255),
)
methods = st.sampled_from(
    ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "BREW", "post"]
)
paths = st.one_of(
    st.sampled_from(
        [
            "/messages",
            "/messages/",
            "/messages?x=1",
            "/health",
            "/",
            "//messages",
            "/messages#f",
            "*",
            "http://127.0.0.1/messages",
            "/" + "a" * 70_000,
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(
        lambda p: "/" + p
    ),
)
lengths = st.one_of(
    st.just("exact"),
    st.just(None),
    st.sampled_from(["-1", "abc", "0", "1e3", "99999999999", " 3", "+5"]),
    st.integers(min_value=0, max_value=200).map(str),
)
extra_headers = st.lists(
    st.tuples(
        st.sampled_from(["X-A", "Idempotency-Key", "Content-Type", "Transfer-Encoding", "Expect"]),
        st.sampled_from(["1", "", "chunked", "100-continue", "text/plain", "é"]),
    ),
    max_size=3,
)


@FUZZ
@given(method=methods, path=paths, key=keys, length=lengths, body=bodies, extra=extra_headers)
def test_any_request_gets_a_json_answer_below_500_and_the_outbox_lives_on(
    outbox: OutboxProcess,
    method: str,
    path: str,
    key: str | None,
    length: str | None,
    body: bytes,
    extra: list[tuple[str, str]],
) -> None:
    headers = list(extra)
    if key is not None:
        headers.append(("Idempotency-Key", key))
    if length is not None:
        headers.append(("Content-Length", str(len(body)) if length == "exact" else length))
    answer = exchange(outbox, http_request(method, path, headers, body))

    if method != "HEAD":  # a HEAD answer has no body by definition
        assert_answered_in_json(answer)
    else:
        assert 0 < answer.status < 500, answer.status_line
    assert_alive_and_listing(outbox)


@FUZZ
@given(body=bodies)
def test_a_posted_body_is_delivered_as_it_was_sent_or_refused_with_400(
    outbox: OutboxProcess, body: bytes
) -> None:
    key = f"fuzz-{uuid.uuid4()}"
    answer = post(outbox, key, body)
    assert_answered_in_json(answer)
    ledger = assert_alive_and_listing(outbox)
    delivered = [d for d in ledger["deliveries"] if d["key"] == key]
    if answer.status == 201:
        assert len(delivered) == 1
        sent = json.loads(body)
        assert isinstance(sent, dict)
        assert delivered[0]["body"] == sent
    else:
        assert answer.status == 400 and delivered == [], (answer.status_line, answer.body)


class IdempotencyModel(RuleBasedStateMachine):
    """Keys and bodies from small pools, posted in any order: the outbox agrees with a dict."""

    outbox: OutboxProcess  # set by the test below before the machine runs

    @initialize()
    def fresh_namespace(self) -> None:
        self.prefix = f"model-{uuid.uuid4()}-"
        self.first: dict[str, tuple[str, int]] = {}  # key -> (canonical body, delivery id)

    @rule(
        key=st.sampled_from("abc"),
        body=st.sampled_from([{"n": 1}, {"n": 2}, {"n": 1, "m": [1, 2]}]),
        spacing=st.booleans(),
    )
    def post_a_message(self, key: str, body: dict[str, Any], spacing: bool) -> None:
        raw = json.dumps(body, indent=2 if spacing else None).encode()
        answer = post(self.outbox, self.prefix + key, raw)
        canonical = json.dumps(body, sort_keys=True)
        if key not in self.first:
            assert answer.status == 201, answer.body
            self.first[key] = (canonical, answer.json()["id"])
        elif self.first[key][0] == canonical:
            assert answer.status == 200 and answer.headers.get("idempotent-replayed") == "true"
            assert answer.json()["id"] == self.first[key][1]
        else:
            assert answer.status == 422, answer.body
            assert answer.json()["error"]["code"] == "idempotency_key_reused"

    @rule(body=bodies)
    def post_without_a_key(self, body: bytes) -> None:
        assert post(self.outbox, None, body).status == 400

    @invariant()
    def each_key_delivered_once_with_its_first_body(self) -> None:
        if not hasattr(self, "prefix"):
            return
        ledger = assert_alive_and_listing(self.outbox)
        mine = [d for d in ledger["deliveries"] if d["key"].startswith(self.prefix)]
        assert sorted(d["key"].removeprefix(self.prefix) for d in mine) == sorted(self.first)
        for d in mine:
            canonical, delivery_id = self.first[d["key"].removeprefix(self.prefix)]
            assert d["id"] == delivery_id
            assert json.dumps(d["body"], sort_keys=True) == canonical


def test_keys_and_bodies_in_any_order_behave_like_a_dict(outbox: OutboxProcess) -> None:
    IdempotencyModel.outbox = outbox
    machine = IdempotencyModel.TestCase
    machine.settings = settings(
        max_examples=max(10, EXAMPLES // 5),
        stateful_step_count=12,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine().runTest()


def test_the_regressions_the_fuzzing_found_stay_fixed(
    outbox: OutboxProcess, tmp_path: Path
) -> None:
    """Each was a 500, a dropped connection or an HTML answer before."""
    for body in (b'{"x": 1e999}', b'{"x": "\\ud800"}'):
        answer = post(outbox, f"regression-{uuid.uuid4()}", body)
        assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_body", (
            answer.body
        )
    for method in ("OPTIONS", "BREW", "post"):
        answer = exchange(outbox, http_request(method, "/messages", [], b""))
        assert_answered_in_json(answer)
    assert_alive_and_listing(outbox)
