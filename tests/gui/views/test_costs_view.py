"""The Costs window (issue 32): what the runs in the log spent, stacked per model or agent over
time, with totals and the most expensive runs. Real engines spend against a fake
OpenAI-compatible server; the real window (offscreen) reads the log as `steplog cost` does."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.spending import spend
from steplog.log.cost import CostReport, CostRow
from steplog_gui.main_window import MainWindow
from steplog_gui.model.costs import MAX_GROUPS, OTHER, stacks


def cli_cost(engine: Engine, by: str) -> list[dict[str, Any]]:
    done = engine.run("cost", "--db", str(engine.db), "--by", by, "--json", "--since", "7d")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def table(view: Any, name: str) -> list[list[str]]:
    t = getattr(view, name)
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def test_the_window_adds_up_as_the_command_does_and_follows_new_spending(
    qtbot: Any, window: MainWindow, engine: Engine, fake_openai: FakeOpenAI
) -> None:
    spend(engine, fake_openai, "big", "gpt-4.1", 2)
    spend(engine, fake_openai, "small", "gpt-4o-mini", 1)
    window.show_costs()
    view = window.costs_view
    qtbot.waitUntil(lambda: view.report is not None, timeout=15_000)

    expected = cli_cost(engine, "model")
    rows = table(view, "totals")
    assert [r[0] for r in rows] == [e["model"] for e in expected] == ["gpt-4.1", "gpt-4o-mini"]
    assert [r[1] for r in rows] == [f"{e['tokens']:,}" for e in expected]
    assert sum(float(r[3].rstrip("%")) for r in rows) == 100
    assert [r[0] for r in table(view, "runs")] == ["big", "small"]
    # The chart: one stack per model in today's bar, the priciest at the bottom, heights in $.
    drawn = view.drawn
    assert drawn is not None and drawn.groups == ["gpt-4.1", "gpt-4o-mini"]
    assert np.allclose(drawn.height.sum(axis=1), [e["cost_usd"] for e in expected])
    assert len(view.bars) == 2

    # New spending elsewhere while the window is open shows without a click.
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        spend(engine, fake_openai, "later", "gpt-4o-mini", 3)
    qtbot.waitUntil(
        lambda: (
            [r[0] for r in table(view, "runs")][:1] == ["big"]
            and "later" in [r[0] for r in table(view, "runs")]
        ),
        timeout=20_000,
    )

    view.group_box.setCurrentIndex(1)  # Agent
    qtbot.waitUntil(lambda: view.report is not None and view.report.by == "agent", timeout=15_000)
    assert [r[4] for r in table(view, "totals")] == ["3"]  # one agent, three runs

    view.measure_box.setCurrentText("Tokens")
    assert view.drawn is not None
    assert view.drawn.height.sum() == sum(e["tokens"] for e in cli_cost(engine, "agent"))

    # Double-clicking a run shows it in the main window.
    view.runs.cellDoubleClicked.emit(0, 0)
    qtbot.waitUntil(lambda: window._run_id == view.runs.item(0, 0).text(), timeout=5_000)


def report(keys: list[tuple[str, float]]) -> CostReport:
    totals = [CostRow(k, tokens=int(c * 1000), cost_usd=c) for k, c in keys]
    series = [(0.0, k, int(c * 1000), c) for k, c in keys] + [(86_400.0, keys[0][0], 5, 0.5)]
    return CostReport("model", "day", totals, series, [])


def test_past_seven_groups_the_cheapest_are_drawn_as_one_other_stack() -> None:
    keys = [(f"m{i}", 10.0 - i) for i in range(10)]
    drawn = stacks(report(keys))
    assert len(drawn.groups) == MAX_GROUPS and drawn.groups[-1] == OTHER
    assert drawn.groups[:-1] == [f"m{i}" for i in range(MAX_GROUPS - 1)]
    assert drawn.height[-1][0] == sum(c for _k, c in keys[MAX_GROUPS - 1 :])
    # Stacked: each group starts where the one below ends, bucket by bucket.
    assert np.allclose(drawn.base[1:], np.cumsum(drawn.height, axis=0)[:-1])
    assert list(drawn.starts) == [0.0, 86_400.0] and drawn.width == 86_400.0
