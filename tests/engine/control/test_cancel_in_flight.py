"""A cancel or a stop that lands while a POST is in flight never leads to the message sent twice.

The far side is the real outbox with a processing delay: each POST stays in flight for seconds, and
the tests wait until the outbox holds the request as ``pending`` (received, not yet answered) before
they cancel, stop or kill the engine. "Sent twice" is read from the outbox's own ledger: one message
delivered under two keys is a duplicate; the same key sent again is a replay, deduplicated.

The demo agent with two tickets makes these steps: 1 load, 2 triage T-1001, 3 write its reply,
4 send it, 5 record it, 6-9 the same for T-1002, 10 write the summary, 11 send the digest.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from steplog.outbox import OutboxProcess, start_outbox
from steplog.outbox.ledger import Ledger

pytestmark = [pytest.mark.backends("sqlite", "postgres"), pytest.mark.slow]

DELAY = 3.0
"""Seconds the outbox takes over each delivery: the window a cancel or a stop lands in."""

SEND_T1001 = 4


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[OutboxProcess]:
    with start_outbox(tmp_path / "outbox.db", delay=DELAY) as process:
        yield process


def key_state(outbox: OutboxProcess, key: str) -> str | None:
    """``pending`` (received, being processed), ``done`` (delivered) or ``None``, from the file."""
    conn = sqlite3.connect(f"{outbox.db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT state FROM idempotency_key WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:  # not created yet
        return None
    finally:
        conn.close()
    return str(row[0]) if row else None


def start_demo(engine: Engine, outbox: OutboxProcess, run_id: str) -> subprocess.Popen[str]:
    """The demo on two tickets; a 3 s lease, so its heartbeat (which notices a cancel in the middle
    of a step) looks every second: well inside the outbox's delay."""
    return engine.start(
        "run",
        "demo",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        "tickets=2",
        "--outbox",
        outbox.url,
        "--lease-seconds",
        "3",
    )


def in_flight(engine: Engine, outbox: OutboxProcess, run_id: str) -> str:
    """Wait until the POST of T-1001's reply is at the outbox, unanswered; its key."""
    key = f"{run_id}:{SEND_T1001}"
    wait_until(lambda: key_state(outbox, key) == "pending", f"the outbox holds {key} in flight")
    return key


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def sent_once_each(ledger: Ledger) -> Counter[str]:
    """Deliveries per message (a ticket's reply, or the digest); the test wants 1 for each."""
    twice = ledger.duplicates()
    assert twice == [], f"a message was delivered under two keys: {twice}"
    return Counter(str(d.body.get("ticket_id", "digest")) for d in ledger.deliveries)


def effect_row(engine: Engine, key: str) -> tuple[str, str, int]:
    (row,) = engine.query("SELECT run_id, status, attempts FROM effect WHERE key = ?", key)
    return str(row[0]), str(row[1]), int(row[2])


