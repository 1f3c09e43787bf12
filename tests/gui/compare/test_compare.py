"""Compare mode: the naive agent and the durable demo side by side, real engines, real SIGKILLs.

One Kill now kills both process groups at the same moment and relaunches both: the durable run
resumes and passes, the naive one starts over from step 1, sends messages twice (counted from its
own part of the outbox's ledger, shown red) and spends more tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from helpers.engine import Engine
from steplog_gui import theme
from steplog_gui.compare.window import CompareWindow
from steplog_gui.main_window import MainWindow
from steplog_gui.processes.demo import DemoConfig


def deliveries(compare: CompareWindow, side: str) -> int:
    ledger = compare.outboxes[side].ledger
    return len(ledger.deliveries) if ledger is not None else 0


def test_one_kill_now_kills_both_naive_fails_with_its_duplicates_durable_passes(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow
) -> None:
    compare = window.open_compare(DemoConfig(params={"tickets": "8"}, pace=0.5))
    assert window.act_compare.isChecked()
    qtbot.waitUntil(
        lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=20_000
    )
    naive_id, durable_id = compare.runs.naive_id, compare.runs.durable_id
    assert naive_id and durable_id
    kill_button = compare.findChild(object, "compare_kill_now")
    assert kill_button is not None

    for kill in (1, 2):
        # Kill once the naive agent has sent two messages in this pass (and the durable one is
        # mid-run).
        sent_before = deliveries(compare, "naive")
        qtbot.waitUntil(
            lambda sent_before=sent_before: deliveries(compare, "naive") >= sent_before + 2,
            timeout=30_000,
        )
        durable = compare.view.run(durable_id)
        assert durable is not None and not durable.terminal, (
            "the durable run finished first: slow the demo down"
        )
        qtbot.mouseClick(kill_button, Qt.MouseButton.LeftButton)
        assert compare.runs.naive.kills == kill and compare.runs.durable.kills == kill
        qtbot.waitUntil(
            lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=10_000
        )

    qtbot.waitUntil(
        lambda: all(
            r is not None and r.terminal
            for r in (compare.view.run(naive_id), compare.view.run(durable_id))
        ),
        timeout=60_000,
    )
    qtbot.waitUntil(
        lambda: (
            compare.strips["naive"].labels["verdict"].text() == "FAIL"
            and compare.strips["durable"].labels["verdict"].text() == "PASS"
        ),
        timeout=15_000,
    )

    # The naive side's duplicates, counted from its own part of the outbox's ledger, are red.
    ledger = compare.outboxes["naive"].ledger
    groups = ledger.duplicates()
    assert groups and all(d.key.startswith(f"{naive_id}:") for d in ledger.deliveries)
    verdict = compare.judges["naive"].verdict
    assert {f.subject for f in verdict.duplicates} == {
        f"message for ticket {g[0].body['ticket_id']}"
        if "ticket_id" in g[0].body
        else "digest message"
        for g in groups
    }
    assert len(red_rows(compare, "naive")) == sum(len(g) - 1 for g in groups)
    assert red_rows(compare, "durable") == []
    assert compare.judges["durable"].verdict.duplicates == []

    # One kill, both engines, at the same moment; the log says so for each run.
    naive, durable = compare.view.run(naive_id), compare.view.run(durable_id)
    assert naive is not None and durable is not None
    assert len(naive.kills) == len(durable.kills) == 2
    assert all(abs(n.ts - d.ts) < 0.05 for n, d in zip(naive.kills, durable.kills, strict=True))
    assert compare.strips["durable"].labels["kills"].text() == "Kills: 2"

    # The naive lane starts over at step 1 after each kill; the durable one resumes where it was.
    ex = naive.executions
    for lane in (2, 3):
        mine = ex["seq"][ex["lane"] == lane]
        assert len(mine) and mine[0] == 1
    assert compare.lanes["naive"].restart_texts() == ["starts over at step 1 ▸"] * 2
    resumed = compare.lanes["durable"].restart_texts()
    assert len(resumed) == 2 and all(
        t.startswith("resumes at step ") and not t.startswith("resumes at step 1 ") for t in resumed
    )

    # The figures side by side: the naive agent redid more, and spent more tokens.
    compare.figures.show_figures(compare_figures(compare))
    n_redone, d_redone = (
        int(compare.figures.value("Steps redone", side)) for side in ("naive", "durable")
    )
    assert n_redone > d_redone and d_redone <= 2
    assert compare.view.result.trace.tokens > int(durable.usage["tokens"])
    assert compare.figures.value("Messages duplicated", "durable") == "0"
    assert compare.figures.value("Messages duplicated", "naive").startswith(f"{len(groups)} (")
    assert (
        compare.figures.value("Kills", "naive") == compare.figures.value("Kills", "durable") == "2"
    )
    tokens = compare.charts.curves[("tokens", "naive")].getData()[1]
    assert tokens[-1] == compare.view.result.trace.tokens

    # The monitor's own outbox panel shows the selected run's deliveries only: the durable run's
    # messages have the naive run's bodies, and are not its duplicates.
    window.select_run(durable_id)
    qtbot.waitUntil(
        lambda: (
            window.watcher.run_id == durable_id
            and window.watcher.ledger is not None
            and window.outbox_panel.deliveries.rowCount()
            == len(compare.outboxes["durable"].ledger.deliveries)
        ),
        timeout=10_000,
    )
    model = window.outbox_panel.deliveries
    assert not any(model.record(row)["duplicate"] for row in range(model.rowCount()))

    compare.close()
    assert (
        not compare.runs.running and not window.act_compare.isChecked() and window.compare is None
    )


def red_rows(compare: CompareWindow, side: str) -> list[str]:
    """Tickets of the outbox panel's delivery rows drawn in the duplicate colour."""
    model = compare.panels[side].deliveries
    out = []
    for row in range(model.rowCount()):
        colour = model.data(model.index(row, 0), Qt.ItemDataRole.ForegroundRole)
        if colour is not None and colour.name() == theme.qcolor(theme.current().duplicate).name():
            out.append(model.record(row)["what"])
    return out


