"""Open the monitor's window on a log in a process of its own and time it, for the benchmarks.

    python tests/helpers/open_probe.py LOG RUN_ID STEPS [SCREENSHOT.png]

Prints one JSON object: seconds from the start of the open (a new monitor and window) to the
first paint of a timeline that drew the whole run (``painted``; ``painted_cpu``: the CPU
seconds the process spent until then), to every detail read (``complete``: step names, budget
charts), the longest stall of the GUI thread on the way, and to the verdict strip's first
verdict (``judged``); what the window shows (steps committed, the last step's name, redone
bars); the process's peak RSS (as the kernel counts it: Qt and all) once opened and once
judged. A process of its own so that the peak is this open's alone.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "engine"), str(ROOT / "gui")]

from PySide6.QtCore import QEvent, QObject, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from steplog_gui.feeds.monitor import Monitor  # noqa: E402
from steplog_gui.main_window import MainWindow  # noqa: E402
from steplog_gui.settings import Settings  # noqa: E402


def _cpu() -> float:
    """CPU seconds of the whole process (every thread): on a loaded machine, the figure that
    does not depend on what else runs."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main() -> None:
    db, run_id, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    shot = sys.argv[4] if len(sys.argv) > 4 else None
    app = QApplication([])
    settings = Settings(
        QSettings(str(Path(tempfile.mkdtemp()) / "s.ini"), QSettings.Format.IniFormat)
    )
    t, cpu0 = time.perf_counter(), _cpu()
    ticks = [t]
    heartbeat = QTimer()
    heartbeat.timeout.connect(lambda: ticks.append(time.perf_counter()))
    heartbeat.start(5)
    monitor = Monitor(db)
    window = MainWindow(monitor, settings)
    window.close_policy = "leave"
    window.resize(1920, 1080)
    monitor.start()
    window.show()
    timeline = window.timeline
    drawn = [0]
    seen: list[float] = []
    cpu: list[float] = []
    redraw = timeline.refresh

    def refresh_and_note() -> None:
        redraw()
        run = timeline.run()
        drawn[0] = run.steps_committed if run is not None else 0

    timeline.refresh = refresh_and_note  # type: ignore[method-assign]

    class Painted(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Type.Paint and not seen and drawn[0] == steps:
                seen.append(time.perf_counter())
                cpu.append(_cpu())
            return False

    watch = Painted()
    timeline.plot.viewport().installEventFilter(watch)
    deadline = time.monotonic() + 300
    while not seen and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.001)
    painted = seen[0] - t if seen else None
    while time.monotonic() < deadline:
        run = monitor.run(run_id)
        if run is not None and not monitor.catching_up and len(run.usage_series):
            break
        app.processEvents()
        time.sleep(0.001)
    complete = time.perf_counter() - t
    heartbeat.stop()
    stall = max(b - a for a, b in itertools.pairwise(ticks))
    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    while window.judge.verdict is None and time.monotonic() < deadline:  # judged after the load
        app.processEvents()
        time.sleep(0.005)
    judged = time.perf_counter() - t if window.judge.verdict is not None else None
    run = monitor.run(run_id)
    assert run is not None
    last = int(run.executions["seq"].max())
    if shot:  # after the charts' and the verdict strip's own redraws
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            app.processEvents()
            time.sleep(0.01)
        window.grab().save(shot)
    print(
        json.dumps(
            {
                "painted": painted,
                "painted_cpu": cpu[0] - cpu0 if cpu else None,
                "complete": complete,
                "stall": stall,
                "steps_committed": run.steps_committed,
                "last_step": last,
                "last_name": run.step_names.get(last, ("?", "?"))[0],
                "redone": run.redone,
                "kills": len(run.kills),
                "peak_rss_mb": rss_open,
                "judged": judged,
                "peak_rss_mb_judged": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )
    sys.stdout.flush()
    os._exit(0)  # no teardown: its timers firing on half-deleted widgets are not the figure


if __name__ == "__main__":
    main()
