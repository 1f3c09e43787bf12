"""The monitor's persisted settings: one typed wrapper over ``QSettings``."""

from __future__ import annotations

import json
from typing import Any

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

    @property
    def interpreters(self) -> list[str]:
        """Python interpreters chosen for own agents, most recent first."""
        return [p for p in self._json("run/interpreters", []) if isinstance(p, str)]

    def interpreter_for(self, agent: str) -> str | None:
        """The interpreter last used for ``agent`` (a canonical spec), if one was chosen."""
        found = self._json("run/interpreter_by_agent", {}).get(agent)
        return found if isinstance(found, str) else None

    def remember_interpreter(self, agent: str, python: str | None) -> None:
        """``python`` runs ``agent`` from now on (``None``: the monitor's own again)."""
        by_agent = self._json("run/interpreter_by_agent", {})
        if python is None:
            by_agent.pop(agent, None)
        else:
            by_agent[agent] = python
            recent = [python] + [p for p in self.interpreters if p != python]
            self._s.setValue("run/interpreters", json.dumps(recent[:MAX_RECENT]))
        self._s.setValue("run/interpreter_by_agent", json.dumps(by_agent))

    def _json(self, key: str, default: Any) -> Any:
        """A JSON value (agent specs hold '/' and ':', which QSettings keys cannot)."""
        try:
            value = json.loads(str(self._s.value(key, "")))
        except ValueError:
            return default
        return value if isinstance(value, type(default)) else default

    def sync(self) -> None:
        self._s.sync()
