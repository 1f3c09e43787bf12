"""Open the monitor on a log at one window size and report what a person would see of its layout.

    QT_QPA_PLATFORM=offscreen:configfile=SCREEN.json python tests/helpers/layout_probe.py LOG WIDTH
    HEIGHT

Prints one JSON object: the layout on a first launch (``first``) and after closing and opening
again with the settings it saved (``restored``). A separate process because the offscreen
screen's size is fixed per process (``screen_env``); used by ``test_layout.py`` and
``screenshots.py``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "engine"), str(ROOT / "gui")]

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from steplog_gui.feeds.monitor import Monitor  # noqa: E402
from steplog_gui.main_window import MainWindow  # noqa: E402
from steplog_gui.model.run_state import REDONE  # noqa: E402
from steplog_gui.settings import Settings  # noqa: E402


def screen_env(width: int, height: int, folder: Path) -> dict[str, str]:
    """An offscreen screen with room for a window of this size and its frame (offscreen draws no
    frame but counts one, and a saved geometry that does not fit is shrunk to fit on restore)."""
    config = folder / f"screen-{width}x{height}.json"
    config.write_text(
        json.dumps(
            {
                "screens": [
                    {
                        "name": "screen",
                        "x": 0,
                        "y": 0,
                        "width": width + 64,
                        "height": height + 64,
                        "dpi": 96,
                        "dpr": 1,
                    }
                ]
            }
        )
    )
    return {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}


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


def open_window(
    app: QApplication, db: Path, settings_file: Path, theme: str, size: tuple[int, int] | None
) -> MainWindow:
    """A window as on a first launch (``size``: maximised to it) or, with ``size`` None, as the
    settings file left it."""
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


def show_redone_step(app: QApplication, window: MainWindow, run_id: str | None = None) -> None:
    """Wait for the run (default: the one the window selects) and its verdict; select its last
    redone step."""
    wait(
        app,
        lambda: (
            window._run_id is not None
            and (run_id is None or window._run_id == run_id)
            and not window.monitor.catching_up
        ),
    )
    run = window.monitor.run(window._run_id or "")
    assert run is not None
    ex = run.executions
    redone = [int(s) for s, o in zip(ex["seq"], ex["outcome"], strict=True) if o == REDONE]
    # The last step redone after a kill; without one, the first step the last takeover ran.
    resumed = [
        int(s)
        for s, lane in zip(ex["seq"], ex["lane"], strict=True)
        if run.kills and lane == run.incarnation and s >= 0
    ]
    pick = redone[-1] if redone else resumed[0] if resumed else None
    if pick is not None:
        window.timeline.select_step(pick)
        window.loader.load(run.run_id, pick)
    wait(app, lambda: window.judge.verdict is not None)
    settle(app, 1.0)


def layout_of(window: MainWindow) -> dict[str, Any]:
    """Sizes, and what is cut: run list columns, charts wider than their view, strip figures."""
    runs = window.runs_view
    charts = {}
    for key, chart in window.charts.charts.items():
        item = chart.widget.getPlotItem()
        charts[key] = {
            "rect": list(chart.widget.geometry().getRect()),
            "plot width": round(item.size().width()),
            "view width": chart.widget.viewport().width(),
        }
    strip = {
        k: {"width": label.width(), "needs": label.sizeHint().width(), "text": label.text()}
        for k, label in window.verdict.labels.items()
        if label.text()
    }
    return {
        "window": [window.width(), window.height()],
        "docks": {
            **{
                d.objectName(): [d.width(), d.height()]
                for d in (window._runs_dock, window._detail_dock, window._outbox_dock)
            },
            # The step detail shares its place with the output (tabs): the place is the tab shown.
            "dock_detail": max(
                ([d.width(), d.height()] for d in (window._detail_dock, window._output_dock)),
                key=lambda wh: wh[0] * wh[1],
            ),
        },
        "runs": {
            "key columns": sum(runs.columnWidth(c) for c in range(3)),
            "view": runs.viewport().width(),
        },
        "charts": charts,
        "strip": strip,
        "timeline": [window.timeline.plot.width(), window.timeline.plot.height()],
    }


def probe(db: Path, width: int, height: int, theme: str = "dark") -> dict[str, Any]:
    app = QApplication([sys.argv[0]])
    ini = Path(tempfile.mkdtemp(prefix="steplog-layout-")) / "settings.ini"
    window = open_window(app, db, ini, theme, (width, height))
    show_redone_step(app, window)
    first = layout_of(window)
    window.close()
    again = open_window(app, db, ini, theme, None)
    show_redone_step(app, again)
    restored = layout_of(again)
    again.close()
    return {"first": first, "restored": restored}


if __name__ == "__main__":
    print(json.dumps(probe(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
