"""``steplog demo`` starts in stages (issue 29): the outbox and the engine before Qt, the window
painted without pyqtgraph, then the timeline, which draws the first step. Untimed: the order and
the outcome are what is tested; the times are ``tests/benchmarks/demo_startup.py``'s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.engine import Engine


def read_trace(path: Path) -> dict[str, float]:
    marks: dict[str, float] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            stamp, _, name = line.partition(" ")
            marks.setdefault(name, float(stamp))
    return marks


def test_the_demo_paints_its_window_before_pyqtgraph_then_draws_its_first_step(
    engine: Engine, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    env = {
        **engine.env,
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": os.environ.get("PATH", ""),
        "STEPLOG_TRACE_STARTUP": str(trace),
    }
    app = subprocess.Popen(
        [sys.executable, "-m", "steplog", "demo", "--db", str(engine.db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "first_step_drawn" not in read_trace(trace):
            assert app.poll() is None, app.stderr.read() if app.stderr else ""
            assert time.monotonic() < deadline, f"no step drawn: {read_trace(trace)}"
            time.sleep(0.05)
        marks = read_trace(trace)
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) == 0
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        if app.stderr:
            app.stderr.close()

    assert not [m for m in marks if m.startswith("loaded_at_paint:")], marks
    assert marks["window_painted"] <= marks["views_ready"] <= marks["first_step_drawn"]
    assert marks["outbox_listening"] <= marks["engine_spawned"]
    # The run the timeline drew is the demo's, started by the window's launcher, and it stopped
    # cleanly with the window (SIGTERM: a step boundary, its lease released).
    assert engine.query("SELECT agent, lease_pid FROM run") == [("demo", None)]
    assert engine.events("step_committed") >= 1


def test_a_window_with_deferred_views_shows_first_and_builds_them_when_asked(
    qtbot, engine: Engine, settings
) -> None:  # type: ignore[no-untyped-def]
    from steplog_gui.feeds.monitor import Monitor
    from steplog_gui.main_window import MainWindow

    monitor = Monitor(engine.db)
    window = MainWindow(monitor, settings, defer_views=True)
    window.close_policy = "stop"
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert not window.views_ready and not window.charts_ready
    window.build_views(charts_later=True)
    assert window.views_ready and window.timeline.isVisible()
    qtbot.waitUntil(lambda: window.charts_ready and window.charts.isVisible())
    window.build_views()  # a second call changes nothing
    window.shutdown()
