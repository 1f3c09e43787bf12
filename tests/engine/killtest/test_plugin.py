"""The ``killtest`` pytest fixture (entry point ``pytest11``), used as a user would on their own
agent."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_my_agent_survives_kills(killtest: Any) -> None:
    """How many planned kills land before a run ends depends on the machine's speed, so the
    storm goes on with a fresh run (another seed) until enough kills have landed; each passes."""
    landed = 0
    for seed in range(6):
        report = killtest("my_agent_pkg.shop:shop", kills=10, seed=seed)
        assert not report.verdict.failing, report.summary()
        assert len(report.verdict.kills) <= 10
        # A storm none of whose kills landed tested nothing, and says so instead of passing.
        assert report.passed == bool(report.verdict.kills), report.summary()
        landed += len(report.verdict.kills)
        if landed >= 10:
            break
    assert landed >= 10


def test_a_careless_agent_is_caught_with_what_it_did_twice(killtest: Any) -> None:
    report = killtest("my_agent_pkg.shop:careless", kills=6, params={"orders": 5})
    assert not report.passed
    found = [str(f) for f in report.verdict.duplicates]
    assert any(f.startswith('message {"order_id":"O-001","total":18}: delivered') for f in found), (
        found
    )
    assert any(f.startswith("ledger.txt: ") for f in found), found
