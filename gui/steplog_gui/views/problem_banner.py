"""The red line across the top of a window that says what went wrong and what to do next."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

STYLE = "background: #b00020; color: white; padding: 6px; font-weight: bold"


class ProblemBanner(QLabel):
    """Plain text (paths and commands' own words, never markup), hidden while there is nothing to
    say."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        self.setStyleSheet(STYLE)
        self.hide()

    def show_problem(self, text: str) -> None:
        """Say ``text``; '' hides the banner."""
        self.setText(text)
        self.setVisible(bool(text))
