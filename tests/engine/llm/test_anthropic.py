"""The Anthropic adapter (``--model anthropic:MODEL``) against a real Messages API fake on
loopback: the reply, its usage and price, streaming, errors, and real ``steplog run`` processes
that retry, fail, stream and survive a kill inside a call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.anthropic_server import (
    CACHE_READ,
    CACHE_WRITE,
    CACHE_WRITE_1H,
    FakeAnthropic,
    pieces,
    reply_text,
    usage_for,
)
from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from steplog.errors import UsageError
from steplog.llm import ModelError, ModelUnavailable, PriceTable, check_ready
from steplog.llm.anthropic import AnthropicModel

SECRET = "sk-ant-DO-NOT-LEAK-0123456789abcdef"
MODEL = "claude-haiku-4-5"
PROMPT = [
    {"role": "system", "content": "You triage support tickets."},
    {"role": "user", "content": "The export button does nothing since Monday."},
]


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def model(fake: FakeAnthropic) -> Iterator[AnthropicModel]:
    m = AnthropicModel(MODEL, base_url=fake.base_url, api_key=SECRET, timeout=5)
    yield m
    m.close()


# --- the adapter, in process ----------------------------------------------------------------------


def test_a_reply_carries_the_text_the_usage_with_the_cache_and_the_claude_price(
    model: AnthropicModel, fake: FakeAnthropic
) -> None:
    fake.script("ok_cached")
    reply = model.complete(PROMPT, max_tokens=64, idempotency_key="r:1")
    (call,) = fake.calls
    assert call.idempotency_key == "r:1" and call.body is not None
    assert call.body["system"] == "You triage support tickets."
    assert call.body["messages"] == [PROMPT[1]] and call.body["max_tokens"] == 64
    assert reply.text == reply_text(call.body) and reply.finish_reason == "end_turn"
    sent = usage_for(call.body, reply.text, cached=True)
    u = reply.usage
    assert u.input_tokens == sent["input_tokens"] + CACHE_READ + CACHE_WRITE
    assert (u.cached_tokens, u.cache_write_tokens, u.output_tokens) == (
        CACHE_READ,
        CACHE_WRITE,
        sent["output_tokens"],
    )
    assert not u.estimated
    # Haiku 4.5, per 1M tokens: $1 in, $5 out, cache reads $0.10, cache writes $1.25 (5 minutes)
    # and $2 (1 hour).
    writes = (CACHE_WRITE - CACHE_WRITE_1H) * 1.25 + CACHE_WRITE_1H * 2.0
    fresh = sent["input_tokens"] * 1.0 + CACHE_READ * 0.10
    expected = fresh + writes + sent["output_tokens"] * 5.0
    assert reply.cost_usd == pytest.approx(expected / 1e6)
    assert model.estimate(PROMPT, max_tokens=64).cost_usd >= reply.cost_usd


def test_stream_hands_the_text_over_piece_by_piece(
    model: AnthropicModel, fake: FakeAnthropic
) -> None:
    said: list[str] = []
    reply = model.stream(PROMPT, max_tokens=64, idempotency_key="s:1", on_text=said.append)
    assert fake.calls[0].body is not None and fake.calls[0].body["stream"] is True
    assert said == pieces(reply.text) and len(said) > 3
    assert reply.usage.output_tokens > 0 and reply.cost_usd > 0


@pytest.mark.parametrize(
    ("behaviour", "retried", "says"),
    [
        ("429", True, "rate limited"),
        ("529", True, "overloaded (HTTP 529)"),
        ("500", True, "HTTP 500"),
        ("cut", True, "lost the connection"),
        ("sse_error", True, "overloaded_error"),
        ("401", False, "ANTHROPIC_API_KEY"),
        ("400", False, "HTTP 400"),
        ("404", False, "not found"),
    ],
)
def test_errors_are_sent_once_mapped_to_retry_or_not_and_never_show_the_key(
    model: AnthropicModel, fake: FakeAnthropic, behaviour: str, retried: bool, says: str
) -> None:
    fake.script(behaviour)
    with pytest.raises(ModelError) as caught:
        model.stream(PROMPT, max_tokens=64, idempotency_key="e:1", on_text=lambda _t: None)
    error = caught.value
    assert isinstance(error, ModelUnavailable) is retried
    assert says in str(error) and "\n" not in str(error)
    assert SECRET not in str(error) and "DO-NOT-LEAK" not in str(error)
    assert fake.call_count == 1  # the SDK's own retries are off
    if behaviour == "429":
        assert isinstance(error, ModelUnavailable) and error.retry_after == 1.0


def test_claude_prices_cover_aliases_and_dated_snapshots() -> None:
    table = PriceTable()
    assert table.price_for("claude-sonnet-4-5-20250929") == table.price_for("claude-sonnet-4-5")
    assert table.price_for("claude-3-5-haiku-latest") == table.price_for("claude-3-5-haiku")
    price = table.price_for("claude-opus-4-1")
    assert price is not None and (price.input, price.output) == (15.0, 75.0)
    assert table.price_for("claude-not-a-model", base_url="https://api.anthropic.com") is None


def test_a_missing_key_or_model_id_is_refused_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(UsageError, match="set ANTHROPIC_API_KEY"):
        check_ready(f"anthropic:{MODEL}")
    check_ready(f"anthropic:{MODEL}", base_url="http://127.0.0.1:9")  # a local proxy needs none
    check_ready("gpt-4o-mini")  # not Anthropic's to judge


# --- real `steplog run` processes -----------------------------------------------------------------


def chatty(engine: Engine, run_id: str, n: int) -> list[str]:
    return [
        *("run", f"{AGENTS}:chatty", "--run-id", run_id, "--db", str(engine.db)),
        *("--param", f"n={n}", "--model", f"anthropic:{MODEL}"),
    ]


def env_for(fake: FakeAnthropic) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": fake.base_url}


def stream_of(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    done = engine.run("stream", run_id, "--db", str(engine.db), "--json", "--name", "tokens")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.backends("sqlite", "postgres")
def test_a_run_retries_an_overloaded_api_then_records_text_usage_cost_and_the_stream(
    engine: Engine, fake: FakeAnthropic
) -> None:
    fake.script("529", "sse_error")  # overloaded at once, then in the middle of the answer
    done = engine.run(*chatty(engine, "a", 2), env=env_for(fake))
    assert done.returncode == 0, done.stderr
    assert fake.calls_by_key() == {"a:1": 3, "a:2": 1}  # retried by the engine, same key
    rows = engine.query(
        "SELECT seq, attempts, decision, tokens_in, tokens_out, tokens_estimated, cost_usd "
        "FROM step ORDER BY seq"
    )
    assert [(seq, attempts) for seq, attempts, *_ in rows] == [(1, 3), (2, 1)]
    entries = stream_of(engine, "a")
    for seq, _attempts, decision, tokens_in, tokens_out, estimated, cost in rows:
        reply = json.loads(decision)
        assert reply["text"].startswith(f"fake claude {MODEL} to: Say something")
        assert reply["model"] == MODEL and reply["usage"]["input_tokens"] == tokens_in
        assert tokens_in > 0 and tokens_out > 0 and not estimated and cost > 0
        mine = [e["value"] for e in entries if e["step"] == seq and not e["cut"]]
        # The pieces that come within one ~50 ms batch are one entry (docs/streams.md): the
        # text is whole in the stream however many entries it took.
        assert "".join(mine) == reply["text"] and mine
    status = engine.status("a")
    assert status["budget"]["cost_usd"]["used"] == pytest.approx(sum(r[-1] for r in rows))
    assert "DO-NOT-LEAK" not in done.stdout + done.stderr


def test_a_rejected_key_fails_the_step_in_one_line_without_the_key(
    engine: Engine, fake: FakeAnthropic
) -> None:
    fake.script("401")
    done = engine.run(*chatty(engine, "k", 1), env=env_for(fake))
    assert done.returncode == 4
    assert fake.call_count == 1
    said = [line for line in (done.stdout + done.stderr).splitlines() if "HTTP 401" in line]
    assert said and "ANTHROPIC_API_KEY" in said[0]
    assert "DO-NOT-LEAK" not in done.stdout + done.stderr
    assert isinstance(engine.db, Path)
    assert b"DO-NOT-LEAK" not in engine.db.read_bytes()


def test_no_key_is_exit_2_before_the_log_is_touched(engine: Engine, tmp_path: Path) -> None:
    done = engine.run(*chatty(engine, "n", 1), env={"ANTHROPIC_API_KEY": ""})
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert isinstance(engine.db, Path) and not engine.db.exists()


def test_a_kill_inside_a_call_resumes_to_exactly_one_recorded_answer(
    engine: Engine, fake: FakeAnthropic
) -> None:
    fake.script("slow")  # the first call sends one piece, then stalls
    args = chatty(engine, "kill", 1)
    first = engine.start(*args, env=env_for(fake))
    wait_until(lambda: fake.call_count == 1, "the model call began")
    wait_until(lambda: engine.events("step_started") >= 1, "the step began")
    kill_group(first)
    keyless = engine.run(
        *args, env={**env_for(fake), "ANTHROPIC_BASE_URL": "", "ANTHROPIC_API_KEY": ""}
    )
    assert keyless.returncode == 2 and "set ANTHROPIC_API_KEY" in keyless.stderr  # still resumable
    done = engine.run(*args, env=env_for(fake))
    assert done.returncode == 0, done.stderr
    assert fake.calls_by_key() == {"kill:1": 2}  # asked again once, with the same key
    decisions = engine.query("SELECT decision FROM step WHERE seq = 1 AND status = 'committed'")
    assert len(decisions) == 1
    text = json.loads(decisions[0][0])["text"]
    kept = [e["value"] for e in stream_of(engine, "kill") if e["step"] == 1 and not e["cut"]]
    assert "".join(kept) == text
