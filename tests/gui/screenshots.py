"""Screenshots of the monitor for ``resources/``: a running demo after two kills, at 1280x720,
1920x1080 and 2560x1440, light and dark, each window on its first launch; then each reopened with
the settings it saved, to check the layout comes back exactly.

    QT_QPA_PLATFORM=offscreen python tests/gui/screenshots.py OUTDIR [--big LOG]

``--big LOG``: also a shot of a log holding a 100k-step run (its newest run) at 1920x1080.
Not a test (nothing is asserted beyond the restore); the pictures are for a person to look at.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "engine"), str(ROOT / "gui")]

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from steplog_gui.demo import DemoConfig  # noqa: E402
from steplog_gui.main_window import MainWindow  # noqa: E402
from steplog_gui.monitor import Monitor  # noqa: E402
from steplog_gui.run_state import REDONE  # noqa: E402
from steplog_gui.settings import Settings  # noqa: E402

SIZES = ((1280, 720), (1920, 1080), (2560, 1440))


def wait(app: QApplication, until: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not get there in time")
        app.processEvents()
        time.sleep(0.01)


def settle(app: QApplication, seconds: float) -> None:
    end = time.monotonic() + seconds
    wait(app, lambda: time.monotonic() > end, seconds + 5)


def open_window(app: QApplication, db: Path, settings_file: Path, theme: str, size: tuple[int, int] | None) -> MainWindow:
    settings = Settings(QSettings(str(settings_file), QSettings.Format.IniFormat))
    settings.theme = theme
    monitor = Monitor(db)
    window = MainWindow(monitor, settings)
    window.close_policy = "leave"
    if size is not None:
        window.resize(*size)
    monitor.start()
    window.show()
    return window


def show_redone_step(app: QApplication, window: MainWindow, run_id: str) -> None:
    wait(app, lambda: window._run_id == run_id and not window.monitor.catching_up)
    run = window.monitor.run(run_id)
    assert run is not None
    redone = [int(s) for s, o in zip(run.executions["seq"], run.executions["outcome"]) if o == REDONE]
    if redone:
        window.timeline.select_step(redone[-1])
        window.loader.load(run_id, redone[-1])
    wait(app, lambda: window.judge.verdict is not None)
    settle(app, 1.5)


def layout_of(window: MainWindow) -> dict[str, object]:
    docks = {d.objectName(): (d.width(), d.height()) for d in (window._runs_dock, window._detail_dock, window._outbox_dock)}
    return {"window": (window.width(), window.height()), "docks": docks,
            "runs columns": [window.runs_view.columnWidth(c) for c in range(3)],
            "charts": {k: c.widget.geometry().getRect() for k, c in window.charts.charts.items()}}


def shoot(args: argparse.Namespace) -> int:
    """One screen size (this process's offscreen screen): light and dark, first launch and restored."""
    app = QApplication([sys.argv[0]])
    width, height = args.shoot
    work = Path(tempfile.mkdtemp(prefix="steplog-shots-"))
    ok = True
    themes = ("dark",) if args.run is None else ("light", "dark")
    for theme in themes:
        name = f"monitor-{width}x{height}-{theme}" if args.run is not None else "monitor-100k-steps"
        ini = work / f"{name}.ini"
        window = open_window(app, args.db, ini, theme, (width, height))  # a maximised first launch
        wait(app, lambda: window._run_id is not None)
        run_id = args.run or window._run_id
        show_redone_step(app, window, run_id)
        window.grab().save(str(args.out / f"{name}.png"))
        first = layout_of(window)
        window.close()
        again = open_window(app, args.db, ini, theme, None)  # as saved: geometry and docks restored
        show_redone_step(app, again, run_id)
        restored = layout_of(again)
        again.close()
        same = restored == first
        ok &= same
        print(name, first, "restored exactly" if same else f"RESTORED DIFFERENTLY: {restored}", flush=True)
    return 0 if ok else 1


def screen_env(width: int, height: int, folder: Path) -> dict[str, str]:
    """An offscreen screen with room for a window of this size and its frame (offscreen draws no
    frame but counts one, and a saved geometry that does not fit is shrunk to fit on restore)."""
    config = folder / f"screen-{width}x{height}.json"
    config.write_text(json.dumps({"screens": [{"name": "screen", "x": 0, "y": 0, "width": width + 64,
                                               "height": height + 64, "dpi": 96, "dpr": 1}]}))
    return {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}


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
    for kills in (1, 2):
        wait(app, lambda: (r := driver.monitor.run(run_id)) is not None and r.steps_committed >= 4 * kills
             and len(r.kills) == kills - 1 and (not r.kills or r.kills[-1].first_commit is not None), timeout=120)
        assert driver.engine.kill_now()
    wait(app, lambda: (r := driver.monitor.run(run_id)) is not None and r.steps_committed >= 14, timeout=120)
    failed = 0
    for width, height in SIZES:
        child = subprocess.Popen([sys.executable, __file__, str(args.out), "--shoot", str(width), str(height),
                                  "--db", str(db), "--run", run_id], env=screen_env(width, height, work))
        while child.poll() is None:  # the demo's engine is this process's: keep its loop turning
            app.processEvents()
            time.sleep(0.02)
        failed += child.returncode != 0
    if args.big is not None:
        child = subprocess.Popen([sys.executable, __file__, str(args.out), "--shoot", "1920", "1080",
                                  "--db", str(args.big)], env=screen_env(1920, 1080, work))
        while child.poll() is None:
            app.processEvents()
            time.sleep(0.02)
        failed += child.returncode != 0
    driver.shutdown(stop_engine=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
