"""Screenshots of the monitor for ``resources/``: a running demo after two kills, at 1280x720,
1920x1080 and 2560x1440, light and dark, each window on its first launch; then each reopened with
the settings it saved, to check the layout comes back exactly.

    QT_QPA_PLATFORM=offscreen python tests/helpers/screenshots.py OUTDIR [--big LOG]

``--big LOG``: also a shot of a log holding a 100k-step run (its newest run) at 1920x1080.
Not a test (nothing is asserted beyond the restore); the pictures are for a person to look at.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "engine"), str(ROOT / "gui"), str(ROOT / "tests")]

from PySide6.QtWidgets import QApplication  # noqa: E402

from helpers.layout_probe import layout_of, open_window, screen_env, show_redone_step, wait  # noqa: E402
from steplog_gui.processes.demo import DemoConfig  # noqa: E402

SIZES = ((1280, 720), (1920, 1080), (2560, 1440))


def shoot(args: argparse.Namespace) -> int:
    """One screen size (this process's offscreen screen): light and dark, first launch and
    restored."""
    app = QApplication([sys.argv[0]])
    width, height = args.shoot
    work = Path(tempfile.mkdtemp(prefix="steplog-shots-"))
    ok = True
    themes = ("dark",) if args.run is None else ("light", "dark")
    for theme in themes:
        name = f"monitor-{width}x{height}-{theme}" if args.run is not None else "monitor-100k-steps"
        ini = work / f"{name}.ini"
        window = open_window(app, args.db, ini, theme, (width, height))  # a maximised first launch
        show_redone_step(app, window, args.run)
        window.grab().save(str(args.out / f"{name}.png"))
        first = layout_of(window)
        window.close()
        again = open_window(app, args.db, ini, theme, None)  # as saved: geometry and docks restored
        show_redone_step(app, again, args.run)
        restored = layout_of(again)
        again.close()
        # The demo is live: the strip's and the runs list's texts move on between the two opens.
        geometry = ("window", "docks", "charts", "timeline")
        first, restored = ({k: d[k] for k in geometry} for d in (first, restored))
        same = restored == first
        ok &= same
        diff = {k: (first[k], restored[k]) for k in first if first[k] != restored[k]}
        print(
            name, first, "restored exactly" if same else f"RESTORED DIFFERENTLY: {diff}", flush=True
        )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--big", type=Path, default=None)
    parser.add_argument("--shoot", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.shoot:
        return shoot(args)
    app = QApplication([sys.argv[0]])
    work = Path(tempfile.mkdtemp(prefix="steplog-shots-"))
    db = work / "data" / "steplog.db"
    driver = open_window(app, db, work / "driver.ini", "light", (1280, 720))
    demo = driver.start_demo(DemoConfig(pace=6.0))  # slow enough to be still running in every shot
    wait(app, lambda: driver.engine.running and demo.run_id is not None)
    run_id = demo.run_id
    assert run_id is not None

    def mid_step(kills: int) -> bool:
        """Past a few commits, and a step (a model call, paced) 2 s into its work: the kill lands
        mid-step, so the timeline shows the interrupted attempt (orange) before the kill line."""
        run = driver.monitor.run(run_id)
        if run is None or run.steps_committed < 4 * kills or len(run.kills) != kills - 1:
            return False
        started = run.executions["start"][np.isnan(run.executions["end"])]
        return len(started) > 0 and time.time() - float(started.max()) > 2.0

    for kills in (1, 2):
        wait(app, lambda: mid_step(kills), timeout=120)  # noqa: B023
        assert driver.engine.kill_now()
    wait(
        app,
        lambda: (r := driver.monitor.run(run_id)) is not None and r.steps_committed >= 14,
        timeout=120,
    )
    failed = 0
    for width, height in SIZES:
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(args.out),
                "--shoot",
                str(width),
                str(height),
                "--db",
                str(db),
                "--run",
                run_id,
            ],
            env=screen_env(width, height, work),
        )
        while child.poll() is None:  # the demo's engine is this process's: keep its loop turning
            app.processEvents()
            time.sleep(0.02)
        failed += child.returncode != 0
    if args.big is not None:
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(args.out),
                "--shoot",
                "1920",
                "1080",
                "--db",
                str(args.big),
            ],
            env=screen_env(1920, 1080, work),
        )
        while child.poll() is None:
            app.processEvents()
            time.sleep(0.02)
        failed += child.returncode != 0
    driver.shutdown(stop_engine=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
