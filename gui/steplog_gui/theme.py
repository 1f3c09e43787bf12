"""Colours: follow the OS light/dark scheme (``QStyleHints.colorScheme()``), pyqtgraph included.

One ``Palette`` per scheme; views ask ``current()`` when they draw and re-read it on
``Theme.changed``. Outcome and status colours are chosen to stay distinct in both schemes.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from steplog.log.runstatus import RunStatus
from steplog_gui.model.run_state import (
    COMMITTED,
    COPIED,
    FAILED,
    GAVE_UP,
    INTERRUPTED,
    REDONE,
    RUNNING,
)


@dataclass(frozen=True)
class Palette:
    dark: bool
    background: str
    foreground: str
    grid: str
    outcome: dict[int, str]
    status: dict[str, str]
    kill: str
    limit: str
    estimated: str
    projection: str
    duplicate: str


LIGHT = Palette(
    dark=False,
    background="#ffffff",
    foreground="#202124",
    grid="#d0d0d0",
    outcome={
        COMMITTED: "#2e9d4f",
        REDONE: "#e8930c",
        FAILED: "#d03030",
        RUNNING: "#2f74d0",
        GAVE_UP: "#8a5cc2",
        COPIED: "#a3acb9",
        INTERRUPTED: "#bfa77f",
    },
    status={
        RunStatus.RUNNING: "#2f74d0",
        RunStatus.SUCCEEDED: "#2e9d4f",
        RunStatus.GAVE_UP: "#b27300",
        RunStatus.FAILED: "#d03030",
        "stopped": "#7a7a7a",
        RunStatus.WAITING: "#00838f",
        RunStatus.CANCELLED: "#6d6d6d",
        RunStatus.QUEUED: "#7a7a7a",
    },
    kill="#d00000",
    limit="#d03030",
    estimated="#8a5cc2",
    projection="#888888",
    duplicate="#d00000",
)
DARK = Palette(
    dark=True,
    background="#1e1f22",
    foreground="#e6e6e6",
    grid="#444444",
    outcome={
        COMMITTED: "#3fbf66",
        REDONE: "#f0a030",
        FAILED: "#ff5c5c",
        RUNNING: "#5a9cff",
        GAVE_UP: "#b48cf0",
        COPIED: "#5f6773",
        INTERRUPTED: "#8a7a5c",
    },
    status={
        RunStatus.RUNNING: "#5a9cff",
        RunStatus.SUCCEEDED: "#3fbf66",
        RunStatus.GAVE_UP: "#f0b040",
        RunStatus.FAILED: "#ff5c5c",
        "stopped": "#9a9a9a",
        RunStatus.WAITING: "#26c6da",
        RunStatus.CANCELLED: "#9a9a9a",
        RunStatus.QUEUED: "#9a9a9a",
    },
    kill="#ff4040",
    limit="#ff6060",
    estimated="#b48cf0",
    projection="#aaaaaa",
    duplicate="#ff4040",
)


_chosen = "system"


def is_dark() -> bool:
    if _chosen in ("light", "dark"):
        return _chosen == "dark"
    app = QGuiApplication.instance()
    if app is None:
        return False
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Unknown:  # no OS preference: judge by the window colour
        return QGuiApplication.palette().window().color().lightness() < 128
    return scheme == Qt.ColorScheme.Dark


def current() -> Palette:
    return DARK if is_dark() else LIGHT


def qcolor(hex_: str) -> QColor:
    return QColor(hex_)


SCHEMES = {
    "system": Qt.ColorScheme.Unknown,
    "light": Qt.ColorScheme.Light,
    "dark": Qt.ColorScheme.Dark,
}
"""View → Theme choices; ``system`` follows the OS."""


def choose(name: str) -> None:
    """Light, dark or the OS's scheme for the whole application. The scheme is asked of the
    platform, and the widgets get an explicit palette as well: not every platform theme (nor
    the offscreen one) restyles widgets when asked; the plots follow through ``current()``."""
    global _chosen
    _chosen = name if name in SCHEMES else "system"
    QGuiApplication.styleHints().setColorScheme(SCHEMES[_chosen])
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    if _chosen == "system":
        app.setPalette(app.style().standardPalette())
        return
    app.setStyle("Fusion")  # a style that draws with the palette it is given, on every OS
    app.setPalette(_palette(DARK if _chosen == "dark" else LIGHT))


def _palette(p: Palette) -> QPalette:
    pal = QPalette()
    base, text = QColor(p.background), QColor(p.foreground)
    window = base.lighter(130) if p.dark else QColor("#f2f2f2")
    role = QPalette.ColorRole
    for r, c in (
        (role.Window, window),
        (role.WindowText, text),
        (role.Base, base),
        (role.AlternateBase, window),
        (role.Text, text),
        (role.Button, window),
        (role.ButtonText, text),
        (role.ToolTipBase, window),
        (role.ToolTipText, text),
        (role.PlaceholderText, QColor("#8a8a8a")),
        (role.Highlight, QColor(p.status[RunStatus.RUNNING])),
        (role.HighlightedText, QColor("#ffffff")),
    ):
        pal.setColor(r, c)
    pal.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor("#7a7a7a"))
    pal.setColor(QPalette.ColorGroup.Disabled, role.WindowText, QColor("#7a7a7a"))
    pal.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor("#7a7a7a"))
    return pal


class Theme(QObject):
    """Relays the OS scheme change to the views."""

    changed = Signal(object)
    """The new ``Palette`` after the OS switched between light and dark."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        QGuiApplication.styleHints().colorSchemeChanged.connect(
            lambda _s: self.changed.emit(current())
        )

    @property
    def palette(self) -> Palette:
        return current()