def compare_figures(compare: CompareWindow) -> Any:
    from steplog_gui.compare.figures import figures

    return figures(
        compare.view.result,
        compare.judges["naive"].verdict,
        compare.judges["durable"].verdict,
        compare.outboxes["naive"].ledger,
        compare.outboxes["durable"].ledger,
    )


@pytest.mark.slow  # 29 s in the whole suite (2026-12-07)
def test_auto_kill_kills_both_together_until_the_durable_run_is_done_then_the_naive_one_finishes(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow
) -> None:
    compare = window.open_compare(DemoConfig(params={"tickets": "6"}, pace=0.4))
    qtbot.waitUntil(
        lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=20_000
    )
    naive_id, durable_id = compare.runs.naive_id, compare.runs.durable_id
    compare.auto_seconds.setValue(1.5)
    compare.auto_kill.setChecked(True)
    assert compare.runs.auto_kill_seconds == 1.5

    qtbot.waitUntil(
        lambda: (r := compare.view.run(durable_id)) is not None and r.terminal, timeout=60_000
    )
    qtbot.waitUntil(
        lambda: not compare.auto_kill.isChecked(), timeout=5_000
    )  # the comparison is decided
    qtbot.waitUntil(
        lambda: (r := compare.view.run(naive_id)) is not None and r.terminal, timeout=60_000
    )

    naive, durable = compare.view.run(naive_id), compare.view.run(durable_id)
    assert naive is not None and durable is not None
    assert naive.status == durable.status == "succeeded"
    assert len(durable.kills) >= 1 and len(naive.kills) == len(durable.kills) == compare.runs.kills
    assert all(abs(n.ts - d.ts) < 0.05 for n, d in zip(naive.kills, durable.kills, strict=True))
    ex = naive.executions
    last = ex["seq"][ex["lane"] == naive.incarnation]
    assert last[0] == 1 and len(set(last)) == len(
        durable.step_names
    )  # its last pass did every step, from 1
    # Again: new run ids, the same outbox; the lanes and strips follow the new pair.
    qtbot.waitUntil(compare.act_start.isEnabled, timeout=10_000)  # once both processes are gone
    compare.act_start.trigger()
    qtbot.waitUntil(
        lambda: compare.runs.naive_id not in (None, naive_id) and compare.runs.durable.running,
        timeout=20_000,
    )
    assert compare.view.naive_id == compare.judges["naive"].run_id == compare.runs.naive_id
    assert compare.outboxes["durable"].run_id == compare.runs.durable_id


