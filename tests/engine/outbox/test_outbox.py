"""The outbox service: a real server process, real HTTP on 127.0.0.1, its own SQLite file."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.waiting import wait_until
from steplog.errors import UsageError
from steplog.outbox import OutboxProcess, OutboxStore, fetch_ledger, start_outbox
from steplog.outbox.ledger import Delivery, Ledger
from steplog.outbox.server import write_port_file

StartOutbox = Callable[..., OutboxProcess]


@pytest.fixture
def outbox_db(tmp_path: Path) -> Path:
    return tmp_path / "outbox.db"


@pytest.fixture
def launch(outbox_db: Path) -> Iterator[StartOutbox]:
    """Start outbox processes on this test's data file; every one is stopped at the end."""
    started: list[OutboxProcess] = []

    def _launch(**options: Any) -> OutboxProcess:
        process = start_outbox(outbox_db, **options)
        started.append(process)
        return process

    yield _launch
    for process in started:
        process.stop()


@pytest.fixture
def outbox(launch: StartOutbox) -> OutboxProcess:
    return launch()


@pytest.fixture
def client(outbox: OutboxProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=outbox.url, timeout=10) as c:
        yield c


def post(client: httpx.Client, body: Any, key: str | None = "key-1") -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post("/messages", json=body, headers=headers)


def post_to(url: str, body: Any, key: str = "key-1") -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as c:
        return post(c, body, key)


# -- idempotency ---------------------------------------------------------------------------


def test_first_delivery_is_201_and_the_same_key_replays_200_without_delivering_again(
    client: httpx.Client,
) -> None:
    first = post(client, {"ticket_id": "T-1", "text": "hello"})
    again = post(client, {"ticket_id": "T-1", "text": "hello"})

    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200
    assert again.json() == first.json() == {"id": 1}
    assert again.headers["Idempotent-Replayed"] == "true"
    ledger = client.get("/messages").json()
    assert [d["body"] for d in ledger["deliveries"]] == [{"ticket_id": "T-1", "text": "hello"}]
    assert [(a["status"], a["outcome"]) for a in ledger["attempts"]] == [
        (201, "delivered"),
        (200, "replayed"),
    ]


def test_the_same_body_in_another_key_order_or_spacing_is_a_replay(client: httpx.Client) -> None:
    assert post(client, {"a": 1, "b": [1, 2]}).status_code == 201
    response = client.post(
        "/messages",
        content=b'{ "b" : [1, 2], "a": 1 }',
        headers={"Idempotency-Key": "key-1", "Content-Type": "application/json"},
    )
    assert response.status_code == 200


def test_the_same_key_with_a_different_body_is_422_and_delivers_nothing(
    client: httpx.Client,
) -> None:
    post(client, {"text": "first"})

    response = post(client, {"text": "second"})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert len(client.get("/messages").json()["deliveries"]) == 1


def test_a_request_without_an_idempotency_key_is_400_and_recorded(client: httpx.Client) -> None:
    response = post(client, {"text": "hi"}, key=None)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]["message"]
    ledger = client.get("/messages").json()
    assert ledger["deliveries"] == []
    assert [(a["key"], a["status"], a["outcome"]) for a in ledger["attempts"]] == [
        (None, 400, "rejected")
    ]


@pytest.mark.parametrize(
    "raw", [b"not json", b"[1, 2]", b'"text"', b"", b'{"x": NaN}', b"\xff\xfe{"]
)
def test_a_body_that_is_not_a_json_object_is_400(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/messages", content=raw, headers={"Idempotency-Key": "k"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_body"
    assert client.get("/messages").json()["attempts"][-1]["outcome"] == "rejected"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/nope"), ("POST", "/message"), ("DELETE", "/messages")],
)
def test_anything_else_is_a_json_404(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path)

    assert response.status_code == 404
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_health_says_ok(client: httpx.Client) -> None:
    response = client.get("/health")
    assert (response.status_code, response.json()) == (200, {"ok": True})


# -- concurrency: "in flight" is real ------------------------------------------------------


