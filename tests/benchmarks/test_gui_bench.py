"""Monitor benchmarks: timeline frame time at 100k bars, and engine commit → model latency.

    python -m pytest tests/benchmarks -s -p no:cacheprovider
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "gui"))

from gui_helpers import synthetic_events  # noqa: E402

from steplog.db import open_log  # noqa: E402
from steplog_gui.monitor import Monitor  # noqa: E402
from steplog_gui.timeline_view import TimelineView  # noqa: E402


def test_timeline_frame_time_at_100k_bars(qtbot) -> None:  # type: ignore[no-untyped-def]
    monitor = Monitor(Path("/nonexistent/never.db"))
    monitor.apply(synthetic_events("big", 100_000, kill_every=5_000))  # type: ignore[arg-type]
    view = TimelineView(monitor)
    qtbot.addWidget(view)
    view.resize(1200, 500)
    view.show()
    view.set_run("big")
    frames = []
    for _ in range(9):
        t = time.perf_counter()
        view.plot.grab()  # a full repaint of the plot
        frames.append(time.perf_counter() - t)
    t = time.perf_counter()
    view.refresh()
    refresh = time.perf_counter() - t
    print(f"\n100k bars: frame median {statistics.median(frames) * 1000:.1f} ms (9 repaints),"
          f" data refresh {refresh * 1000:.1f} ms")


def test_commit_to_model_latency(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "steplog.db"
    open_log(db).close()
    monitor = Monitor(db)
    monitor.start()
    try:
        latencies = []
        for i in range(30):
            conn = sqlite3.connect(db, isolation_level=None)
            t = time.time()
            conn.execute("INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, 0, 'run_created', '{}')",
                         (f"probe{i}", t))
            conn.close()
            qtbot.waitUntil(lambda i=i: monitor.run(f"probe{i}") is not None, timeout=5_000)
            latencies.append(time.time() - t)
        q = statistics.quantiles(latencies, n=20)
        print(f"\ncommit -> model, 30 commits: median {statistics.median(latencies) * 1000:.1f} ms,"
              f" p95 {q[-1] * 1000:.1f} ms")
    finally:
        monitor.stop()


def test_open_a_100k_step_run_to_a_painted_timeline(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real log (100,000 no-op steps written by the engine, 2 kills), opened cold: tailer reads
    and folds every event, the timeline draws its level-of-detail bars and paints."""
    import subprocess

    from steplog.procs import child_env, python_argv

    agents = Path(__file__).parents[1] / "engine" / "agents_for_tests.py"
    db = tmp_path / "big.db"
    args = python_argv("steplog", "run", f"{agents}:noop", "--run-id", "big", "--db", str(db), "--param", "n=100000",
                       "--sync", "normal", "--max-steps", "200000")
    t = time.perf_counter()
    done = subprocess.run(args, env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = time.perf_counter() - t
    first, full = [], []
    for _ in range(3):
        t = time.perf_counter()
        monitor = Monitor(db)
        view = TimelineView(monitor)
        qtbot.addWidget(view)
        view.resize(1200, 500)
        view.show()
        monitor.start()
        qtbot.waitUntil(lambda: (r := monitor.run("big")) is not None and len(r.executions) > 0,  # noqa: B023
                        timeout=60_000)
        view.set_run("big")
        assert not view.plot.grab().isNull()
        first.append(time.perf_counter() - t)  # the first batch painted: usable, filling in
        qtbot.waitUntil(lambda: (r := monitor.run("big")) is not None and r.terminal, timeout=120_000)  # noqa: B023
        view.refresh()
        assert not view.plot.grab().isNull()
        full.append(time.perf_counter() - t)
        monitor.stop()
    print(f"\n100k-step log ({db.stat().st_size / 1e6:.0f} MB, written in {written:.1f} s): first paint median "
          f"{statistics.median(first):.2f} s, whole run folded and painted median {statistics.median(full):.2f} s"
          f" (3 cold opens)")