@pytest.mark.parametrize("at_step", [SEND_T1001, 2])
def test_a_cancel_during_a_post_lets_it_finish_and_a_fork_does_not_send_it_again(
    engine: Engine, outbox: OutboxProcess, at_step: int
) -> None:
    db = str(engine.db)
    proc = start_demo(engine, outbox, "c")
    key = in_flight(engine, outbox, "c")
    cancel = engine.run("cancel", "c", "--db", db, "--reason", "stop now")
    assert cancel.returncode == 0 and "run c cancelled (stop now)" in cancel.stdout, cancel.stderr
    code, out, err = finish(proc)
    assert code == 5 and "was cancelled: stop now" in out, err

    # The cancel waited for the POST: the ledger holds the outbox's answer, and the step that sent
    # it is left unfinished (the run stopped there, at the safe point right after the record).
    (delivered,) = outbox.ledger().for_run("c").deliveries
    assert delivered.key == key and delivered.body["ticket_id"] == "T-1001"
    assert effect_row(engine, key) == ("c", "completed", 1)
    step = engine.query("SELECT status FROM step WHERE run_id = 'c' AND seq = ?", SEND_T1001)
    assert step == [("running",)]
    s = engine.status("c")
    assert (s["status"], s["steps_committed"]) == ("cancelled", SEND_T1001 - 1)

    # A cancelled run is not retried (fork it instead), and the refusal sends nothing.
    attempts = len(outbox.ledger().attempts)
    refused = engine.run("retry", "c", "--db", db)
    assert refused.returncode == 2 and "fork it to carry on" in refused.stderr, refused.stderr
    assert len(outbox.ledger().attempts) == attempts

    forked = engine.run("fork", "c", "--at-step", str(at_step), "--run-id", "c2", "--db", db)
    assert forked.returncode == 0, forked.stderr
    ledger = outbox.ledger()
    assert sent_once_each(ledger) == {"T-1001": 1, "T-1002": 1, "digest": 1}
    assert [d.key for d in ledger.deliveries] == [key, "c2:8", "c2:11"]
    # The fork carried the parent's recorded answer on: it did not even ask the outbox again.
    assert [a.key for a in ledger.attempts].count(key) == 1
    own = engine.query(
        "SELECT key FROM effect WHERE run_id = 'c2' AND kind = 'http_post' ORDER BY seq"
    )
    assert own == [("c2:8",), ("c2:11",)]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stop_or_a_kill_during_a_post_then_the_readme_cancel_and_a_fork_send_it_once(
    engine: Engine, outbox: OutboxProcess, how: str
) -> None:
    db = str(engine.db)
    proc = start_demo(engine, outbox, "ask")
    key = in_flight(engine, outbox, "ask")
    if how == "SIGTERM":  # a graceful stop: the engine stops at once, the run stays resumable
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc)
        assert code != 0 and engine.status("ask")["status"] == "running", err
    else:
        kill_group(proc)
    # The engine stopped listening; the outbox still delivers what it received.
    assert effect_row(engine, key) == ("ask", "started", 1)
    wait_until(lambda: key_state(outbox, key) == "done", f"the outbox delivered {key}")

    # As in the README: no engine holds the run, so it ends cancelled at once.
    cancel = engine.run("cancel", "ask", "--db", db, "--reason", "one digest is enough")
    assert cancel.returncode == 0, cancel.stderr
    assert "run ask cancelled (one digest is enough)" in cancel.stdout

    forked = engine.run(
        "fork", "ask", "--at-step", str(SEND_T1001), "--run-id", "ask-2", "--db", db
    )
    assert forked.returncode == 0, forked.stderr
    ledger = outbox.ledger()
    assert sent_once_each(ledger) == {"T-1001": 1, "T-1002": 1, "digest": 1}
    # The fork sent T-1001's reply again under the parent's key: a replay, not a second delivery.
    tries = [(a.key, a.outcome) for a in ledger.attempts if a.key == key]
    assert tries == [(key, "delivered"), (key, "replayed")]
    assert effect_row(engine, key) == ("ask", "completed", 2)


def test_a_graceful_stop_during_a_post_resumes_with_the_same_key(
    engine: Engine, outbox: OutboxProcess
) -> None:
    proc = start_demo(engine, outbox, "g")
    key = in_flight(engine, outbox, "g")
    proc.send_signal(signal.SIGTERM)
    finish(proc)
    wait_until(lambda: key_state(outbox, key) == "done", f"the outbox delivered {key}")
    again = engine.run("run", "demo", "--run-id", "g", "--db", str(engine.db))
    assert again.returncode == 0, again.stderr
    assert sent_once_each(outbox.ledger()) == {"T-1001": 1, "T-1002": 1, "digest": 1}


def test_a_fork_of_a_fork_carries_on_what_the_first_parent_left_unconfirmed(
    engine: Engine, tmp_path: Path
) -> None:
    """The engine dies right after its far side applied step 3's effect, before the ledger heard
    of it; the run is cancelled. A fork at 2 stops at its budget before step 3, and a fork of
    that fork runs step 3: it still carries the first run's effect on, under its key."""
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    args = (
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "base",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "n=2",
    )
    crashed = engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_applied@3"})
    assert crashed.returncode == 86
    assert engine.run("cancel", "base", "--db", db).returncode == 0
    first = engine.run(
        "fork", "base", "--at-step", "2", "--run-id", "f1", "--db", db, "--max-steps", "2"
    )
    assert first.returncode == 3, first.stderr  # gave up before step 3: it never got there
    second = engine.run(
        "fork", "f1", "--at-step", "3", "--run-id", "f2", "--db", db, "--max-steps", "100"
    )
    assert second.returncode == 0, second.stderr

    conn = sqlite3.connect(witness)
    try:
        applied = conn.execute("SELECT key, i FROM applied ORDER BY rowid").fetchall()
        tries = conn.execute("SELECT key FROM attempt ORDER BY n").fetchall()
    finally:
        conn.close()
    assert applied == [("base:3", 0), ("f2:8", 1)], "item 0 applied once, under the first run's key"
    assert tries == [("base:3",), ("base:3",), ("f2:8",)]


