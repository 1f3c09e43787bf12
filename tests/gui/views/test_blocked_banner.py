"""A blocked run in the monitor (``docs/versions.md``): the refusal's own line, and a fork from
the step before the divergence on the current code; both the live fold and the bulk load know
it, and a compatible resume clears it."""

from __future__ import annotations

from pathlib import Path

import pytest

import steplog
from steplog.log.reader import LogRepository
from steplog_gui.model.bulk_load import load_run
from steplog_gui.model.run_state import LogState
from steplog_gui.views.run_control import BlockedBanner


def greet(run: steplog.Run, *, word: str) -> None:
    run.step("first", str.upper, "a")
    run.step("greet", str.upper, word)
    raise KeyboardInterrupt  # killed before the end: the run stays in progress


def blocked_run(db: Path) -> None:
    old = steplog.agent(version="1")(lambda run: greet(run, word="hello"))
    new = steplog.agent(version="2")(lambda run: greet(run, word="bonjour"))
    with pytest.raises(KeyboardInterrupt):
        old.run("b", db=db)
    with pytest.raises(steplog.Blocked):
        new.run("b", db=db)


def test_a_blocked_run_shows_its_refusal_and_offers_a_fork_before_the_divergence(
    qtbot,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    db = tmp_path / "log.db"
    blocked_run(db)
    repo = LogRepository(db)
    try:
        live = LogState()
        live.apply(repo.events_since(0, limit=100_000))
        bulk = load_run(repo, "b", live.bookmark)
    finally:
        repo.close()
    run = live.runs["b"]
    assert run.blocked is not None and bulk.blocked == run.blocked
    line, at = run.blocked
    assert at == 2 and line.startswith("step 2: recorded `greet(…)` under version 1")

    banner = BlockedBanner()
    qtbot.addWidget(banner)
    banner.show_run(run)
    assert not banner.isHidden() and banner.text.text() == line
    assert banner.fork.text() == "Fork from step 1 on the current code"
    with qtbot.waitSignal(banner.fork_at) as asked:
        banner.fork.click()
    assert asked.args == [2]

    run.blocked = None  # what a later lease_acquired does (a compatible resume)
    banner.show_run(run)
    assert banner.isHidden()
