"""The monitor on a log of many runs (issue 32): 10,000 and 100,000 finished runs.

Not part of the normal test run. Run:

    QT_QPA_PLATFORM=offscreen python -m pytest tests/benchmarks/test_runs_list_bench.py -s \
        -p no:cacheprovider -n 0

Printed per log: the window's open time (constructed, shown, the newest run on top), the time a
filter takes (status, then a tag, then text), one more page as the list scrolls, the CPU the
process uses in the 5 s after the window is drawn (idle: it should be near 0), and its memory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from helpers.many_runs import run_shape, write_runs


@pytest.mark.parametrize("runs", [10_000, 100_000])
def test_runs_list_figures(qtbot: Any, tmp_path: Path, runs: int) -> None:
    from PySide6.QtCore import QSettings

    from steplog_gui.feeds.monitor import Monitor
    from steplog_gui.main_window import MainWindow
    from steplog_gui.settings import Settings

    db = tmp_path / "runs.db"
    write_runs(db, runs)
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    t0 = time.perf_counter()
    monitor = Monitor(db)
    window = MainWindow(monitor, settings)
    qtbot.addWidget(window)
    built = time.perf_counter() - t0
    monitor.start()
    window.show()
    qtbot.waitUntil(lambda: window.runs_model.rowCount() > 0, timeout=30_000)
    assert window.runs_model.run_id(0) == run_shape(runs - 1).run_id
    shown = time.perf_counter() - t0
    qtbot.waitUntil(lambda: not monitor.catching_up and bool(monitor.state.runs), timeout=60_000)
    settled = time.perf_counter() - t0

    bar = window.runs_filter
    t = time.perf_counter()
    bar.status.setCurrentIndex(bar.status.findData("failed"))
    by_status = time.perf_counter() - t
    bar.tags.setText("team=ops")
    t = time.perf_counter()
    bar.apply()
    by_tag = time.perf_counter() - t
    bar.tags.setText("")
    bar.status.setCurrentIndex(0)
    bar.search.setText("timeout talking")
    t = time.perf_counter()
    bar.apply()
    by_text = time.perf_counter() - t
    bar.search.setText("")
    bar.apply()
    t = time.perf_counter()
    window.runs_model.fetchMore()
    page = time.perf_counter() - t

    cpu0, wall0 = time.process_time(), time.perf_counter()
    qtbot.wait(5_000)
    idle_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    rss = _rss_mb()
    print(
        f"\n{runs:>7,} runs: window built {built:.2f} s, newest on top {shown:.2f} s, monitor "
        f"settled {settled:.2f} s ({len(monitor.state.runs)} runs held); filter: status "
        f"{by_status * 1000:.0f} ms, tag {by_tag * 1000:.0f} ms, text {by_text * 1000:.0f} ms; "
        f"next page {page * 1000:.0f} ms; idle CPU {idle_cpu:.1%}; RSS {rss:.0f} MB"
    )
    window.shutdown(stop_engine=True)


def _rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
