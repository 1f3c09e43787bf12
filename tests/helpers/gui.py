"""The real main window in a test: opened offscreen on a log, modal dialogs answered (or shut
when nobody does), and two run states compared field by field."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PySide6.QtWidgets import QDialog

    from helpers.engine import Engine


def open_window(qtbot, engine: Engine, settings, gui_env: dict[str, str]) -> Any:  # type: ignore[no-untyped-def]
    """The real main window on ``engine``'s log, following it and shown offscreen; it stops its
    engines when closed (``close_policy``), so a test leaves nothing running."""
    from steplog_gui.feeds.monitor import Monitor
    from steplog_gui.main_window import MainWindow

    monitor = Monitor(engine.db)
    win = MainWindow(monitor, settings, engine_env=gui_env)
    win.close_policy = "stop"
    qtbot.addWidget(win)
    monitor.start()
    win.show()
    return win


STRAY_MODAL_S = 10.0


class StrayModals:
    """Shuts a modal dialog left open ``STRAY_MODAL_S`` seconds (one a test did not expect) and
    remembers its text. Its ``exec`` blocks the test in a nested event loop where pytest-timeout's
    exception is swallowed by the slot that raises it: without this the test run hangs for good."""

    def __init__(self) -> None:
        import time

        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication

        self.seen: list[str] = []
        self._since: dict[int, float] = {}

        def check() -> None:
            modal = QApplication.activeModalWidget()
            if modal is None:
                self._since.clear()
                return
            first = self._since.setdefault(id(modal), time.monotonic())
            if time.monotonic() - first >= STRAY_MODAL_S:
                self.seen.append(getattr(modal, "text", modal.windowTitle)())
                modal.reject()  # type: ignore[attr-defined]

        self._timer = QTimer()
        self._timer.timeout.connect(check)
        self._timer.start(500)

    def stop(self) -> None:
        self._timer.stop()


SCALARS = (
    "agent",
    "params",
    "model",
    "limits",
    "status",
    "reason",
    "created",
    "finished",
    "last_ts",
    "usage",
    "incarnation",
    "pid",
    "host",
    "kills",
    "step_names",
    "_open",
    "_deaths",
    "forked_from",
    "waiting_for",
    "waiting_since",
    "cancel_requested",
    "_copied_shift",
)


def assert_same(bulk: Any, folded: Any, where: str) -> None:
    """Two ``RunState``s hold the same run: every field, every column, NaN equal to NaN."""
    import numpy as np

    for name in SCALARS:
        a, b = getattr(bulk, name), getattr(folded, name)
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            continue
        assert a == b, f"{where}: {name} differs: bulk {a!r}, folded {b!r}"
    for columns in ("executions", "usage_series"):
        a, b = getattr(bulk, columns), getattr(folded, columns)
        assert len(a) == len(b), f"{where}: {columns} has {len(a)} rows bulk, {len(b)} folded"
        for field in a._names:
            assert np.array_equal(a[field], b[field], equal_nan=a[field].dtype.kind == "f"), (
                f"{where}: {columns}.{field}: bulk {a[field]}, folded {b[field]}"
            )


def answer_next_modal(act: Callable[[QDialog], None]) -> None:
    """Answer the modal dialog the next action opens (``exec`` blocks until it is answered); if
    answering fails, the dialog is rejected so the test fails instead of hanging."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    def answer() -> None:
        modal = QApplication.activeModalWidget()
        if modal is None:
            QTimer.singleShot(20, answer)
            return
        try:
            act(modal)  # type: ignore[arg-type]
        finally:
            if modal.isVisible():
                modal.reject()  # type: ignore[attr-defined]

    QTimer.singleShot(20, answer)


def shown(qtbot: Any, window: Any, run_id: str) -> None:
    """``run_id`` selected in the window once its runs list has it."""
    qtbot.waitUntil(lambda: window.runs_model.row_of(run_id) >= 0, timeout=10_000)
    window.select_run(run_id)
    qtbot.waitUntil(lambda: window._run_id == run_id, timeout=5_000)
