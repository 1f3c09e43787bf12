"""GUI fixtures: real logs written by real engines, settings in a temp file, no leftover processes."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from PySide6.QtWidgets import QDialog

from conftest import AGENTS, Engine

CRASH_AT = "after_effect_started@8"
"""A witness run that dies (os._exit) while step 8's effect is in flight, then resumes."""


def witness_args(
    engine: Engine, run_id: str, witness: Path, n: int, pause: float = 0.0
) -> list[str]:
    return [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"n={n}",
        "--param",
        f"witness={witness}",
        "--param",
        f"pause={pause}",
    ]


@pytest.fixture
def crashed_run(engine: Engine, tmp_path: Path) -> Engine:
    """A log holding run "R": crashed once mid-effect by the engine's crash point, then resumed to the end."""
    args = witness_args(engine, "R", tmp_path / "w.db", 3)
    first = engine.run(*args, env={"STEPLOG_CRASH_AT": CRASH_AT})
    assert first.returncode == 86, first.stderr
    second = engine.run(*args)
    assert second.returncode == 0, second.stderr
    return engine


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[object]:
    from PySide6.QtCore import QSettings

    from steplog_gui.settings import Settings

    yield Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


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


@pytest.fixture
def window(qtbot, engine: Engine, settings, gui_env: dict[str, str]) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """``open_window`` on this test's log; closed with its engines (and any compare engines and
    the demo outbox) stopped: nothing left running after the test."""
    win = open_window(qtbot, engine, settings, gui_env)
    stray = StrayModals()
    yield win
    stray.stop()
    win.shutdown(stop_engine=True)
    assert not stray.seen, (
        f"a modal dialog nobody answered was shut after {STRAY_MODAL_S:.0f} s: {stray.seen}"
    )


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


@pytest.fixture
def theme_restored(qtbot) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The application's style, palette and theme choice as they were, after a test that
    switches the theme (they are the process's: the next test in it would start dark)."""
    from PySide6.QtWidgets import QApplication

    from steplog_gui import theme

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    style, palette, chosen = app.style().name(), app.palette(), theme._chosen
    yield
    theme.choose(chosen)
    app.setStyle(style)
    app.setPalette(palette)


@pytest.fixture
def gui_env(engine: Engine) -> dict[str, str]:
    """The environment for engines the GUI launches (no STEPLOG_* from the developer's shell)."""
    return {**engine.env, "PATH": os.environ.get("PATH", "")}


def synthetic_events(
    run_id: str, steps: int, *, kill_every: int = 0, step_seconds: float = 0.01
) -> list[object]:
    """Events of a run with ``steps`` committed steps (a kill every ``kill_every``), for scale tests."""
    from steplog.log.logread import Event

    events: list[Event] = []
    t, inc = 1_000.0, 1

    def add(
        kind: str,
        seq: int | None = None,
        data: dict[str, object] | None = None,
        incarnation: int | None = None,
    ) -> None:
        events.append(
            Event(
                len(events) + 1,
                run_id,
                t,
                inc if incarnation is None else incarnation,
                kind,
                seq,
                data or {},
            )
        )

    add("run_created", data={"agent": "synthetic", "budget": {"steps": steps * 2}}, incarnation=0)
    add("lease_acquired", data={"pid": 1, "previous_pid": None})
    executions = 0
    for s in range(1, steps + 1):
        executions += 1
        add(
            "step_started",
            s,
            {
                "name": f"step {s}",
                "kind": "call",
                "usage": {"steps": s - 1, "executions": executions},
            },
        )
        t += step_seconds
        if kill_every and s % kill_every == 0:
            inc += 1
            add(
                "lease_acquired",
                data={
                    "pid": inc,
                    "previous_pid": inc - 1,
                    "takeover": f"holder pid {inc - 1} is dead",
                },
            )
            executions += 1
            add(
                "step_started",
                s,
                {
                    "name": f"step {s}",
                    "kind": "call",
                    "usage": {"steps": s - 1, "executions": executions},
                },
            )
            t += step_seconds
        add("step_committed", s, {"usage": {"steps": s, "executions": executions}})
        t += step_seconds / 10
    add(
        "run_finished",
        None,
        {"status": "succeeded", "usage": {"steps": steps, "executions": executions}},
    )
    return events


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
