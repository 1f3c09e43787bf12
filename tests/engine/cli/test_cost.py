"""`steplog cost`: what the runs in a log spent, by model, agent, day, run or tag, from the steps
that engines really ran (a fork's copies are its parent's spending, never counted twice)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.paths import AGENTS
from helpers.spending import spend as chat_run


def cost(engine: Engine, *args: str, env: dict[str, str] | None = None) -> Any:
    done = engine.run("cost", "--db", str(engine.db), "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def step_sums(engine: Engine, run_ids: tuple[str, ...]) -> tuple[int, float]:
    marks = ", ".join("?" for _ in run_ids)
    tokens, usd = engine.query(
        f"SELECT SUM(tokens_in + tokens_out), SUM(cost_usd) FROM step WHERE run_id IN ({marks})",
        *run_ids,
    )[0]
    return int(tokens), float(usd)


@pytest.mark.backends("sqlite", "postgres")
def test_spending_is_summed_by_model_and_agent_most_expensive_first(
    engine: Engine, fake_openai: FakeOpenAI
) -> None:
    chat_run(engine, fake_openai, "mini-a", "gpt-4o-mini", 2)
    chat_run(engine, fake_openai, "mini-b", "gpt-4o-mini", 1)
    chat_run(engine, fake_openai, "big", "gpt-4.1", 2)
    assert (
        engine.run("run", f"{AGENTS}:noop", "--param", "n=2", "--db", str(engine.db)).returncode
        == 0
    )

    rows = cost(engine, "--by", "model")
    assert [r["model"] for r in rows] == ["gpt-4.1", "gpt-4o-mini", "offline"]
    by_model = {r["key"]: r for r in rows}
    tokens, usd = step_sums(engine, ("mini-a", "mini-b"))
    assert by_model["gpt-4o-mini"]["tokens"] == tokens > 0
    assert by_model["gpt-4o-mini"]["cost_usd"] == pytest.approx(usd)
    assert by_model["gpt-4o-mini"]["runs"] == 2 and by_model["gpt-4o-mini"]["steps"] == 3
    assert by_model["offline"] == {**by_model["offline"], "tokens": 0, "cost_usd": 0, "runs": 1}
    # The runs' own budgets say the same: the table adds up to what each run was charged.
    charged = sum(engine.status(r)["budget"]["cost_usd"]["used"] for r in ("mini-a", "mini-b"))
    assert by_model["gpt-4o-mini"]["cost_usd"] == pytest.approx(charged)

    agents = cost(engine, "--by", "agent")
    assert {r["agent"]: r["runs"] for r in agents} == {f"{AGENTS}:chatty": 3, f"{AGENTS}:noop": 1}

    text = engine.run("cost", "--db", str(engine.db)).stdout.splitlines()
    assert text[0].split() == ["model", "tokens", "cost", "runs", "steps"]
    assert text[-1].split()[0] == "total" and text[-1].split()[-2:] == [
        "4",
        str(5 + 2),
    ]  # 5 chats, 2 no-ops


def test_a_fork_counts_only_what_it_ran_itself(engine: Engine, fake_openai: FakeOpenAI) -> None:
    chat_run(engine, fake_openai, "parent", "gpt-4o-mini", 3)
    before = cost(engine, "--by", "model")
    made = engine.run(
        "fork",
        "parent",
        "--at-step",
        "3",
        "--run-id",
        "child",
        "--db",
        str(engine.db),
        "--no-start",
    )
    assert made.returncode == 0, made.stderr
    # The copies carry the parent's usage (the child's budget starts from it), yet cost no more.
    assert engine.status("child")["budget"]["cost_usd"]["used"] > 0
    assert cost(engine, "--by", "model") == before
    assert [r["run"] for r in cost(engine, "--by", "run")] == ["parent"]


def test_days_are_local_and_windows_cut_by_when_a_step_finished(
    engine: Engine, fake_openai: FakeOpenAI
) -> None:
    chat_run(engine, fake_openai, "today", "gpt-4o-mini", 2)
    finished = [f for (f,) in engine.query("SELECT finished_at FROM step ORDER BY seq")]
    for zone in ("Asia/Kolkata", "America/St_Johns", "UTC"):  # +5:30, -3:30 / -2:30, 0
        days = cost(engine, "--by", "day", env={"TZ": zone})
        expected = {datetime.fromtimestamp(f, ZoneInfo(zone)).date().isoformat() for f in finished}
        assert {r["day"] for r in days} == expected
    assert cost(engine, "--since", "1h") == cost(engine)
    assert cost(engine, "--since", "2999-01-01") == []
    assert cost(engine, "--until", "2000-01-01T00:00Z") == []
    empty = engine.run("cost", "--db", str(engine.db), "--since", "2999-01-01")
    assert empty.stdout.strip() == "no spending recorded in this window"


def test_runs_without_the_tag_are_grouped_apart(engine: Engine) -> None:
    assert (
        engine.run("run", f"{AGENTS}:noop", "--param", "n=2", "--db", str(engine.db)).returncode
        == 0
    )
    assert [r["tag"] for r in cost(engine, "--by", "tag:team")] == ["(no tag)"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", "colour"], "--by 'colour' is not a grouping; use one of model, agent"),
        (["--by", "tag:"], "--by 'tag:' is not a grouping"),
        (["--since", "yesterday"], "--since 'yesterday' is not a time; give an ISO 8601"),
        (["--until", "3 fortnights"], "--until '3 fortnights' is not a time"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(engine: Engine, args: list[str], message: str) -> None:
    assert (
        engine.run("run", f"{AGENTS}:noop", "--param", "n=2", "--db", str(engine.db)).returncode
        == 0
    )
    before = engine.db.read_bytes()
    done = engine.run("cost", "--db", str(engine.db), *args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"steplog: {message}") and done.stderr.count("\n") == 1
    assert engine.db.read_bytes() == before
