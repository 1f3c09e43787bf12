"""A sleeping run on the timeline (issue 33): a dotted line at its wake-up time, labelled with
it, and the sleep step's hover says when it wakes. A real engine sleeps (and lets the run go, as
a worker's does); the real window (offscreen) draws it."""

from __future__ import annotations

import time
from typing import Any

from helpers.engine import Engine
from helpers.gui import shown
from helpers.paths import TIME_AGENTS
from steplog_gui.main_window import MainWindow
from steplog_gui.model.timeline_data import describe, wake_label


def test_a_sleeping_run_shows_its_wake_up_time(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    done = engine.run("run", f"{TIME_AGENTS}:sleeper", "--run-id", "nap", "--param",
                      "seconds=600", "--exit-when-waiting", "--db", str(engine.db))  # fmt: skip
    assert done.returncode == 6, done.stderr
    shown(qtbot, window, "nap")
    qtbot.waitUntil(lambda: window.timeline._wake_line.isVisible(), timeout=20_000)
    run = window.monitor.run("nap")
    assert run is not None and run.sleeping_until is not None
    assert abs(run.sleeping_until - (time.time() + 600)) < 60
    label = window.timeline._wake_label.toPlainText()
    assert label == f"wakes at {wake_label(run.sleeping_until)}"
    sleep = [i for i in range(len(run.executions)) if int(run.executions["seq"][i]) == 2]
    assert sleep and "wakes at" in describe(run, sleep[-1], time.time())
