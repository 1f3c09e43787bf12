"""Effects after a crash: idempotent ones are re-sent with the same key, a non-idempotent one
that may or may not have happened stops the run instead of being sent twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog.runtime.crashpoints import CRASH_EXIT_CODE

pytestmark = pytest.mark.backends("sqlite", "postgres")


def test_an_unconfirmed_non_idempotent_effect_needs_reconciliation(
    engine: Engine, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.txt"
    args = [
        "run",
        f"{AGENTS}:fire_and_forget",
        "--run-id",
        "ff",
        "--db",
        str(engine.db),
        "--param",
        f"outbox_file={sent}",
    ]
    assert (
        engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_started@2"}).returncode
        == CRASH_EXIT_CODE
    )
    resumed = engine.run(*args)
    assert resumed.returncode == 4
    assert "needs reconciliation: effect ff:2" in resumed.stdout
    assert not sent.exists()  # never silently sent


def test_a_confirmed_non_idempotent_effect_is_not_sent_again(
    engine: Engine, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.txt"
    args = [
        "run",
        f"{AGENTS}:fire_and_forget",
        "--run-id",
        "ff",
        "--db",
        str(engine.db),
        "--param",
        f"outbox_file={sent}",
    ]
    assert (
        engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_completed@2"}).returncode
        == CRASH_EXIT_CODE
    )
    assert engine.run(*args).returncode == 0
    assert sent.read_text() == "ff:2\n"


def test_status_tells_a_live_engine_from_a_dead_one(engine: Engine, tmp_path: Path) -> None:
    sent = tmp_path / "sent.txt"
    args = [
        "run",
        f"{AGENTS}:fire_and_forget",
        "--run-id",
        "st",
        "--db",
        str(engine.db),
        "--param",
        f"outbox_file={sent}",
    ]
    assert (
        engine.run(*args, env={"STEPLOG_CRASH_AT": "after_step_record@1"}).returncode
        == CRASH_EXIT_CODE
    )
    status = engine.status("st")
    assert (status["status"], status["engine"]) == ("running", "gone")
    human = engine.run("status", "st", "--db", str(engine.db))
    assert "running (its engine is gone: run the same command to resume)" in human.stdout
    assert engine.run(*args).returncode == 0
    assert engine.status("st")["engine"] == "none"