def test_concurrent_requests_with_one_key_deliver_exactly_once(launch: StartOutbox) -> None:
    outbox = launch(delay=0.3)
    barrier = threading.Barrier(10)
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=outbox.url, timeout=10) as c:
            barrier.wait()
            statuses.append(post(c, {"ticket_id": "T-7"}, key="same").status_code)

    threads = [threading.Thread(target=send) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(statuses) == 10
    assert statuses.count(201) == 1
    assert set(statuses) <= {201, 200, 409}
    ledger = outbox.ledger()
    assert [d.key for d in ledger.deliveries] == ["same"]
    assert sorted(a.status for a in ledger.attempts) == sorted(statuses)
    outcome_of = {201: "delivered", 200: "replayed", 409: "in_flight"}
    assert all(a.outcome == outcome_of[a.status] for a in ledger.attempts)


CLIENTS = 200


def raw_post(port: int, body: bytes, key: str, start: threading.Barrier) -> int | str:
    """One POST on its own socket, sent when every client is ready: the status, or the error."""
    request = (
        f"POST /messages HTTP/1.0\r\nHost: 127.0.0.1\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            start.wait(timeout=60)
            sock.sendall(request)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        return int(answer.split(b" ", 2)[1])
    except (OSError, IndexError, ValueError) as exc:
        return type(exc).__name__


def test_200_simultaneous_identical_posts_are_all_answered_and_delivered_once(
    outbox: OutboxProcess,
) -> None:
    """Every one of 200 clients connecting and posting at the same moment gets an answer (with
    the stdlib's listen backlog of 5, 56-104 of them were reset or never answered), and the
    message is delivered once."""
    start = threading.Barrier(CLIENTS)
    results: list[int | str] = []
    lock = threading.Lock()

    def client() -> None:
        outcome = raw_post(outbox.port, b'{"ticket_id": "T-200"}', "same", start)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    failures = [r for r in results if isinstance(r, str)]
    assert len(results) == CLIENTS and failures == [], (
        f"{len(failures)} of {CLIENTS} failed: {sorted(set(failures))}"
    )
    assert results.count(201) == 1 and set(results) <= {201, 200, 409}
    assert [d.key for d in outbox.ledger().deliveries] == ["same"]


@pytest.mark.parametrize("depth", [10_000, 100_000])
@pytest.mark.parametrize("shape", ["[{}]", '{{"a": {}}}'])
def test_a_body_nested_too_deeply_is_400_not_a_crash(
    client: httpx.Client, depth: int, shape: str
) -> None:
    """A JSON body nested past what the outbox parses is bad input (400), like any body it
    cannot read, and the outbox keeps serving."""
    opening, closing = shape.split("{}")
    raw = (opening.replace("{{", "{") * depth + "1" + closing.replace("}}", "}") * depth).encode()
    response = client.post("/messages", content=raw, headers={"Idempotency-Key": "deep"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_body"
    assert "nested" in response.json()["error"]["message"]
    assert client.get("/messages").json()["attempts"][-1]["outcome"] == "rejected"
    assert post(client, {"ok": True}, key="after").status_code == 201


def test_a_body_nested_deeper_than_the_limit_but_parseable_is_refused_so_the_listing_stays_readable(
    client: httpx.Client,
) -> None:
    """A body the parser could still read but nested past ``MAX_DEPTH`` is refused too: stored, it
    would make ``GET /messages`` fail for everyone."""
    from steplog.outbox.server import MAX_DEPTH

    nested: Any = {"leaf": 1}
    for _ in range(MAX_DEPTH):
        nested = {"n": nested}
    assert post(client, nested, key="deep").status_code == 400
    ok: Any = {"leaf": 1}
    for _ in range(MAX_DEPTH - 1):
        ok = {"n": ok}
    assert post(client, ok, key="ok").status_code == 201
    assert client.get("/messages").status_code == 200


def test_a_second_request_while_the_first_is_in_flight_gets_409(
    launch: StartOutbox, outbox_db: Path
) -> None:
    outbox = launch(delay=1.0)
    first: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: first.append(post_to(outbox.url, {"n": 1})))
    sender.start()
    with OutboxStore(outbox_db, readonly=True) as store:
        wait_until(lambda: store.in_flight() == ["key-1"])

        second = post_to(outbox.url, {"n": 1})

    sender.join()
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "idempotency_key_in_use"
    assert first[0].status_code == 201
    assert [(a.status, a.outcome) for a in outbox.ledger().attempts] == [
        (409, "in_flight"),
        (201, "delivered"),
    ]


# -- durability ----------------------------------------------------------------------------


def test_a_restart_on_the_same_file_keeps_everything_and_still_deduplicates(
    launch: StartOutbox,
) -> None:
    before = launch()
    with httpx.Client(base_url=before.url) as c:
        original = post(c, {"ticket_id": "T-1"}).json()["id"]
    ledger_before = before.ledger()
    assert before.stop() == 0

    after = launch()
    with httpx.Client(base_url=after.url) as c:
        replay = post(c, {"ticket_id": "T-1"})

    assert (replay.status_code, replay.json()) == (200, {"id": original})
    ledger_after = after.ledger()
    assert ledger_after.deliveries == ledger_before.deliveries
    assert ledger_after.attempts[: len(ledger_before.attempts)] == ledger_before.attempts
    assert ledger_after.attempts[-1].outcome == "replayed"


def test_a_key_left_in_flight_by_a_killed_outbox_is_delivered_once_after_restart(
    launch: StartOutbox, outbox_db: Path
) -> None:
    doomed = launch(delay=30)
    threading.Thread(
        target=lambda: _swallow(lambda: post_to(doomed.url, {"n": 1})), daemon=True
    ).start()
    with OutboxStore(outbox_db, readonly=True) as store:
        wait_until(lambda: store.in_flight() == ["key-1"])
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.popen.wait()

    revived = launch()
    with httpx.Client(base_url=revived.url) as c:
        retry = post(c, {"n": 1})

    assert retry.status_code == 201
    assert [d.key for d in revived.ledger().deliveries] == ["key-1"]


def _swallow(call: Callable[[], object]) -> None:
    try:
        call()
    except httpx.HTTPError:
        pass  # the server was killed under this request, as intended


def test_the_data_file_is_private(outbox: OutboxProcess, outbox_db: Path) -> None:
    assert stat.S_IMODE(outbox_db.stat().st_mode) == 0o600


def test_the_ledger_read_from_the_file_equals_the_one_served_over_http(
    outbox: OutboxProcess, client: httpx.Client, outbox_db: Path
) -> None:
    post(client, {"n": 1}, key="a")
    post(client, {"n": 1}, key="a")
    post(client, {"n": 2}, key=None)

    with OutboxStore(outbox_db, readonly=True) as store:
        assert store.ledger() == fetch_ledger(outbox.url)


def test_a_file_that_is_not_an_outbox_is_refused_and_left_untouched(tmp_path: Path) -> None:
    stranger = tmp_path / "notes.txt"
    stranger.write_text("not a database, keep me\n" * 10)

    with pytest.raises(UsageError, match="not a readable SQLite database"):
        start_outbox(stranger)

    assert stranger.read_text() == "not a database, keep me\n" * 10


# -- the process and its port --------------------------------------------------------------


def test_a_busy_port_exits_2_with_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "steplog.outbox",
                "--port",
                str(port),
                "--db",
                str(tmp_path / "outbox.db"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert result.returncode == 2
    assert (
        result.stderr
        == f"steplog: port {port} on 127.0.0.1 is in use; pick another --port or use --port 0\n"
    )
    assert not (tmp_path / "outbox.db").exists()


def test_the_port_file_appears_whole_by_an_atomic_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "port"
    target.write_text("stale")
    renames: list[tuple[Path, str]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        renames.append((Path(src), Path(src).read_text()))
        assert Path(dst) == target and target.read_text() == "stale"  # untouched until the rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_port_file(target, 43210)

    [(source, content)] = renames
    assert source.parent == target.parent
    assert content == "43210\n"
    assert target.read_text() == "43210\n"
    assert os.listdir(tmp_path) == ["port"]


def test_a_started_outbox_is_in_its_own_session_and_stops_cleanly_on_sigterm(
    outbox: OutboxProcess,
) -> None:
    assert os.getsid(outbox.pid) == outbox.pid != os.getsid(0)
    assert outbox.url == f"http://127.0.0.1:{outbox.port}"

    assert outbox.stop() == 0
    assert not outbox.alive()


def test_ctrl_c_stops_it_cleanly_too(outbox: OutboxProcess) -> None:
    os.kill(outbox.pid, signal.SIGINT)

    assert outbox.popen.wait(timeout=10) == 0


def test_without_db_the_data_file_goes_to_a_private_user_data_directory(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-m", "steplog.outbox", "--port-file", str(port_file)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(port_file.exists)
    finally:
        child.terminate()
        _, stderr = child.communicate(timeout=10)

    assert child.returncode == 0, stderr
    data_dir = tmp_path / "data" / "steplog"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "outbox.db").stat().st_mode) == 0o600
    assert not (tmp_path / "outbox.db").exists()


# -- finding duplicates --------------------------------------------------------------------


def test_duplicates_finds_one_body_delivered_under_two_keys(
    client: httpx.Client, outbox: OutboxProcess
) -> None:
    post(client, {"ticket_id": "T-1", "text": "a"}, key="random-1")
    post(client, {"ticket_id": "T-2", "text": "b"}, key="random-2")
    post(client, {"text": "a", "ticket_id": "T-1"}, key="random-3")  # the same message, a new key
    post(client, {"ticket_id": "T-2", "text": "b"}, key="random-2")  # a replay is not a duplicate

    groups = fetch_ledger(outbox.url).duplicates()

    assert [[(d.id, d.key) for d in group] for group in groups] == [
        [(1, "random-1"), (3, "random-3")]
    ]


def test_a_ledger_with_distinct_bodies_has_no_duplicates() -> None:
    ledger = Ledger(deliveries=(Delivery(1, "a", {"n": 1}, 0.0), Delivery(2, "b", {"n": 2}, 0.0)))
    assert ledger.duplicates() == []
