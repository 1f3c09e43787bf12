"""Demo mode: start the outbox (off the GUI thread), then the demo agent beside it.

The outbox runs in its own process group (``steplog.outbox.start_outbox``), so it survives every
engine kill; the engine is told its URL with ``--outbox``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from . import jobs
from .engine_process import EngineProcess, LaunchSpec

DEMO_PACE = 1.0
"""Seconds of simulated thinking per model call: slow enough for a person to press Kill mid-step."""


@dataclass
class DemoConfig:
    agent: str = "demo"
    params: dict[str, str] = field(default_factory=dict)
    pace: float = DEMO_PACE


class DemoLauncher(QObject):
    """Owns the demo's outbox process; hands the engine its first launch."""

    outbox_ready = Signal(str)
    """The outbox's base URL, once it listens."""
    demo_failed = Signal(str)
    """Why the demo could not start."""

    def __init__(self, engine: EngineProcess, db: Path, config: DemoConfig | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._engine = engine
        self._db = Path(db)
        self.config = config or DemoConfig()
        self.outbox: Any = None
        self.run_id: str | None = None
        self._closed = False

    def start(self) -> None:
        outbox_db = self._db.parent / "outbox.db"

        def start_outbox() -> Any:
            from steplog.db import private_dir
            from steplog.outbox import start_outbox as start

            private_dir(outbox_db.parent)
            return start(outbox_db)

        # No owner: if the window is gone when the outbox is up, _launch must still stop it.
        jobs.submit(start_outbox, self._launch, self._failed)

    def _failed(self, exc: BaseException) -> None:
        if not self._closed:
            self.demo_failed.emit(f"the outbox did not start: {exc}")

    def _launch(self, outbox: Any) -> None:
        if self._closed:  # the window closed while the outbox was starting
            outbox.stop(grace=2.0)
            return
        self.outbox = outbox
        self.outbox_ready.emit(outbox.url)
        self.run_id = time.strftime("demo-%Y%m%d-%H%M%S")
        spec = LaunchSpec(agent=self.config.agent, run_id=self.run_id, db=self._db, outbox=outbox.url,
                          pace=self.config.pace, params=dict(self.config.params))
        try:
            self._engine.start(spec)
        except (OSError, RuntimeError) as exc:
            self.demo_failed.emit(f"the engine did not start: {exc}")

    def stop_outbox(self) -> None:
        self._closed = True
        if self.outbox is not None:
            self.outbox.stop(grace=2.0)
            self.outbox = None
