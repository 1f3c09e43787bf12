"""The window's layout at 1280x720, 1920x1080 and 2560x1440: on a first launch every dock and
chart fits and shows what matters; closed and opened again, it comes back exactly as it was.

Each size runs in its own process (``helpers/layout_probe.py``) with an offscreen screen of that
size: a saved geometry is restored against the screen it finds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import layout_probe
from helpers.engine import Engine
from helpers.layout_probe import screen_env

PROBE = Path(layout_probe.__file__)
RUN_ID = "demo-20261201-120000"


@pytest.fixture
def stopped_demo(engine: Engine) -> Engine:
    """A demo run as a person leaves one: a demo-sized run id, budgets with limits, killed once
    (crash points), resumed, stopped mid-run (its charts project the limits), its messages in
    the demo outbox's file beside the log (the strip shows them)."""
    from steplog.outbox import start_outbox
    from steplog.verdict.evidence import outbox_file_for

    engine.db.parent.mkdir(parents=True, exist_ok=True)
    outbox = start_outbox(outbox_file_for(engine.db))
    try:
        args = [
            "run",
            "demo",
            "--run-id",
            RUN_ID,
            "--db",
            str(engine.db),
            "--outbox",
            outbox.url,
            "--param",
            "tickets=4",
        ]
        for crash in ("before_step_record@5", "before_step_record@11"):
            done = engine.run(*args, env={"STEPLOG_CRASH_AT": crash})
            assert done.returncode == 86, done.stderr
    finally:
        outbox.stop()
    return engine


@pytest.mark.parametrize("width, height", [(1280, 720), (1920, 1080), (2560, 1440)])
def test_docks_and_charts_fit_and_are_restored_exactly(
    stopped_demo: Engine, tmp_path: Path, width: int, height: int
) -> None:
    platform = screen_env(width, height, tmp_path)["QT_QPA_PLATFORM"]
    done = subprocess.run(
        [sys.executable, str(PROBE), str(stopped_demo.db), str(width), str(height)],
        env={**stopped_demo.env, "QT_QPA_PLATFORM": platform},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    first = report["first"]
    assert first["window"] == [width, height]
    assert report["restored"] == first  # geometry, docks, columns, charts: exactly as left

    runs = first["runs"]
    assert runs["key columns"] <= runs["view"], (
        "the runs list must show Run, Status and Steps whole"
    )
    docks = first["docks"]
    assert docks["dock_runs"][0] <= 0.25 * width
    assert docks["dock_detail"][0] >= 300 and docks["dock_outbox"][1] >= 150
    for name, chart in first["charts"].items():
        assert chart["plot width"] <= chart["view width"] + 1, (
            f"the {name} chart is cut at its right edge"
        )
    for name, label in first["strip"].items():
        assert label["width"] >= label["needs"], f"the strip's {name} ({label['text']!r}) is cut"
    assert first["timeline"][1] >= 200
    assert {"kills", "redone", "duplicates", "latency", "deliveries"} <= set(
        first["strip"]
    )  # all shown
