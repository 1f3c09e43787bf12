"""What every flat table model of the monitor has in common: counts and horizontal headers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

Index = QModelIndex | QPersistentModelIndex


class TableModel(QAbstractTableModel):
    """A table of ``row_count()`` rows under ``headers``; a subclass gives both and ``data``."""

    headers: Sequence[str] = ()

    def row_count(self) -> int:
        raise NotImplementedError

    def row_at(self, index: Index) -> int | None:
        """``index``'s row, or ``None`` for an index that names no row of this table now."""
        if not index.isValid() or not (0 <= index.row() < self.row_count()):
            return None
        return index.row()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 (Qt's name)
        return 0 if parent.isValid() else self.row_count()

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 (Qt's name)
        return 0 if parent.isValid() else len(self.headers)

    def headerData(  # noqa: N802 (Qt's name)
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(self.headers)
        ):
            return self.headers[section]
        return None
