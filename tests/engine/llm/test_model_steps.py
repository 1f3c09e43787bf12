"""Chat steps against a real OpenAI-compatible HTTP server on loopback (the fake counts calls)."""

from __future__ import annotations

from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.paths import AGENTS
from steplog.runtime.crashpoints import CRASH_EXIT_CODE

KEY_ENV = {"OPENAI_API_KEY": "sk-test-0000000000000000000000"}


def chatty(engine: Engine, fake: FakeOpenAI, run_id: str, n: int) -> list[str]:
    return [
        "run",
        f"{AGENTS}:chatty",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"n={n}",
        "--model",
        "gpt-4o-mini",
        "--base-url",
        fake.base_url,
    ]


def test_real_usage_is_recorded_and_charged(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        done = engine.run(*chatty(engine, fake, "u", 3), env=KEY_ENV)
        assert done.returncode == 0, done.stderr
        assert fake.call_count == 3
    steps = engine.query(
        "SELECT tokens_in, tokens_out, tokens_estimated, cost_usd FROM step ORDER BY seq"
    )
    assert all(tin > 0 and tout > 0 and est == 0 and cost > 0 for tin, tout, est, cost in steps)
    status = engine.status("u")
    assert status["budget"]["tokens"]["used"] == sum(tin + tout for tin, tout, _e, _c in steps)
    assert status["budget"]["tokens"]["estimated"] == 0
    assert abs(status["budget"]["cost_usd"]["used"] - sum(c for *_x, c in steps)) < 1e-9
    assert "sk-test" not in engine.db.read_bytes().decode("latin-1")


def test_rate_limits_and_server_errors_are_retried_with_the_same_key(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        fake.script("429", "500", "ok")
        done = engine.run(*chatty(engine, fake, "rl", 1), env=KEY_ENV)
        assert done.returncode == 0, done.stderr
        assert fake.calls_by_key() == {"rl:1": 3}
    assert engine.query("SELECT attempts, status FROM step") == [(3, "committed")]
    # The failed attempts released their reservations: only the answered call is charged.
    status = engine.status("rl")
    step_tokens = engine.query("SELECT tokens_in + tokens_out FROM step")[0][0]
    assert status["budget"]["tokens"]["used"] == step_tokens


def test_a_committed_decision_is_never_asked_for_again(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        args = chatty(engine, fake, "dec", 4)
        crashed = engine.run(*args, env={**KEY_ENV, "STEPLOG_CRASH_AT": "after_decision@2"})
        assert crashed.returncode == CRASH_EXIT_CODE
        assert engine.run(*args, env=KEY_ENV).returncode == 0
        assert fake.calls_by_key() == {f"dec:{i}": 1 for i in range(1, 5)}  # zero repeats


def test_a_missing_api_key_fails_with_what_to_do(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        fake.script("401")
        done = engine.run(
            *chatty(engine, fake, "nokey", 1),
            env={"OPENAI_API_KEY": "sk-wrong-0000000000000000000"},
        )
    assert done.returncode == 4
    assert "OPENAI_API_KEY" in done.stdout and "sk-wrong" not in done.stdout