def test_a_fork_refuses_to_resend_an_unconfirmed_effect_its_target_cannot_deduplicate(
    engine: Engine, tmp_path: Path
) -> None:
    """The non-idempotent kind: started by the parent, never confirmed, then the parent cancelled.
    A fork that reaches it stops "needs reconciliation" like the parent would, and sends it only
    when a person says so (``retry --force``)."""
    sent = tmp_path / "sent.txt"
    db = str(engine.db)
    args = (
        "run",
        f"{AGENTS}:fire_and_forget",
        "--run-id",
        "nr",
        "--db",
        db,
        "--param",
        f"outbox_file={sent}",
    )
    crashed = engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_started@2"})
    assert crashed.returncode == 86
    assert engine.run("cancel", "nr", "--db", db).returncode == 0

    forked = engine.run("fork", "nr", "--at-step", "2", "--run-id", "nr-2", "--db", db)
    assert forked.returncode == 4, forked.stderr
    assert "needs reconciliation: effect nr:2" in forked.stdout
    assert not sent.exists()
    refused = engine.run("retry", "nr-2", "--db", db)
    assert refused.returncode == 2
    assert "nr:2" in refused.stderr and "check the target by hand" in refused.stderr
    forced = engine.run("retry", "nr-2", "--db", db, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "effect(s) nr:2 will be sent again" in forced.stderr
    assert sent.read_text().splitlines() == ["nr-2:2"]
    assert effect_row(engine, "nr:2") == ("nr", "started", 1), "the parent's record stays"


def test_an_async_agent_cancelled_with_posts_in_flight_records_them_and_a_fork_sends_each_once(
    engine: Engine, outbox: OutboxProcess
) -> None:
    """``demo_async`` sends both replies at once (steps 6 and 7). The cancel waits for the acts
    in flight: the first to end is recorded with its answer; another may still be torn down with
    the event loop, left ``started``. Either way a fork carries both on."""
    db = str(engine.db)
    proc = engine.start(
        "run",
        "demo_async",
        "--run-id",
        "a",
        "--db",
        db,
        "--param",
        "tickets=2",
        "--outbox",
        outbox.url,
        "--lease-seconds",
        "3",
    )
    for key in ("a:6", "a:7"):
        wait_until(lambda key=key: key_state(outbox, key) == "pending", f"the outbox holds {key}")
    cancel = engine.run("cancel", "a", "--db", db, "--reason", "stop now")
    assert cancel.returncode == 0, cancel.stderr
    code, _, err = finish(proc)
    assert code == 5, err
    states = dict(
        engine.query("SELECT key, status FROM effect WHERE run_id = 'a' AND kind = 'http_post'")
    )
    assert "completed" in states.values(), states
    assert engine.query(
        "SELECT count(*) FROM step WHERE run_id = 'a' AND seq IN (6, 7) AND status = 'committed'"
    ) == [(0,)]
    for key in ("a:6", "a:7"):
        wait_until(lambda key=key: key_state(outbox, key) == "done", f"the outbox delivered {key}")

    forked = engine.run("fork", "a", "--at-step", "6", "--run-id", "a2", "--db", db)
    assert forked.returncode == 0, forked.stderr
    ledger = outbox.ledger()
    assert sent_once_each(ledger) == {"T-1001": 1, "T-1002": 1, "digest": 1}
    assert sorted(d.key for d in ledger.deliveries if "ticket_id" in d.body) == ["a:6", "a:7"]
