"""The demo as a person repeats it: two demos in one data directory, a run started elsewhere while
the window is open, a stopped demo resumed later, the app started from an awkward folder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from helpers.engine import Engine
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.main_window import MainWindow
from steplog_gui.processes.demo import DemoConfig

pytestmark = pytest.mark.slow
CONFIG = DemoConfig(params={"tickets": "4"}, pace=0.6)


def steplog_cli(engine: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    return engine.run(*args)


def demo_with_a_kill(qtbot, window: MainWindow) -> str:  # type: ignore[no-untyped-def]
    """Start a demo, click Kill now once mid-run, wait for the end; returns the run id."""
    demo = window.start_demo(CONFIG)
    qtbot.waitUntil(
        lambda: window.engine.running and demo.run_id is not None and window._run_id == demo.run_id,
        timeout=15_000,
    )
    run_id = demo.run_id
    assert run_id is not None
    qtbot.waitUntil(
        lambda: (r := window.monitor.run(run_id)) is not None and r.steps_committed >= 3,
        timeout=20_000,
    )
    qtbot.mouseClick(window.findChild(object, "kill_now"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: window.monitor.run(run_id).terminal and not window.engine.running,  # type: ignore[union-attr]
        timeout=60_000,
    )
    return run_id


def test_two_demos_in_one_data_directory_each_killed_both_pass_live_and_from_the_command_line(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    first = demo_with_a_kill(qtbot, window)
    qtbot.waitUntil(lambda: window.verdict.labels["verdict"].text() == "PASS", timeout=10_000)
    second = demo_with_a_kill(qtbot, window)
    assert second != first
    qtbot.waitUntil(lambda: window.verdict.labels["verdict"].text() == "PASS", timeout=10_000)
    assert (
        window.verdict.labels["duplicates"].text() == "Duplicates: 0"
    )  # the first demo's messages are not ours
    assert window.verdict.labels["kills"].text() == "Kills: 1"
    live_latency = window.verdict.labels["latency"].text()

    # steplog verdict agrees with the strip, with the outbox running and after it is gone.
    for phase in ("outbox running", "outbox stopped"):
        for run_id in (first, second):
            done = steplog_cli(engine, "verdict", run_id, "--db", str(engine.db), "--json")
            assert done.returncode == 0, done.stderr
            v = json.loads(done.stdout)
            assert (v["verdict"], v["kills"], v["duplicates"], v["missing"]) == ("PASS", 1, 0, 0), (
                phase,
                v,
            )
            assert all(c["passed"] for c in v["checks"]), (phase, v["checks"])
        if phase == "outbox running":
            assert window.demo is not None
            window.demo.stop_outbox()  # next: the ledger comes from the outbox file beside the log
    assert f"{json.loads(done.stdout)['resume_latency']['max'] * 1000:.0f} ms" in live_latency
    assert "outbox file" in json.loads(done.stdout)["checks"][2]["source"]

    # Reopened (a fresh monitor on the same log): the same kills, dated and measured as live.
    reopened = Monitor(engine.db)
    reopened.start()
    try:
        qtbot.waitUntil(
            lambda: (r := reopened.run(second)) is not None and r.terminal, timeout=10_000
        )
        live_kills, again = window.monitor.run(second).kills, reopened.run(second).kills  # type: ignore[union-attr]
        assert [(k.ts, k.latency, k.exact) for k in again] == [
            (k.ts, k.latency, k.exact) for k in live_kills
        ]
        assert all(k.exact for k in again)  # the killer's own time, read back from the log
    finally:
        reopened.stop()


def test_a_run_started_elsewhere_appears_within_a_second_and_is_not_followed_by_kill_now(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    demo = window.start_demo(CONFIG)
    qtbot.waitUntil(
        lambda: (
            demo.run_id is not None
            and window.monitor.run(demo.run_id) is not None
            and window.monitor.run(demo.run_id).terminal
            and not window.engine.running
        ),
        timeout=60_000,
    )
    assert demo.outbox is not None
    t0 = time.monotonic()
    proc = engine.start(
        "run",
        "demo",
        "--run-id",
        "from-a-terminal",
        "--db",
        str(engine.db),
        "--outbox",
        demo.outbox.url,
        "--param",
        "tickets=2",
        "--pace",
        "0.5",
    )
    try:
        qtbot.waitUntil(lambda: window.runs_model.row_of("from-a-terminal") >= 0, timeout=10_000)
        appeared = time.monotonic() - t0  # includes the engine's own start-up (~0.2 s)
        assert appeared < 1.0 + 0.5, appeared
        # New run from the window: it appears and the view follows it.
        spec_run = "from-the-window"
        from steplog_gui.processes.engine_process import LaunchSpec

        proc.wait(timeout=60)
        qtbot.waitUntil(lambda: not window.engine.running, timeout=10_000)
        window.start_spec(
            LaunchSpec(
                agent="demo", run_id=spec_run, db=engine.db, params={"tickets": "2"}, pace=0.3
            )
        )
        qtbot.waitUntil(lambda: window._run_id == spec_run, timeout=5_000)
        assert window.runs_model.row_of(spec_run) == 0  # newest first
        # Followed from before its first usage point: its charts' time axis still follows it to the
        # end.
        qtbot.waitUntil(
            lambda: (r := window.monitor.run(spec_run)) is not None and r.terminal, timeout=60_000
        )
        steps = window.charts.charts["steps"]

        def chart_fits_the_run() -> bool:
            x, _y = steps.used.getData()
            low, high = steps.widget.getViewBox().viewRange()[0]
            # Its whole time span in view, and not the empty chart's fixed 0..1 it was picked with.
            return (
                x is not None
                and len(x) > 1
                and low <= x[0]
                and x[-1] <= high
                and (low, high) != (0, 1)
            )

        qtbot.waitUntil(chart_fits_the_run, timeout=5_000)
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()


def test_a_stopped_demo_run_resumed_from_the_window_brings_its_outbox_back_and_succeeds(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    demo = window.start_demo(CONFIG)
    qtbot.waitUntil(
        lambda: (
            demo.run_id is not None
            and (r := window.monitor.run(demo.run_id)) is not None
            and r.steps_committed >= 3
        ),
        timeout=20_000,
    )
    run_id = demo.run_id
    window.engine.stop()  # Stop engine: SIGTERM, the run stays resumable
    qtbot.waitUntil(lambda: not window.engine.running, timeout=15_000)
    demo.stop_outbox()  # ...and the outbox is gone too, as after closing the window
    demo._closed = False
    window.select_run(run_id)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: window.act_resume.isEnabled(), timeout=5_000)
    window.resume_selected()
    qtbot.waitUntil(
        lambda: window.monitor.run(run_id).terminal and not window.engine.running,  # type: ignore[arg-type, union-attr]
        timeout=60_000,
    )
    assert window.monitor.run(run_id).status == "succeeded"  # type: ignore[arg-type, union-attr]
    assert not window.banner.isVisible()
    done = steplog_cli(engine, "verdict", run_id, "--db", str(engine.db), "--json")  # type: ignore[arg-type]
    assert json.loads(done.stdout)["duplicates"] == 0


def test_the_engine_and_the_app_start_from_a_folder_that_contains_a_steplog_directory(
    engine: Engine, tmp_path: Path
) -> None:
    """``python -m`` puts the working directory first on the path; a ``steplog/`` folder there
    (the folder a clone sits in) shadowed the installed package: the engine never started."""
    awkward = tmp_path / "parent"
    (awkward / "steplog").mkdir(parents=True)
    (awkward / "steplog" / "README.md").write_text("not the package\n")
    db = tmp_path / "data" / "steplog.db"
    # The monitor's way of starting its children, run from that folder, with only what is installed.
    code = (
        "import os, sys, subprocess; os.chdir(sys.argv[1]);from steplog.control.procs import "
        "child_env, python_argv;gui = subprocess.run(python_argv('steplog_gui', '--help'), "
        "env=child_env(), capture_output=True, text=True);run = "
        "subprocess.run(python_argv('steplog', 'run', 'flaky', '--run-id', 'r', '--db', "
        "sys.argv[2]), env=child_env(), capture_output=True, text=True);print(gui.returncode, "
        "run.returncode); print(gui.stderr + run.stderr, file=sys.stderr)"
    )
    env = {k: v for k, v in engine.env.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(awkward), str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "PYTHONPATH": engine.env["PYTHONPATH"]},
        cwd=awkward,
    )
    assert "Traceback" not in done.stderr, done.stderr
    gui_code, run_code = map(int, done.stdout.split())
    assert gui_code == 0, done.stderr
    assert run_code in (0, 3), done.stderr  # flaky ends by itself (it may give up): it ran
    assert (awkward / "steplog").is_dir() and not (awkward / "steplog" / "steplog.db").exists()


def test_leave_it_running_keeps_the_engine_and_its_outbox_goes_when_the_engine_ends(
    qtbot, engine: Engine, settings, gui_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    monitor = Monitor(engine.db)
    win = MainWindow(monitor, settings, engine_env=gui_env)
    qtbot.addWidget(win)
    monitor.start()
    win.show()
    demo = win.start_demo(DemoConfig(params={"tickets": "3"}, pace=0.5))
    qtbot.waitUntil(
        lambda: win.engine.running and demo.outbox is not None and demo.run_id is not None,
        timeout=20_000,
    )
    outbox, run_id = demo.outbox, demo.run_id
    win.close_policy = "leave"
    win.close()  # "Leave it running"
    assert outbox.alive()  # still serving the engine left behind
    deadline = time.monotonic() + 90
    while outbox.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not outbox.alive(), "the demo outbox outlived the engine it served"
    assert (
        engine.status(run_id)["status"] == "succeeded"
    )  # the engine finished on its own, then the outbox went
