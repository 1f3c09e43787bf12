"""Runs that spend: real engines asking a fake OpenAI-compatible server (on loopback) under list
prices, so a log's cost is what real usage made it."""

from __future__ import annotations

from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.paths import AGENTS

KEY_ENV = {"OPENAI_API_KEY": "sk-test-0000000000000000000000"}


def spend(engine: Engine, fake: FakeOpenAI, run_id: str, model: str, chats: int) -> None:
    """Run ``run_id`` to its end: ``chats`` calls of ``model`` (the ``chatty`` test agent)."""
    done = engine.run(
        "run", f"{AGENTS}:chatty", "--run-id", run_id, "--db", str(engine.db),
        "--param", f"n={chats}", "--model", model, "--base-url", fake.base_url,
        env=KEY_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
