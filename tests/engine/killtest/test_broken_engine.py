"""A deliberately broken engine (``STEPLOG_TEST_BREAK``) is caught by the verdict, each flaw by
name.

The kill test is only worth something if it fails when the engine is wrong. Each flaw is switched
on for the engines the harness launches, and a sweep of the one crash point that exposes it runs
on the one-ticket demo (7 steps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steplog.killtest.harness import Options, killtest

pytestmark = pytest.mark.slow


def sweep(tmp_path: Path, point: str) -> list[str]:
    report = killtest(
        Options(agent="demo", params={"tickets": "1"}, kills=0, sweep=True, sweep_points=(point,)),
        tmp_path,
    )
    assert report.sweep is not None and report.sweep.cases
    assert not report.passed
    return [str(f) for v in report.verdicts for f in v.duplicates + v.missing + v.different]


def test_recording_an_effect_before_doing_it_loses_effects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_TEST_BREAK", "record_before_act")
    found = sweep(tmp_path, "after_effect_started")
    assert "message for ticket T-1001: never delivered" in found
    assert "replies/T-1001.md: missing (the reference has it)" in found
    assert "digest message: never delivered" in found


def test_idempotency_keys_that_change_between_engines_duplicate_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_TEST_BREAK", "unstable_keys")
    found = sweep(tmp_path, "before_step_record")
    assert any(f.startswith("message for ticket T-1001: delivered 2 times") for f in found), found
    assert any(f.startswith("digest message: delivered 2 times") for f in found), found


def test_the_same_sweep_passes_on_the_real_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPLOG_TEST_BREAK", raising=False)
    report = killtest(
        Options(
            agent="demo",
            params={"tickets": "1"},
            kills=0,
            sweep=True,
            sweep_points=("after_effect_started", "before_step_record"),
        ),
        tmp_path,
    )
    assert report.passed, report.summary()
