"""The monitor's persisted settings: one typed wrapper over ``QSettings``."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings

MAX_RECENT = 8


class Settings:
    """Window geometry/state, recent log files and kill-panel choices."""

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self._s = qsettings or QSettings("steplog", "steplog-monitor")

    def _bytes(self, key: str) -> QByteArray | None:
        value = self._s.value(key)
        return value if isinstance(value, QByteArray) else None

    @property
    def geometry(self) -> QByteArray | None:
        return self._bytes("window/geometry")

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self._s.setValue("window/geometry", value)

    @property
    def window_state(self) -> QByteArray | None:
        return self._bytes("window/state")

    @window_state.setter
    def window_state(self, value: QByteArray) -> None:
        self._s.setValue("window/state", value)

    @property
    def recent_files(self) -> list[str]:
        value = self._s.value("recent/files", [])
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else []

    def add_recent(self, path: str) -> list[str]:
        files = [path] + [p for p in self.recent_files if p != path]
        self._s.setValue("recent/files", files[:MAX_RECENT])
        return files[:MAX_RECENT]

    @property
    def auto_kill_seconds(self) -> float:
        try:
            return float(self._s.value("kill/auto_seconds", 5.0))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 5.0

    @auto_kill_seconds.setter
    def auto_kill_seconds(self, value: float) -> None:
        self._s.setValue("kill/auto_seconds", float(value))

    @property
    def theme(self) -> str:
        """``system``, ``light`` or ``dark`` (View → Theme)."""
        value = str(self._s.value("view/theme", "system"))
        return value if value in ("system", "light", "dark") else "system"

    @theme.setter
    def theme(self, value: str) -> None:
        self._s.setValue("view/theme", value)

    def sync(self) -> None:
        self._s.sync()
