"""Budgets: every one ends the run in ``gave_up`` (exit 3) with its name, used and limit,
never past the limit for tokens and cost, across kills too; raising one resumes the run."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

import steplog
from helpers.engine import Engine, kill_group
from helpers.logs import log_bytes
from helpers.openai_server import FakeOpenAI
from helpers.paths import AGENTS

pytestmark = pytest.mark.backends("sqlite", "postgres")


def test_steps_budget(engine: Engine) -> None:
    done = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "s", "--db", str(engine.db), "--max-steps", "10"
    )
    assert done.returncode == 3
    assert "budget exhausted: steps used 10 of 10" in done.stdout
    status = engine.status("s")
    assert (status["status"], status["steps_committed"]) == ("gave_up", 10)
    assert status["reason"].startswith("budget exhausted: steps")


def test_retries_budget_flaky_gives_up_gracefully(engine: Engine) -> None:
    done = engine.run("run", "flaky", "--run-id", "f", "--db", str(engine.db))
    assert done.returncode == 3, done.stderr
    status = engine.status("f")
    assert status["status"] == "gave_up"
    assert status["reason"] == "budget exhausted: retries used 5 of 5"
    assert status["budget"]["retries"] == {"used": 5, "limit": 5}
    # The first attempt and five retries ran; the committed "prepare" step ran once.
    assert status["step_executions"] == 1 + 6


def test_seconds_budget_counts_active_time_within_one_step(engine: Engine, tmp_path: Path) -> None:
    done = engine.run(
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "t",
        "--db",
        str(engine.db),
        "--param",
        "n=100",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "pause=0.05",
        "--max-seconds",
        "0.5",
    )
    assert done.returncode == 3
    status = engine.status("t")
    assert status["reason"].startswith("budget exhausted: seconds")
    used = status["budget"]["seconds"]["used"]
    longest = engine.query("SELECT max(finished_at - started_at) FROM step")[0][0]
    assert 0.5 <= used <= 0.5 + longest + 0.1  # checked before every step: at most one step past


def test_tokens_budget_is_never_overspent_even_across_kills(engine: Engine, tmp_path: Path) -> None:
    args = [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "tok",
        "--db",
        str(engine.db),
        "--param",
        "n=400",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "pause=0.01",
        "--max-tokens",
        "2000",
    ]
    rng = random.Random(7)
    kills = 0
    while kills < 6:
        proc = engine.start(*args)
        try:
            proc.wait(timeout=rng.uniform(0.2, 0.5))
            break
        except subprocess.TimeoutExpired:
            kill_group(proc)
            kills += 1
    final = engine.run(*args)
    assert final.returncode == 3, final.stderr
    status = engine.status("tok")
    assert status["status"] == "gave_up"
    assert status["reason"].startswith("budget exhausted: tokens")
    assert status["budget"]["tokens"]["used"] <= 2000


def test_cost_budget_with_a_priced_model(engine: Engine) -> None:
    with FakeOpenAI() as fake:
        done = engine.run(
            "run",
            f"{AGENTS}:chatty",
            "--run-id",
            "c",
            "--db",
            str(engine.db),
            "--param",
            "n=50",
            "--model",
            "gpt-4o",
            "--base-url",
            fake.base_url,
            "--max-cost",
            "0.003",
            env={"OPENAI_API_KEY": "sk-test-not-a-real-key-000000"},
        )
        calls = fake.call_count
    assert done.returncode == 3, done.stderr
    status = engine.status("c")
    assert status["reason"].startswith("budget exhausted: cost_usd")
    assert 0 < status["budget"]["cost_usd"]["used"] <= 0.003
    assert calls == status["steps_committed"] < 50  # stopped before the call that could overspend
    assert status["budget"]["tokens"]["estimated"] == 0  # real usage from the provider


def test_poison_pill_fails_the_run_after_max_recoveries(engine: Engine) -> None:
    args = ["run", f"{AGENTS}:suicidal", "--run-id", "p", "--db", str(engine.db)]
    codes = [engine.run(*args).returncode for _ in range(3)]
    assert codes == [-9, -9, -9]  # the engine killed itself inside "deadly" each time
    last = engine.run(*args)
    assert last.returncode == 4
    assert "poison pill: 3 engines died inside step 2 'deadly'" in last.stdout
    assert engine.status("p")["status"] == "failed"


def test_a_terminal_run_is_reported_and_nothing_written(engine: Engine) -> None:
    args = ["run", f"{AGENTS}:noop", "--run-id", "s", "--db", str(engine.db), "--max-steps", "10"]
    assert engine.run(*args).returncode == 3
    before = log_bytes(engine.db), engine.query("SELECT count(*) FROM event")
    again = engine.run("run", f"{AGENTS}:noop", "--run-id", "s", "--db", str(engine.db))
    assert again.returncode == 3
    assert "gave up: budget exhausted: steps used 10 of 10" in again.stdout
    assert engine.query("SELECT count(*) FROM event") == before[1]


def test_raising_the_budget_resumes_a_run_that_gave_up(engine: Engine) -> None:
    assert (
        engine.run(
            "run", f"{AGENTS}:noop", "--run-id", "s", "--db", str(engine.db), "--max-steps", "10"
        ).returncode
        == 3
    )
    more = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "s", "--db", str(engine.db), "--max-steps", "500"
    )
    assert more.returncode == 0, more.stderr
    status = engine.status("s")
    assert (status["status"], status["steps_committed"], status["step_executions"]) == (
        "succeeded",
        100,
        100,
    )
    assert status["budget"]["steps"]["limit"] == 500
    assert engine.query("SELECT count(*) FROM event WHERE kind = 'budget_changed'") == [(1,)]


@pytest.mark.parametrize(
    "option", ["--max-steps=0", "--max-tokens=-5", "--max-seconds=0", "--max-cost=-1"]
)
def test_zero_or_negative_budgets_are_bad_input(engine: Engine, option: str) -> None:
    done = engine.run("run", "flaky", "--db", str(engine.db), option)
    assert done.returncode == 2
    assert "must be positive" in done.stderr and done.stderr.count("\n") == 1
    assert not engine.db.exists()


HUGE = str(10**23)  # beyond SQLite's 64-bit INTEGER


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-seconds", "nan", "must be a finite number"),
        ("--max-seconds", "inf", "must be a finite number"),
        ("--max-cost", "nan", "must be a finite number"),
        ("--max-cost", "-inf", "must be a finite number"),
        ("--max-tokens", HUGE, "must be at most 9223372036854775807"),
        ("--max-steps", HUGE, "must be at most 9223372036854775807"),
        ("--max-retries", HUGE, "must be at most 9223372036854775807"),
        ("--lease-seconds", "nan", "--lease-seconds must be a finite number"),
        ("--lease-seconds", "inf", "--lease-seconds must be a finite number"),
        ("--lease-seconds", "0", "--lease-seconds must be more than 0"),
        ("--lease-seconds", "1e9", "--lease-seconds must be at most 86400"),
        ("--pace", "nan", "--pace must be a finite number"),
        ("--pace", "inf", "--pace must be a finite number"),
        ("--pace", "1e12", "--pace must be at most 3600"),
    ],
)
def test_limits_and_options_must_be_finite_and_in_range(
    engine: Engine, option: str, value: str, message: str
) -> None:
    """A NaN budget used to vanish (SQLite stores NaN as NULL: no limit), a NaN lease never
    expired, a NaN pace failed the run for good, and a 10**23 limit overflowed after the log was
    created. Each is bad input now: exit 2, one line, nothing written."""
    done = engine.run("run", "flaky", "--db", str(engine.db), f"{option}={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not engine.db.exists()


@pytest.mark.parametrize(
    "limits",
    [
        {"max_seconds": float("nan")},
        {"max_cost_usd": float("inf")},
        {"max_tokens": 10**23},
        {"max_steps": 2.5},
        {"max_retries": 2**63},
        {"max_recoveries": float("nan")},
    ],
)
def test_budget_values_must_be_finite_and_in_range(limits: dict[str, Any]) -> None:
    with pytest.raises(steplog.UsageError, match="budget max_"):
        steplog.Budget(**limits)


@pytest.mark.parametrize("pace", [float("nan"), float("inf"), -1.0])
def test_run_options_from_python_are_checked_before_the_log_is_created(
    db: Path, pace: float
) -> None:
    @steplog.agent
    def quick(run: steplog.Run) -> int:
        return run.step("one", int, 1)

    with pytest.raises(steplog.UsageError, match="--pace must be"):
        quick.run("r", db=db, pace=pace)
    assert not db.exists()


def test_a_step_still_running_when_the_seconds_run_out_is_ended_and_redone_when_the_limit_is_raised(
    engine: Engine, tmp_path: Path
) -> None:
    """Checked only between steps, a 3 s step under a 1 s budget ran to 3 s. The engine now ends
    it at the limit (the run gives up, exit 3) and runs it again once the limit is raised."""
    args = [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "slow",
        "--db",
        str(engine.db),
        "--param",
        "n=1",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "pause=3",
    ]
    done = engine.run(*args, "--max-seconds", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "a step was still running at the limit" in done.stdout
    status = engine.status("slow")
    # Ended at the limit, before the 3 s step could finish: the engine's own clock says so, and
    # the step never committed (no wall-clock bound here: under load start-up alone takes seconds).
    assert status["status"] == "gave_up" and 1.0 <= status["budget"]["seconds"]["used"] < 3.0, (
        status
    )
    assert status["steps_committed"] == 0, status
    again = engine.run(*args, "--max-seconds", "30")
    assert again.returncode == 0, again.stderr
    status = engine.status("slow")
    assert (
        status["status"] == "succeeded"
        and status["step_executions"] - status["steps_committed"] == 1
    )
