"""Demo mode: the demo outbox (started off the GUI thread) and the demo agent's runs beside it.

The outbox runs in its own process group (``steplog.outbox.start_outbox``), so it survives every
engine kill; the engine is told its URL with ``--outbox``. Its ledger lives in one file beside the
log (``steplog.verdict.evidence.outbox_file_for``), shared by every demo run of that data
directory: a second demo, a New run, and a stopped run resumed next week all post there, each under
its own keys, so each run's verdict counts its own deliveries. Resuming a run whose outbox is gone
brings the outbox back, on the port the run recorded when it is free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from PySide6.QtCore import QObject, Signal

from steplog.log.location import LogLocation, parse
from steplog_gui import jobs, startup_trace
from steplog_gui.processes.demo_start import (
    DEMO_AGENTS,
    DEMO_PACE,
    DemoConfig,
    EarlyDemo,
    Started,
    adopt,
    new_run_id,
    start_demo_outbox,
)
from steplog_gui.processes.engine_process import EngineProcess, LaunchSpec

__all__ = ["DEMO_AGENTS", "DEMO_PACE", "DemoConfig", "DemoLauncher"]


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
        self._early: EarlyDemo | None = None
        self._early_engine: Started | None = None

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
        early = None if prefer_port else self._early  # a resume wants its own port back
        if early is not None:
            self._early = None
        db = self._db

        def start_outbox() -> Started | None:
            started = (
                early.result() if early is not None else Started(start_demo_outbox(db, prefer_port))
            )
            if self._closed:  # the window closed while it started: it may be gone before _ready
                adopt(started.outbox)
                started.outbox.stop(grace=2.0)
                return None  # (an engine started with it is stopped at exit: demo_start)
            return started

        # No owner: if the window is gone when the outbox is up, _ready must still stop it.
        jobs.submit(start_outbox, self._ready, self._failed)

    def take_early(self, early: EarlyDemo) -> None:
        """Use what ``early`` started as the monitor started: its outbox as the demo outbox, and
        its engine, if it started one, as the next demo run's (``start``)."""
        self._early = early

    def _failed(self, exc: BaseException) -> None:
        self._starting.clear()
        if not self._closed:
            self.demo_failed.emit(f"the demo outbox did not start: {exc}")

    def _ready(self, started: Started | None) -> None:
        if started is None:
            return  # stopped already: the window closed while it was starting
        outbox = started.outbox
        adopt(outbox)
        if self._closed:  # the window closed while the outbox was starting
            outbox.stop(grace=2.0)
            return
        self.outbox = outbox
        self._early_engine = started if started.engine or started.engine_error else None
        startup_trace.mark("outbox_listening")
        # The engine first (``_launch_new``): the panels that follow the outbox can wait.
        waiting, self._starting = self._starting, []
        for then in waiting:
            then(outbox.url)
        self.outbox_ready.emit(outbox.url)

    # -- runs -------------------------------------------------------------------------------

    def _launch_new(self, url: str) -> None:
        early, self._early_engine = self._early_engine, None
        if early is not None and early.engine_error is not None:
            self.demo_failed.emit(f"the engine did not start: {early.engine_error}")
            return
        if early is not None and early.engine is not None and early.engine[0].outbox == url:
            spec, proc, output = early.engine  # started with the outbox, before the window
            adopt(proc)
            self.run_id = spec.run_id
            self.run_ids.append(spec.run_id)
            try:
                self._engine.adopt(spec, proc, output)
            except RuntimeError as exc:  # another engine runs: this one must not
                from steplog.control.procs import stop_group

                stop_group(proc, 3.0)
                self.demo_failed.emit(f"the engine did not start: {exc}")
            return
        run_id = new_run_id(self.run_ids)
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
