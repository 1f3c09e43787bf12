"""Chat steps that stream (issue 30): real ``steplog run`` processes asking the fake
OpenAI-compatible server on 127.0.0.1, which answers in server-sent events. The text lands in the
run's stream ``tokens`` while the call runs; the recorded answer is the one an unstreamed call
records; a break midway and a SIGKILL midway leave the cut attempt in the stream, marked, beside
the whole redo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group
from helpers.openai_server import CACHED_TOKENS, FakeOpenAI, pieces, reply_content, usage_for
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from steplog.log.reader import LogRepository

KEY_ENV = {"OPENAI_API_KEY": "sk-test-stream-00000000000000000000", "NO_PROXY": "127.0.0.1"}
pytestmark = pytest.mark.backends("sqlite", "postgres")


def chatty(
    engine: Engine, fake: FakeOpenAI, run_id: str, n: int, stream: str = "auto"
) -> list[str]:
    return [
        "run", f"{AGENTS}:chatty", "--run-id", run_id, "--db", str(engine.db),
        "--param", f"n={n}", "--param", f"stream={stream}",
        "--model", "gpt-4o-mini", "--base-url", fake.base_url,
    ]  # fmt: skip


def stream_json(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    done = engine.run("stream", run_id, "--db", str(engine.db), "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def decisions(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    rows = engine.query("SELECT decision FROM step WHERE run_id = ? ORDER BY seq", run_id)
    return [json.loads(r[0]) for r in rows]


def streamed_rows(engine: Engine) -> int:
    """Rows of the stream ``tokens`` in the log; 0 while the engine makes the log."""
    try:
        return int(engine.query("SELECT count(*) FROM stream WHERE name = 'tokens'")[0][0])
    except Exception:  # no log, or no table, yet
        return 0


def text_of(entries: list[dict[str, Any]], step: int, attempt: int) -> str:
    return "".join(e["value"] for e in entries if e["step"] == step and e["attempt"] == attempt)


def test_a_streamed_answer_is_recorded_as_the_unstreamed_one_with_the_usage_chunks_counts(
    engine: Engine,
) -> None:
    with FakeOpenAI(default="ok_cached") as fake:
        done = engine.run(*chatty(engine, fake, "on", 2), env=KEY_ENV)
        assert done.returncode == 0, done.stderr
        plain = engine.run(*chatty(engine, fake, "off", 2, stream="off"), env=KEY_ENV)
        assert plain.returncode == 0, plain.stderr
        assert [c.body["stream"] for c in fake.calls if c.body and "stream" in c.body] == [True] * 2
        bodies = [c.body for c in fake.calls[:2]]
    streamed, unstreamed = decisions(engine, "on"), decisions(engine, "off")
    assert streamed == unstreamed, "the same reply: text, usage, cost, model, finish reason"
    entries = stream_json(engine, "on")
    assert {(e["stream"], e["attempt"], e["cut"]) for e in entries} == {("tokens", 1, False)}
    for seq, (decision, body) in enumerate(zip(streamed, bodies, strict=True), start=1):
        assert text_of(entries, seq, 1) == decision["text"] == reply_content(body)
    assert stream_json(engine, "off") == [], "stream=False writes no stream"
    body, text = bodies[0], streamed[0]["text"]
    sent = usage_for(body, text, CACHED_TOKENS)
    row = engine.query(
        "SELECT tokens_in, tokens_out, tokens_cached, tokens_estimated FROM step "
        "WHERE run_id = 'on' ORDER BY seq LIMIT 1"
    )[0]
    assert row == (sent["prompt_tokens"], sent["completion_tokens"], CACHED_TOKENS, 0)


def test_the_text_is_in_the_log_while_the_call_is_still_running(engine: Engine) -> None:
    """What the monitor's output pane reads (every attempt, settled or not) has the answer's
    first pieces long before the step is recorded."""
    with FakeOpenAI(default="ok+words:60+slow:40") as fake:  # ~2.5 s of answer
        proc = engine.start(*chatty(engine, fake, "live", 1), env=KEY_ENV)
        try:
            repo = LogRepository(engine.db)
            seen: list[Any] = []

            def pieces_seen() -> bool:
                try:
                    if not repo.is_open:
                        repo.open()
                    seen[:] = repo.step_stream("live", 1)[1]
                except Exception:  # the log is being made
                    repo.close()
                    return False
                return bool(seen)

            wait_until(pieces_seen, "the first pieces were in the log", timeout=60)
            status = engine.query("SELECT status FROM step WHERE run_id = 'live' AND seq = 1")
            assert status == [("running",)], "the step is still running"
            repo.close()
            assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                kill_group(proc)
        whole = reply_content(fake.calls[0].body, 60)
    first = "".join(entry.value for entry, _settled in seen)
    assert whole.startswith(first) and len(first) < len(whole)
    assert text_of(stream_json(engine, "live"), 1, 1) == whole


def test_a_stream_broken_midway_is_retried_and_its_text_stays_marked_cut(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        fake.script("ok+words:30+cut:10", "ok+words:30")
        done = engine.run(*chatty(engine, fake, "cut", 1), env=KEY_ENV)
        assert done.returncode == 0, done.stderr
        assert fake.calls_by_key() == {"cut:1": 2}, "the same key, asked again once"
        whole = reply_content(fake.calls[0].body, 30)
    entries = stream_json(engine, "cut")
    pairs = [(e["attempt"], e["cut"]) for e in entries]
    assert pairs == sorted(pairs), "the cut attempt's entries, then the redo's"
    assert {(e["attempt"], e["cut"]) for e in entries} == {(1, True), (2, False)}
    assert text_of(entries, 1, 1) == "".join(pieces(whole)[:10])
    assert text_of(entries, 1, 2) == whole == decisions(engine, "cut")[0]["text"]
    assert engine.query("SELECT attempts, status FROM step WHERE run_id = 'cut'") == [
        (2, "committed")
    ]


def test_a_kill_midway_through_an_answer_then_resume(engine: Engine) -> None:
    """One real SIGKILL of the engine's process group while the model's answer streams."""
    with FakeOpenAI() as fake:
        fake.script("ok+words:80+slow:30", "ok+words:80")
        args = chatty(engine, fake, "kill", 1)
        proc = engine.start(*args, env=KEY_ENV)
        try:
            wait_until(lambda: streamed_rows(engine) > 0, "the answer was streaming")
        finally:
            kill_group(proc)
        done = engine.run(*args, env=KEY_ENV)
        assert done.returncode == 0, done.stderr
        assert fake.calls_by_key() == {"kill:1": 2}
        whole = reply_content(fake.calls[0].body, 80)
    entries = stream_json(engine, "kill")
    cut = [e for e in entries if e["cut"]]
    redo = [e for e in entries if not e["cut"]]
    assert cut and entries == cut + redo, "the cut attempt, then the complete redo"
    assert {e["attempt"] for e in cut} == {1} and {e["attempt"] for e in redo} == {2}
    assert whole.startswith(text_of(entries, 1, 1)) and text_of(entries, 1, 1) != whole
    assert text_of(entries, 1, 2) == whole == decisions(engine, "kill")[0]["text"]
    assert engine.events("step_committed", 1) == 1 and engine.status("kill")["steps_committed"] == 1
    assert engine.query("SELECT attempts, status FROM step WHERE run_id = 'kill'") == [
        (2, "committed")
    ]


@pytest.mark.backends("sqlite")
def test_stream_true_with_a_model_that_cannot_stream_is_refused_before_anything_is_written(
    engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "plain_model.py"
    agent.write_text(
        "import steplog\n\n"
        "class Plain:  # a ChatModel of the user's own, without stream(...)\n"
        "    def __init__(self, inner):\n"
        "        self.name, self.inner = inner.name, inner\n"
        "    def estimate(self, messages, *, max_tokens):\n"
        "        return self.inner.estimate(messages, max_tokens=max_tokens)\n"
        "    def complete(self, messages, *, max_tokens, idempotency_key):\n"
        "        return self.inner.complete(messages, max_tokens=max_tokens,\n"
        "                                   idempotency_key=idempotency_key)\n"
        "    def __repr__(self):\n"
        "        return 'Plain()'\n\n"
        "@steplog.agent\n"
        "def plain(run):\n"
        "    run.model = Plain(run.model)\n"
        "    return run.chat([{'role': 'user', 'content': 'hi'}], stream=True).text\n"
    )
    done = engine.run("run", f"{agent}:plain", "--run-id", "p", "--db", str(engine.db))
    assert done.returncode == 4, done.stderr
    assert "run.chat(stream=True) needs a model that streams" in done.stdout, done.stdout
    assert "Plain()" in done.stdout
    assert engine.query("SELECT count(*) FROM step WHERE run_id = 'p'") == [(0,)]
    assert stream_json(engine, "p") == []