def test_with_approval_the_durable_agent_asks_once_and_the_naive_one_again_after_a_kill(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, engine: Engine
) -> None:
    compare = window.open_compare(DemoConfig(params={"tickets": "2", "approve": "true"}, pace=0.1))
    qtbot.waitUntil(
        lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=20_000
    )
    naive_id, durable_id = compare.runs.naive_id, compare.runs.durable_id
    assert naive_id and durable_id
    asked = engine.db.parent / "runs" / naive_id / "approval-request.json"

    def both_wait() -> bool:
        durable = compare.view.run(durable_id)
        return (
            durable is not None
            and durable.status == "waiting"
            and asked.exists()
            and len(asked.read_text().splitlines()) == compare.runs.kills + 1
        )

    qtbot.waitUntil(both_wait, timeout=30_000)
    compare.kill_both()  # while both wait for a person
    qtbot.waitUntil(
        lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=10_000
    )
    qtbot.waitUntil(
        both_wait, timeout=30_000
    )  # the naive agent did everything again, and asks again
    compare.act_approve.trigger()
    qtbot.waitUntil(
        lambda: all(
            r is not None and r.terminal
            for r in (compare.view.run(naive_id), compare.view.run(durable_id))
        ),
        timeout=30_000,
    )
    assert engine.status(durable_id)["result"]["digest"] == "approved"
    assert engine.status(naive_id)["result"]["digest"] == "approved"
    assert len(asked.read_text().splitlines()) == 2, "the naive agent asked the person twice"
    assert engine.query(
        "SELECT count(*), count(consumed_seq) FROM signal WHERE run_id = ?", durable_id
    ) == [(1, 1)]
    assert engine.events("waiting") >= 1


def title_tokens(compare: CompareWindow) -> dict[str, int]:
    """ "Tokens spent: naive 11,397 · durable 9,560", the chart's title, as numbers."""
    import re

    text = compare.charts.plots["tokens"].getPlotItem().titleLabel.text
    found = re.search(r"naive ([\d,]+) · durable ([\d,]+)", text)
    assert found is not None, text
    return {
        side: int(found.group(i).replace(",", "")) for i, side in ((1, "naive"), (2, "durable"))
    }


def table_tokens(compare: CompareWindow) -> dict[str, int]:
    return {
        side: int(compare.figures.value("Tokens spent", side).split()[0].replace(",", ""))
        for side in ("naive", "durable")
    }


def test_one_token_total_per_run_in_the_table_and_the_chart_and_colours_that_follow_the_theme(
    qtbot: Any, window: MainWindow, theme_restored: None
) -> None:
    """Mid-step (the durable run's reservation is in its last usage) and after a kill (the naive
    run's cut call is charged at the kill by its chart, at its next process by its trace), the
    figures table and the Tokens spent chart showed two totals for one run: both now read it
    from one place. Then the theme goes dark: every figure is in the dark theme's text colour
    (they kept the light theme's near-black), the naive run's failures in its red."""
    window.set_theme("light")
    # Ten tickets: the kill below must land mid-run even when a loaded machine delays the
    # monitor's view of the third commit by seconds (with four, CI saw both runs finished first).
    compare = window.open_compare(DemoConfig(params={"tickets": "10"}, pace=0.5))
    qtbot.waitUntil(
        lambda: compare.runs.naive.running and compare.runs.durable.running, timeout=20_000
    )
    naive_id, durable_id = compare.runs.naive_id, compare.runs.durable_id
    seen: list[tuple[dict[str, int], dict[str, int]]] = []

    def look() -> None:
        """Both faces brought up to date at one moment, then read."""
        compare._show_figures()
        compare.charts.refresh()
        seen.append((table_tokens(compare), title_tokens(compare)))

    def finished() -> bool:
        runs = (compare.view.run(naive_id), compare.view.run(durable_id))
        return all(r is not None and r.terminal for r in runs)

    qtbot.waitUntil(
        lambda: (r := compare.view.run(durable_id)) is not None and r.steps_committed >= 3,
        timeout=30_000,
    )
    for _ in range(10):
        look()
        qtbot.wait(70)
    assert compare.runs.kill_both(), "both engines were still running"
    while not finished():
        look()
        qtbot.wait(70)
        assert len(seen) < 1000, "the comparison did not finish"
    qtbot.wait(300)
    look()
    differ = [(table, title) for table, title in seen if table != title]
    assert not differ, f"{len(differ)} of {len(seen)} looks: table != title, e.g. {differ[:3]}"
    assert seen[-1][0]["naive"] > 0 and seen[-1][0]["durable"] > 0

    window.set_theme("dark")
    qtbot.wait(100)
    text = QApplication.palette().color(QPalette.ColorRole.WindowText)
    assert text.lightness() > 128
    red = theme.qcolor(theme.current().duplicate).name()
    for (name, side), cell in compare.figures.cells.items():
        shown_in = cell.palette().color(QPalette.ColorRole.WindowText).name()
        bad = side == "naive" and next(f for f in compare.figures._rows if f.name == name).naive_bad
        assert shown_in == (red if bad else text.name()), f"{name} ({side}) is drawn in {shown_in}"
    strip = compare.strips["durable"].labels
    duplicates = strip["duplicates"]
    qtbot.waitUntil(
        lambda: duplicates.palette().color(QPalette.ColorRole.WindowText) == text, timeout=2_000
    )
