"""A read-only table model over a list of plain records (dicts): effects, deliveries, attempts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTableView

from steplog_gui.views.table_model import Index, TableModel


class RecordsModel(TableModel):
    """Rows are dicts; ``columns`` is a sequence of (header, key). ``colour(record)`` may return
    a QColor for the whole row (e.g. a real duplicate delivery in red)."""

    def __init__(
        self,
        columns: Sequence[tuple[str, str]],
        parent: Any = None,
        colour: Callable[[dict[str, Any]], QColor | None] | None = None,
    ) -> None:
        super().__init__(parent)
        self._columns = list(columns)
        self.headers = [header for header, _key in self._columns]
        self._rows: list[dict[str, Any]] = []
        self._colour = colour

    def row_count(self) -> int:
        return len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = self.row_at(index)
        if row is None:
            return None
        record = self._rows[row]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            value = record.get(self._columns[index.column()][1])
            return "" if value is None else str(value)
        if role == Qt.ItemDataRole.ForegroundRole and self._colour is not None:
            return self._colour(record)
        return None

    def record(self, row: int) -> dict[str, Any]:
        return self._rows[row]

    def set_records(self, records: Sequence[dict[str, Any]]) -> None:
        """Replace the rows; appends only emit an insert (a live list keeps its selection)."""
        new = list(records)
        old = self._rows
        n = len(old)
        if len(new) >= n and new[:n] == old:
            if len(new) > n:
                self.beginInsertRows(QModelIndex(), n, len(new) - 1)
                self._rows = new
                self.endInsertRows()
            return
        self.beginResetModel()
        self._rows = new
        self.endResetModel()


def records_table(model: RecordsModel) -> QTableView:
    """A compact, read-only table over a ``RecordsModel``.

    Headers are left-aligned so a narrow column still shows the start of its name, and long
    cells (idempotency keys: run id, then ``:seq``) are elided in the middle so the distinctive
    end stays visible.
    """
    view = QTableView()
    view.setModel(model)
    view.verticalHeader().hide()
    view.verticalHeader().setDefaultSectionSize(view.fontMetrics().height() + 6)
    view.horizontalHeader().setDefaultAlignment(
        Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    )
    view.horizontalHeader().setStretchLastSection(True)
    view.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
    view.setEditTriggers(QTableView.EditTrigger.NoEditTriggers)
    return view
