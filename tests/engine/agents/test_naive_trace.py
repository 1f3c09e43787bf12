"""The naive agent's trace: what it did, numbered like the demo's steps, never used to resume.

Compare mode draws the naive agent from this file, so it must tell the truth: after a SIGKILL the
next process starts again at step 1, and every message the outbox received twice shows as a
``send reply`` done twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from steplog.agents.trace import TRACE_FILE, Trace, cut_short, read_trace, summarize
from steplog.outbox import OutboxProcess, start_outbox


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[OutboxProcess]:
    with start_outbox(tmp_path / "outbox.db") as ob:
        yield ob


def naive_args(
    engine: Engine, outbox: OutboxProcess, workdir: Path, *extra: str, run_id: str = "n"
) -> list[str]:
    return [
        "run",
        "naive",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--outbox",
        outbox.url,
        "--workdir",
        str(workdir),
        "--param",
        "tickets=3",
        *extra,
    ]


def test_the_trace_names_the_demo_steps_in_order_and_is_off_by_default(
    engine: Engine, outbox: OutboxProcess, tmp_path: Path
) -> None:
    done = engine.run(*naive_args(engine, outbox, tmp_path / "w", "--param", "trace=true"))
    assert done.returncode == 0, done.stderr
    records = read_trace(tmp_path / "w" / TRACE_FILE)
    names = [r.name for r in records if r.event == "done"]
    assert names == [
        "load tickets",
        *[
            f"{what} T-100{i}"
            for i in (1, 2, 3)
            for what in ("triage", "write reply", "send reply", "record")
        ],
        "write summary",
        "send digest",
    ]
    assert [r.seq for r in records if r.event == "done"] == list(
        range(1, 16)
    )  # 1 + 3 tickets x 4 + 2, as the demo numbers them
    chats = [r for r in records if r.event == "done" and r.kind == "chat"]
    assert all(r.tokens > 0 for r in chats) and summarize(records).tokens == sum(
        r.tokens for r in chats
    )
    assert summarize(records).redone == 0

    demo = engine.run(
        "run",
        "demo",
        "--run-id",
        "d",
        "--db",
        str(engine.db),
        "--outbox",
        outbox.url,
        "--param",
        "tickets=3",
    )
    assert demo.returncode == 0, demo.stderr
    demo_steps = engine.query("SELECT seq, name FROM step WHERE run_id = 'd' ORDER BY seq")
    assert demo_steps == [
        (r.seq, r.name) for r in records if r.event == "done"
    ]  # lanes that line up

    plain = engine.run(*naive_args(engine, outbox, tmp_path / "w2", run_id="n2"))
    assert plain.returncode == 0, plain.stderr
    assert not (
        tmp_path / "w2" / TRACE_FILE
    ).exists()  # killtest naive compares workdirs: no trace there


def test_after_a_sigkill_the_trace_starts_over_at_step_one_and_shows_each_resend(
    engine: Engine, outbox: OutboxProcess, tmp_path: Path
) -> None:
    args = naive_args(engine, outbox, tmp_path / "w", "--param", "trace=true", "--pace", "0.3")
    proc = engine.start(*args)
    deadline = time.monotonic() + 30
    while len(outbox.ledger().deliveries) < 2:  # two replies sent: then the kill
        assert proc.poll() is None and time.monotonic() < deadline, (
            "the naive run ended before the kill"
        )
        time.sleep(0.02)
    kill_group(proc)
    again = engine.run(*args)
    assert again.returncode == 0, again.stderr

    records = read_trace(tmp_path / "w" / TRACE_FILE)
    first = {r.incarnation: r.seq for r in reversed(records) if r.event == "started"}
    assert sorted(first) == [1, 2] and first == {1: 1, 2: 1}  # each process began at step 1
    sent = [r for r in records if r.event == "done" and r.name.startswith("send reply")]
    ledger = outbox.ledger()
    delivered = len([d for d in ledger.deliveries if "ticket_id" in d.body])
    # The trace line follows the act: the kill may land between a send and its "done" line.
    assert len(sent) <= delivered <= len(sent) + 1
    s = summarize(records)
    assert s.redone >= 2 * 4  # at least two tickets' four steps again
    assert s.done == 15 and s.steps == 15
    # Each model call gives the most it can cost; one the kill cut short is charged that much.
    calls = [r for r in records if r.event == "started" and r.kind == "chat"]
    assert calls and all(r.reserve_tokens > max(r.tokens for r in records) for r in calls)
    assert s.tokens == sum(r.tokens for r in records if r.event == "done") + sum(
        r.reserve_tokens for r in cut_short(records)
    )


def test_a_torn_last_line_is_ignored_and_a_raising_action_has_no_done_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = Trace(path, incarnation=1)
    with trace.step("load tickets", "call") as step:
        step.tokens = 0
    with pytest.raises(RuntimeError):
        with trace.step("send reply T-1", "http_post"):
            raise RuntimeError("refused")
    trace.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"ts": 1.0, "pid": 1, "incarn')  # a kill in the middle of a write
    records = read_trace(path)
    assert [(r.seq, r.event) for r in records] == [(1, "started"), (1, "done"), (2, "started")]
    assert read_trace(tmp_path / "none.jsonl") == []
