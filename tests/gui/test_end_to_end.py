"""End to end: the demo started from the GUI, Kill now clicked twice, the verdict strip says
PASS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from helpers.engine import Engine
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.main_window import MainWindow
from steplog_gui.processes.demo import DemoConfig


@pytest.fixture
def window(qtbot, engine: Engine, settings, gui_env: dict[str, str]) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    monitor = Monitor(engine.db)
    win = MainWindow(monitor, settings, engine_env=gui_env)
    win.close_policy = "stop"  # qtbot closes the window before this fixture's teardown: never ask
    qtbot.addWidget(win)
    monitor.start()
    win.show()
    yield win
    win.shutdown(
        stop_engine=True
    )  # SIGTERM/SIGKILL the engine's group, stop the outbox: nothing left over


def test_demo_kill_now_twice_then_pass_with_two_kills_and_no_duplicates(
    qtbot, window: MainWindow
) -> None:  # type: ignore[no-untyped-def]
    demo = window.start_demo(DemoConfig(params={"tickets": "4"}, pace=0.6))
    qtbot.waitUntil(lambda: window.engine.running and demo.run_id is not None, timeout=15_000)
    run_id = demo.run_id
    kill_button = window.findChild(object, "kill_now")
    assert kill_button is not None

    def resumed_after(kills: int) -> bool:
        """The engine after ``kills`` kills has taken over and committed a step."""
        run = window.monitor.run(run_id)  # type: ignore[arg-type]
        return (
            run is not None
            and run.steps_committed >= 2
            and len(run.kills) == kills
            and (not kills or run.kills[-1].first_commit is not None)
        )

    for kill in (1, 2):
        qtbot.waitUntil(lambda kill=kill: resumed_after(kill - 1), timeout=20_000)
        assert not window.monitor.run(run_id).terminal, (
            "the run finished before the kills; slow the demo down"
        )  # type: ignore[union-attr]
        qtbot.mouseClick(kill_button, Qt.MouseButton.LeftButton)
        assert window.engine.kills == kill
    qtbot.waitUntil(lambda: window.monitor.run(run_id).terminal, timeout=60_000)  # type: ignore[union-attr]
    strip = window.verdict.labels
    qtbot.waitUntil(
        lambda: strip["verdict"].text() == "PASS" and strip["duplicates"].text() == "Duplicates: 0",
        timeout=10_000,
    )
    assert strip["kills"].text() == "Kills: 2"
    run = window.monitor.run(run_id)
    assert run is not None and run.status == "succeeded" and run.incarnation == 3
    assert all(k.exact and k.latency is not None for k in run.kills)
    assert "ms" in strip["latency"].text()
    print(
        "\n"
        f"resume latencies: {[round(k.latency * 1000) for k in run.kills]} ms; redone {run.redone}"
    )
    window.grab().save(str(Path(window.monitor.path).parent / "after.png"))


def test_a_run_without_kills_reads_running_then_not_kill_tested(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    demo = window.start_demo(DemoConfig(params={"tickets": "2"}, pace=0.4))
    qtbot.waitUntil(
        lambda: (
            demo.run_id is not None
            and window.judge.verdict is not None
            and window.judge.verdict.passed is None
            and window.engine.running
        ),
        timeout=15_000,
    )
    assert window.verdict.labels["verdict"].text() == "running…"
    assert window.verdict.labels["kills"].text() == "Kills: 0"
    # Nothing went wrong, but nothing was tested either: not a PASS.
    qtbot.waitUntil(
        lambda: window.verdict.labels["verdict"].text() == "not kill-tested", timeout=30_000
    )
    assert (
        window.verdict.evidence.text() == "not kill-tested: the run succeeded without being killed"
    )
    assert window.verdict.labels["redone"].text() == "Redone: 0"
