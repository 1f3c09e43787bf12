"""The real application process: `python -m steplog_gui --demo`, started and stopped like a user
would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from helpers.engine import Engine


def processes_using(path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            text = (
                " ".join(proc.info["cmdline"] or [])
                + " "
                + str((proc.info["environ"] or {}).get("STEPLOG_DB", ""))
            )
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(path) in text and proc.pid != os.getpid():
            found.append(proc)
    return found


def test_the_demo_app_starts_the_run_and_sigterm_leaves_nothing_running(
    engine: Engine, tmp_path: Path
) -> None:
    env = {
        **engine.env,
        "STEPLOG_DB": str(engine.db),
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": os.environ.get("PATH", ""),
    }
    app = subprocess.Popen(
        [sys.executable, "-m", "steplog_gui", "--demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while engine.events("step_committed") < 3:  # the demo runs, started by the window
            assert app.poll() is None, app.stderr.read() if app.stderr else ""
            assert time.monotonic() < deadline, "the demo did not start"
            time.sleep(0.05)
        assert (
            len(processes_using(engine.db.parent)) >= 2
        )  # the engine and the outbox beside the app
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while processes_using(engine.db.parent):
            assert time.monotonic() < deadline, [
                p.info["cmdline"] for p in processes_using(engine.db.parent)
            ]
            time.sleep(0.05)
        assert engine.query("SELECT lease_pid FROM run") == [(None,)]  # the engine stopped cleanly
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        for proc in processes_using(engine.db.parent):
            proc.kill()
        for pipe in (app.stdout, app.stderr):
            if pipe:
                pipe.close()


def test_the_compare_app_runs_both_agents_and_sigterm_stops_both_and_the_outbox(
    engine: Engine, tmp_path: Path
) -> None:
    env = {
        **engine.env,
        "STEPLOG_DB": str(engine.db),
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": os.environ.get("PATH", ""),
    }
    app = subprocess.Popen(
        [sys.executable, "-m", "steplog", "demo", "--compare"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while engine.events("lease_acquired") < 2 or engine.events("step_committed") < 1:
            assert app.poll() is None, app.stderr.read() if app.stderr else ""
            assert time.monotonic() < deadline, "the comparison did not start"
            time.sleep(0.05)
        agents = sorted(a for (a,) in engine.query("SELECT agent FROM run"))
        assert agents == ["demo", "naive"]
        assert (
            len(processes_using(engine.db.parent)) >= 3
        )  # two engines and the outbox beside the app
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while processes_using(engine.db.parent):
            assert time.monotonic() < deadline, [
                p.info["cmdline"] for p in processes_using(engine.db.parent)
            ]
            time.sleep(0.05)
        assert engine.query("SELECT lease_pid FROM run") == [
            (None,),
            (None,),
        ]  # both engines stopped cleanly
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        for proc in processes_using(engine.db.parent):
            proc.kill()
        for pipe in (app.stdout, app.stderr):
            if pipe:
                pipe.close()
