"""Demo mode: the demo outbox (started off the GUI thread) and the demo agent's runs beside it.

The outbox runs in its own process group (``steplog.outbox.start_outbox``), so it survives every
engine kill; the engine is told its URL with ``--outbox``. Its ledger lives in one file beside the
log (``steplog.verdict.evidence.outbox_file_for``), shared by every demo run of that data
directory: a second demo, a New run, and a stopped run resumed next week all post there, each under
its own keys, so each run's verdict counts its own deliveries. Resuming a run whose outbox is gone
brings the outbox back, on the port the run recorded when it is free.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from PySide6.QtCore import QObject, Signal

from steplog.log.location import LogLocation, parse
from steplog.verdict.evidence import outbox_file_for
from steplog_gui import jobs, startup_trace
from steplog_gui.processes.engine_process import EngineProcess, LaunchSpec

_unadopted: set[Any] = set()
"""Demo outboxes started off the GUI thread that no launcher has taken yet. An outbox runs in a
session of its own and would outlive this process: one still here at exit (the window closed, and
the process ended, before the GUI thread took it) is stopped then."""


@atexit.register
def _stop_unadopted() -> None:
    for outbox in list(_unadopted):
        outbox.stop(grace=1.0)
    _unadopted.clear()


DEMO_PACE = 3.5
"""Seconds of simulated thinking per model call: the 16-ticket demo lasts about a minute, long
enough for a person to press Kill now several times, each in the middle of a step."""
DEMO_AGENTS = ("demo", "naive")
"""Built-in agents that post to the demo outbox."""


@dataclass
class DemoConfig:
    agent: str = "demo"
    params: dict[str, str] = field(default_factory=dict)
    pace: float = DEMO_PACE


def _port_of(url: str | None) -> int:
    try:
        return int(urlparse(url).port or 0) if url else 0
    except ValueError:
        return 0


class DemoLauncher(QObject):
    """Owns the demo's outbox process; starts demo runs and brings the outbox back for resumes."""

    outbox_ready = Signal(str)
    """The outbox's base URL, once it listens."""
    demo_failed = Signal(str)
    """Why the demo (or the outbox a resume needs) could not start."""

    def __init__(
        self,
        engine: EngineProcess,
        db: LogLocation,
        config: DemoConfig | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self._db: LogLocation = parse(db)
        self.config = config or DemoConfig()
        self.outbox: Any = None
        self.run_id: str | None = None
        self.run_ids: list[str] = []
        """Every demo run this launcher started, oldest first."""
        self._closed = False
        self._starting: list[Callable[[str], None]] = []

    def start(self) -> None:
        """Start a new demo run (the outbox first, if it is not running)."""
        self._with_outbox(self._launch_new)

    def resume(self, spec: LaunchSpec, recorded_url: str | None) -> None:
        """Relaunch ``spec`` (a demo run) against a live demo outbox, on the run's old port if
        free."""

        def launch(url: str) -> None:
            spec.outbox = url
            self._start_engine(spec)

        self._with_outbox(launch, prefer_port=_port_of(recorded_url))

    def when_outbox(self, then: Callable[[str], None]) -> None:
        """Call ``then(url)`` once the demo outbox listens, starting it if need be (compare mode
        posts both of its runs there)."""
        self._with_outbox(then)

    # -- the outbox -------------------------------------------------------------------------

    def _with_outbox(self, then: Callable[[str], None], prefer_port: int = 0) -> None:
        if self.outbox is not None and self.outbox.alive():
            then(self.outbox.url)
            return
        self._starting.append(then)
        if len(self._starting) > 1:
            return  # already starting: ``then`` runs once it listens
        outbox_db = outbox_file_for(self._db)

        def start_outbox() -> Any:
            from steplog.errors import UsageError
            from steplog.log.db import private_dir
            from steplog.outbox import start_outbox as start

            private_dir(outbox_db.parent)
            try:
                outbox = start(outbox_db, port=prefer_port)
            except UsageError:  # the old port is taken now: any free one will do
                if not prefer_port:
                    raise
                outbox = start(outbox_db)
            _unadopted.add(outbox)  # until _ready takes it: see _stop_unadopted
            if (
                self._closed
            ):  # the window closed while it started: it may be gone before _ready runs
                _unadopted.discard(outbox)
                outbox.stop(grace=2.0)
                return None
            return outbox

        # No owner: if the window is gone when the outbox is up, _ready must still stop it.
        jobs.submit(start_outbox, self._ready, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self._starting.clear()
        if not self._closed:
            self.demo_failed.emit(f"the demo outbox did not start: {exc}")

    def _ready(self, outbox: Any) -> None:
        if outbox is None:
            return  # stopped already: the window closed while it was starting
        _unadopted.discard(outbox)
        if self._closed:  # the window closed while the outbox was starting
            outbox.stop(grace=2.0)
            return
        self.outbox = outbox
        startup_trace.mark("outbox_listening")
        self.outbox_ready.emit(outbox.url)
        waiting, self._starting = self._starting, []
        for then in waiting:
            then(outbox.url)

    # -- runs -------------------------------------------------------------------------------

    def _launch_new(self, url: str) -> None:
        run_id = time.strftime("demo-%Y%m%d-%H%M%S")
        if run_id in self.run_ids:  # twice in one second
            run_id += f"-{len(self.run_ids) + 1}"
        self.run_id = run_id
        self.run_ids.append(run_id)
        self._start_engine(
            LaunchSpec(
                agent=self.config.agent,
                run_id=run_id,
                db=self._db,
                outbox=url,
                pace=self.config.pace,
                params=dict(self.config.params),
            )
        )

    def _start_engine(self, spec: LaunchSpec) -> None:
        try:
            self._engine.start(spec)
        except (OSError, RuntimeError) as exc:
            self.demo_failed.emit(f"the engine did not start: {exc}")

    def stop_outbox(self) -> None:
        self._closed = True
        if self.outbox is not None:
            self.outbox.stop(grace=2.0)
            self.outbox = None
