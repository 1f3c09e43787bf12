"""One owner of killing the monitor's engines (``processes.kill_switch.KillSwitch``): the main
window and compare mode kill through it, with the one Kill now button and auto-kill controls
``views.kill_controls`` builds; every kill it counts is a kill the log records."""

from __future__ import annotations

from PySide6.QtWidgets import QToolButton

from steplog_gui.compare.window import CompareWindow
from steplog_gui.main_window import MainWindow
from steplog_gui.processes.demo import DemoConfig
from steplog_gui.processes.kill_switch import KillSwitch
from steplog_gui.views.kill_controls import KILL_NOW_SHORTCUT, KILL_NOW_STYLE


def test_both_windows_kill_through_a_switch_with_the_same_red_button(  # type: ignore[no-untyped-def]
    qtbot,
    window: MainWindow,  # noqa: F811 (the fixture imported above)
) -> None:
    compare = CompareWindow(window.monitor, window.demo_launcher())  # not started: no engines
    qtbot.addWidget(compare)
    try:
        assert isinstance(window.kill_switch, KillSwitch)
        assert window.kill_switch.engines == (window.engine,)
        assert compare.runs.switch.engines == (compare.runs.durable, compare.runs.naive)
        for win, name, action in (
            (window, "kill_now", window.act_kill),
            (compare, "compare_kill_now", compare.act_kill),
        ):
            button = win.findChild(QToolButton, name)
            assert button is not None and button.defaultAction() is action
            assert button.styleSheet() == KILL_NOW_STYLE
            assert action.shortcut().toString() == KILL_NOW_SHORTCUT
        assert compare.runs.kill_both() == 0 and compare.runs.kills == 0  # nothing runs: no kill
    finally:
        compare.shutdown()


def test_auto_kill_in_the_main_window_kills_only_an_engine_at_work_until_its_run_is_done(  # type: ignore[no-untyped-def]
    qtbot,
    window: MainWindow,  # noqa: F811 (the fixture imported above)
) -> None:
    demo = window.start_demo(DemoConfig(params={"tickets": "4"}, pace=0.4))
    qtbot.waitUntil(lambda: window.engine.running and demo.run_id is not None, timeout=20_000)
    run_id = demo.run_id
    assert run_id is not None
    window.auto_seconds.setValue(2.0)
    window.auto_kill.setChecked(True)
    assert window.kill_switch.auto_kill_seconds == 2.0

    # Each kill comes after 2 s of work, counted from the relaunched engine's takeover: the
    # run gets on however slowly this machine starts engines.
    qtbot.waitUntil(
        lambda: (r := window.monitor.run(run_id)) is not None and r.terminal, timeout=180_000
    )
    qtbot.waitUntil(lambda: not window.auto_kill.isChecked(), timeout=10_000)  # done: it stopped
    run = window.monitor.run(run_id)
    assert run is not None and run.status == "succeeded"
    # Each kill was of an engine holding the lease: the log records every one the switch made.
    assert len(run.kills) == window.kill_switch.kills == window.engine.kills >= 1
    assert all(k.exact for k in run.kills)  # dated by the switch's own clock (--killed-at)
