"""The verdict strip, live, with the window left open while runs are stopped, resumed and killed
elsewhere: it never shows a FAIL it takes back, says "stopped" for a run no engine works on, and
shows the outcome beside the verdict. Real engines, a real outbox, the real window (offscreen)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from steplog.outbox import start_outbox
from steplog_gui.main_window import MainWindow
from steplog_gui.model.run_state import INTERRUPTED, REDONE

POSTER = f"{AGENTS}:poster"


def test_a_run_stopped_resumed_and_killed_under_an_open_window_never_flashes_fail(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[str, str]] = []
    window.judge.verdict_changed.connect(
        lambda v: seen.append((v.label, v.explanation)) if v is not None else None
    )
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        args = [
            "run",
            POSTER,
            "--run-id",
            "live",
            "--db",
            str(engine.db),
            "--outbox",
            ob.url,
            "--param",
            "n=16",
            "--param",
            "pause=0.15",
        ]
        proc = engine.start(*args)
        qtbot.waitUntil(lambda: window.runs_model.row_of("live") >= 0, timeout=20_000)
        window.select_run("live")
        qtbot.waitUntil(lambda: engine.committed("live") >= 5, timeout=30_000)

        os.killpg(proc.pid, signal.SIGTERM)  # Stop engine, from elsewhere
        proc.communicate(timeout=60)
        strip = window.verdict.labels
        qtbot.waitUntil(lambda: strip["verdict"].text() == "stopped", timeout=10_000)
        assert window.verdict.evidence.text().startswith("stopped: no engine works on the run")

        proc = engine.start(*args)  # Resume, from elsewhere
        qtbot.waitUntil(lambda: engine.committed("live") >= 11, timeout=30_000)
        at = kill_group(proc)
        done = engine.run(*args, "--killed-at", str(at))
        assert done.returncode == 0, done.stderr

        qtbot.waitUntil(lambda: strip["verdict"].text() == "PASS", timeout=20_000)
        assert strip["outcome"].text() == "Outcome: succeeded"
        assert strip["kills"].text() == "Kills: 1"
        assert strip["redone"].text() in ("Redone: 0", "Redone: 1")
    assert seen and not [s for s in seen if s[0] == "FAIL"], [s for s in seen if s[0] == "FAIL"]

    run: Any = window.monitor.run("live")
    outcomes = run.executions["outcome"]
    assert int(np.count_nonzero(outcomes == INTERRUPTED)) <= 1  # the step the stop put down, if any
    assert int(np.count_nonzero(outcomes == REDONE)) == run.redone <= 1  # only the kill's
    assert window.judge.verdict.redone_steps == run.redone


def test_a_run_never_killed_reads_not_kill_tested_with_its_outcome_beside(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        done = engine.run(
            "run",
            POSTER,
            "--run-id",
            "f",
            "--db",
            str(engine.db),
            "--outbox",
            ob.url,
            "--param",
            f"fixed_when={tmp_path / 'missing'}",
        )
        assert done.returncode == 4, done.stderr
        qtbot.waitUntil(lambda: window.runs_model.row_of("f") >= 0, timeout=20_000)
        window.select_run("f")
        strip = window.verdict.labels
        qtbot.waitUntil(lambda: strip["verdict"].text() == "not kill-tested", timeout=20_000)
        assert strip["outcome"].text() == "Outcome: failed"
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # and it stays so: no later judgment turns it into FAIL
            qtbot.wait(100)
            assert strip["verdict"].text() == "not kill-tested"
