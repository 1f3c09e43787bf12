"""Package data (the app icon) through ``importlib.resources``, never repo-relative paths."""

from __future__ import annotations

from importlib.resources import files

from PySide6.QtGui import QIcon, QPixmap


def app_icon() -> QIcon:
    data = files("steplog_gui").joinpath("resources/steplog.svg").read_bytes()
    pixmap = QPixmap()
    pixmap.loadFromData(data, "SVG")
    return QIcon(pixmap)
