"""Streams (issue 30): what a run emits as it goes, durable, read from any offset, each entry once.

Real ``steplog run`` processes killed with SIGKILL of their group, real followers
(``steplog stream --follow``) started before the run and left running across the kills.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group, storm
from helpers.paths import AGENTS

AGENT = f"{AGENTS}:streamer"


def streamer_args(engine: Engine, run_id: str, n: int, chunks: int, pause: float) -> list[str]:
    """``steplog run`` of the streaming agent: ``n`` steps of ``chunks`` pieces, ``pause`` apart."""
    return [
        "run", AGENT, "--run-id", run_id, "--db", str(engine.db), "--param", f"n={n}",
        "--param", f"chunks={chunks}", "--param", f"pause={pause}",
    ]  # fmt: skip


def stream_json(engine: Engine, run_id: str, *more: str) -> list[dict[str, Any]]:
    done = engine.run("stream", run_id, "--db", str(engine.db), "--json", *more)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def check_stream(entries: list[dict[str, Any]], n: int, chunks: int) -> None:
    """What every reader of a finished ``streamer`` run must see, however often it was killed."""
    offsets = [e["offset"] for e in entries]
    assert offsets == sorted(set(offsets)), "offsets strictly increasing, each once"
    assert offsets == list(range(len(entries))), "and none skipped"
    events = [e["value"] for e in entries if e["stream"] == "events"]
    assert events == [{"phase": "start"}] + [{"done": i} for i in range(n)], "each event once"
    assert not any(e["cut"] for e in entries if e["stream"] == "events")
    for i in range(n):
        said = [f"{i}.{c} " for c in range(chunks)]
        mine = [e for e in entries if e["stream"] == "tokens" and e["value"].startswith(f"{i}.")]
        kept = [e for e in mine if not e["cut"]]
        assert [e["value"] for e in kept] == said, f"step {i}: the recorded attempt, whole"
        assert len({e["attempt"] for e in kept}) == 1
        for attempt in {e["attempt"] for e in mine if e["cut"]}:
            cut = [e["value"] for e in mine if e["attempt"] == attempt]
            assert cut == said[: len(cut)], f"step {i}: a cut attempt is a prefix, in order"
            assert attempt < kept[0]["attempt"], "the redone attempt has a number of its own"


@pytest.mark.backends("sqlite", "postgres")
def test_a_run_streams_its_events_once_and_each_steps_text_in_order(engine: Engine) -> None:
    done = engine.run(*streamer_args(engine, "s", 3, 5, 0))
    assert done.returncode == 0, done.stderr
    entries = stream_json(engine, "s")
    check_stream(entries, 3, 5)
    assert len(entries) == 1 + 3 * 5 + 3
    assert {e["attempt"] for e in entries} == {1} and not any(e["cut"] for e in entries)

    # Read on from an offset, one stream only, or as text.
    assert stream_json(engine, "s", "--from", "10") == entries[10:]
    assert stream_json(engine, "s", "--name", "events") == [
        e for e in entries if e["stream"] == "events"
    ]
    text = engine.run("stream", "s", "--db", str(engine.db)).stdout.splitlines()
    assert text[1] == '     1 tokens step 2#1: "0.0 "', text[:3]


@pytest.mark.slow
@pytest.mark.backends("sqlite", "postgres")
def test_a_follower_across_kills_prints_exactly_what_a_reader_after_the_run_prints(
    engine: Engine,
) -> None:
    """Done means (issue 30): a follower started before the run and left running across >= 3
    kills prints what ``steplog stream --json`` prints after the run ends: every offset once,
    increasing, agent events each exactly once, cut entries marked."""
    n, chunks = 8, 15
    follower = engine.start("stream", "k", "--db", str(engine.db), "--follow", "--json")
    try:
        args = streamer_args(engine, "k", n, chunks, 0.03)
        rng = random.Random(30)
        result = storm(engine, args, rng, max_kills=4, low=0.8, high=1.6)
        assert result.exit_code == 0 and result.kills >= 3, result
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            kill_group(follower)
    assert follower.returncode == 0, err
    followed = [json.loads(line) for line in out.splitlines()]
    after = stream_json(engine, "k")
    assert followed == after
    check_stream(after, n, chunks)
    assert any(e["cut"] for e in after), "a kill landed inside a streaming step"


def test_streams_travel_with_the_run_through_export_and_import(
    engine: Engine, tmp_path: Path
) -> None:
    done = engine.run(*streamer_args(engine, "x", 2, 3, 0))
    assert done.returncode == 0, done.stderr
    archive = tmp_path / "x.jsonl"
    assert engine.run("export", "x", "--db", str(engine.db), "-o", str(archive)).returncode == 0
    other = Engine(db=tmp_path / "other.db", env=engine.env)
    imported = other.run("import", str(archive), "--db", str(other.db))
    assert imported.returncode == 0, imported.stderr
    assert stream_json(other, "x") == stream_json(engine, "x")


def test_reading_the_stream_of_a_run_that_is_not_there_is_one_line_and_exit_2(
    engine: Engine,
) -> None:
    engine.run("run", AGENT, "--run-id", "a", "--db", str(engine.db), "--param", "n=1")
    done = engine.run("stream", "nope", "--db", str(engine.db))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no run 'nope'" in done.stderr, done.stderr
    bad = engine.run("stream", "a", "--db", str(engine.db), "--from", "-1")
    assert bad.returncode == 2 and "--from" in bad.stderr


def test_a_value_that_is_not_json_is_refused_before_anything_is_written(
    engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "bad_emit.py"
    agent.write_text("import steplog\n\n@steplog.agent\ndef bad(run):\n    run.emit({1, 2})\n")
    done = engine.run("run", f"{agent}:bad", "--run-id", "b", "--db", str(engine.db))
    assert done.returncode == 4, done.stderr  # the run failed: the agent's own mistake
    assert "run.emit() got set, which cannot be recorded as JSON" in done.stdout
    assert stream_json(engine, "b") == []


def test_the_python_readers_read_what_the_cli_prints(engine: Engine) -> None:
    import asyncio

    import steplog

    engine.run(*streamer_args(engine, "p", 2, 2, 0))
    cli = stream_json(engine, "p")
    assert list(steplog.read_stream("p", db=str(engine.db))) == cli
    assert list(steplog.read_stream("p", db=str(engine.db), name="events", from_offset=3)) == [
        e for e in cli[3:] if e["stream"] == "events"
    ]

    async def read() -> list[dict[str, Any]]:
        return [e async for e in steplog.aread_stream("p", db=str(engine.db), follow=True)]

    assert asyncio.run(read()) == cli  # the run is over: a follower ends at its last entry
    with pytest.raises(steplog.UnknownRun):
        list(steplog.read_stream("nope", db=str(engine.db)))


def test_an_unfinished_attempt_is_not_printed_until_it_is_over(
    engine: Engine,
) -> None:
    """Its entries come out once the step's attempt is over: then, cut or not, for good."""
    proc = engine.start(*streamer_args(engine, "u", 1, 400, 0.01))
    try:
        deadline = 30.0
        import time

        t0 = time.monotonic()
        while not (
            engine.db.exists()
            and engine.query("SELECT count(*) FROM sqlite_master WHERE name = 'stream'")[0][0]
            and engine.query("SELECT count(*) FROM stream WHERE name = 'tokens'")[0][0]
        ):
            assert time.monotonic() - t0 < deadline, "no tokens written"
            time.sleep(0.05)
        now = stream_json(engine, "u")
        assert [e["stream"] for e in now] == ["events"], "the step's text waits for its end"
        kill_group(proc)
        after_kill = stream_json(engine, "u")
        assert after_kill == now, "a dead engine's attempt stays open until the run goes on"
    finally:
        if proc.poll() is None:
            kill_group(proc)
    done = engine.run("run", AGENT, "--run-id", "u", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    entries = stream_json(engine, "u")
    assert entries[: len(now)] == now
    cut = [e for e in entries if e["cut"]]
    assert cut and {e["attempt"] for e in cut} == {1}
    check_stream(entries, 1, 400)


def test_a_run_that_streams_nothing_has_no_stream_thread(engine: Engine, tmp_path: Path) -> None:
    """Streams cost a run that does not use them nothing: no thread, no rows."""
    agent = tmp_path / "quiet.py"
    agent.write_text(
        "import threading, steplog\n\n"
        "@steplog.agent\n"
        "def quiet(run):\n"
        "    run.step('a', lambda: 1)\n"
        "    return sorted(t.name for t in threading.enumerate())\n"
    )
    done = engine.run("run", f"{agent}:quiet", "--run-id", "q", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    threads = engine.status("q")["result"]
    assert "steplog-stream" not in threads, threads
    assert engine.query("SELECT count(*) FROM stream")[0][0] == 0


@pytest.mark.backends("sqlite", "postgres")
def test_a_fork_starts_with_its_parents_recorded_text_and_writes_on_after_it(
    engine: Engine,
) -> None:
    done = engine.run(*streamer_args(engine, "f", 3, 2, 0))
    assert done.returncode == 0, done.stderr
    parent = stream_json(engine, "f")
    forked = engine.run("fork", "f", "--at-step", "4", "--run-id", "f2", "--db", str(engine.db))
    assert forked.returncode == 0, forked.stderr
    child = stream_json(engine, "f2")
    # Steps 1-3 copied: the start event, step 2's text, "done 0"; then the fork's own entries.
    copied = [e for e in parent if e["step"] < 4]
    assert [(e["stream"], e["step"], e["value"]) for e in child[: len(copied)]] == [
        (e["stream"], e["step"], e["value"]) for e in copied
    ]
    assert [e["offset"] for e in child] == list(range(len(child)))
    check_stream(child, 3, 2)
