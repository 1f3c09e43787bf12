"""``python -m steplog_gui [--db PATH] [--demo]``: build the application and run it."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from steplog.log.follow import WHERE

FIRST_PAINT_WAIT_MS = 1000
"""The plots are built after the window's first paint, or this long after it was shown."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="steplog gui", description="The steplog desktop monitor.")
    parser.add_argument(
        "--db",
        default=None,
        help=f"the log to monitor: {WHERE} (default: $STEPLOG_DB, else steplog's default log)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="start the demo agent and its outbox, ready for Kill now",
    )
    parser.add_argument(
        "--demo-tickets", type=int, default=0, help="limit the demo to the first N tickets"
    )
    parser.add_argument(
        "--demo-approve",
        action="store_true",
        help="the demo's digest waits for a person's approval (Approve in the monitor)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="compare mode: the naive agent and the durable demo side by side, one Kill now",
    )
    return parser.parse_args(list(argv))


def _stop_signals() -> list[signal.Signals]:
    """Ctrl-C, SIGTERM and SIGHUP (logout, `kill`, a closed terminal)."""
    stops = [signal.SIGINT, signal.SIGTERM]
    if sys.platform != "win32":
        stops.append(signal.SIGHUP)
    return stops


def _exit_now(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _stop_and_close(window: object) -> None:
    window.close_policy = "stop"  # type: ignore[attr-defined]
    window.close()  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from steplog.errors import SteplogError
    from steplog.log.follow import locate

    try:
        db = locate(args.db)  # a server that cannot be reached or a foreign database: one line, now
    except SteplogError as exc:
        print(f"steplog: {exc}", file=sys.stderr)
        return 2

    params = {"tickets": str(args.demo_tickets)} if args.demo_tickets else {}
    if args.demo_approve:
        params["approve"] = "true"
    early = None
    if args.demo or args.compare:
        # The outbox and the demo's engine start while this interpreter imports Qt and builds
        # the window (``demo_start``); compare mode starts its own engines, later.
        from steplog_gui.processes.demo_start import DemoConfig, EarlyDemo

        # Until the window's handlers are in place (below), SIGTERM or SIGHUP ends this process
        # through SystemExit: the exit handler then stops what EarlyDemo started (in sessions of
        # their own, they would outlive it) instead of the signal killing it outright.
        for signum in _stop_signals():
            signal.signal(signum, _exit_now)
        early = EarlyDemo(db, None if args.compare else DemoConfig(params=params))

    # Only what the first paint needs: pyqtgraph, numpy's drawing, the plots, the file watcher
    # and the compare window come once the window is painted (``after_first_paint``).
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from steplog_gui import resources, startup_trace
    from steplog_gui.feeds.monitor import Monitor
    from steplog_gui.main_window import MainWindow
    from steplog_gui.processes.demo_start import DemoConfig
    from steplog_gui.settings import Settings

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0]])
    startup_trace.mark("qapplication")
    app.setApplicationName("steplog monitor")
    app.setOrganizationName("steplog")
    app.setDesktopFileName("steplog")
    app.setWindowIcon(resources.app_icon())
    monitor = Monitor(db)
    window = MainWindow(monitor, Settings(), defer_views=True)
    if early is not None:
        window.demo_launcher().take_early(early)
    if args.demo and not args.compare:
        window.start_demo(DemoConfig(params=params))
    startup_trace.mark("window_built")
    window.show()

    started: list[bool] = []

    def after_first_paint() -> None:
        if started:
            return
        started.append(True)
        import pyqtgraph as pg

        pg.setConfigOptions(antialias=False)
        monitor.start()
        window.build_views(charts_later=True)
        if args.compare:
            window.open_compare(DemoConfig(params=params))

    # Once the first paint is done (a zero timer from inside the paint runs after it), or after
    # a second if no paint comes (a window that is never exposed still gets its views).
    window.first_painted.connect(lambda: QTimer.singleShot(0, after_first_paint))
    QTimer.singleShot(FIRST_PAINT_WAIT_MS, after_first_paint)
    # Ctrl-C in the terminal, SIGTERM and SIGHUP (logout, `kill`, a closed terminal) quit as "Stop
    # it" does: the engine is stopped at a step boundary and the demo's outbox with it, no dialog,
    # nothing left running behind a window that is gone. The handler only schedules the close:
    # Python runs it between any two bytecodes, possibly in the middle of a paint event.
    for signum in _stop_signals():
        signal.signal(signum, lambda *_: QTimer.singleShot(0, lambda: _stop_and_close(window)))
    keepalive = QTimer()  # lets Python see the signal while Qt's loop runs
    keepalive.start(250)
    keepalive.timeout.connect(lambda: None)
    return int(app.exec())
