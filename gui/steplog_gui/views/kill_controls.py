"""The kill controls on a window's toolbar: the red Kill now button and "Auto-kill every N s".

Built here once for the main window and compare mode; what they do is the window's
``processes.kill_switch.KillSwitch``."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QToolBar, QWidget

KILL_NOW_SHORTCUT = "Ctrl+K"
KILL_NOW_STYLE = (
    "QToolButton { color: white; background: #c62828; font-weight: bold; padding: 4px 10px }"
    " QToolButton:disabled { background: #888 }"
)


def kill_now_button(
    bar: QToolBar, text: str, tip: str, slot: Callable[[], object], *, name: str
) -> QAction:
    """Add the Kill now action (``Ctrl+K``) to ``bar`` as a red button named ``name`` (tests and
    screenshots find it by that name); returns the action, for menus and enabling."""
    action = QAction(text, bar.parentWidget() or bar)
    action.triggered.connect(slot)
    action.setShortcut(QKeySequence(KILL_NOW_SHORTCUT))
    action.setToolTip(tip)
    action.setStatusTip(tip)
    bar.addAction(action)
    button = bar.widgetForAction(action)
    button.setObjectName(name)
    button.setStyleSheet(KILL_NOW_STYLE)
    return action


def auto_kill_controls(
    bar: QToolBar,
    text: str,
    *,
    minimum: float,
    seconds: float,
    changed: Callable[[], object],
) -> tuple[QCheckBox, QDoubleSpinBox]:
    """Add "``text`` [N s]" to ``bar``: a check box and its interval; ``changed`` is called when
    either changes (read both then)."""
    parent: QWidget = bar.parentWidget() or bar
    box = QCheckBox(text, parent)
    interval = QDoubleSpinBox(parent)
    interval.setRange(minimum, 600)
    interval.setSuffix(" s")
    interval.setValue(seconds)
    box.toggled.connect(lambda _on: changed())
    interval.valueChanged.connect(lambda _v: changed())
    bar.addWidget(box)
    bar.addWidget(interval)
    return box, interval
