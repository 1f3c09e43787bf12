"""GUI fixtures: real logs written by real engines, settings in a temp file, the real window
offscreen, and no leftover processes or modal dialogs after a test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.engine import Engine
from helpers.gui import STRAY_MODAL_S, StrayModals, open_window
from helpers.witness import CRASH_AT, witness_args


@pytest.fixture
def crashed_run(engine: Engine, tmp_path: Path) -> Engine:
    """A log holding run "R": crashed once mid-effect by the engine's crash point, then
    resumed to the end."""
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


@pytest.fixture
def gui_env(engine: Engine) -> dict[str, str]:
    """The environment for engines the GUI launches (no STEPLOG_* from the developer's shell)."""
    return {**engine.env, "PATH": os.environ.get("PATH", "")}


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
