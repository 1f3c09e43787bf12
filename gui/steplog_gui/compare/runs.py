"""Compare mode's two engines: the naive agent and the durable demo, same tickets, one kill for both.

Both runs are started together on the demo outbox (``DemoLauncher.when_outbox``), each with its
own run id, so each has its own part of the outbox's ledger (``Ledger.for_run``) and its own
workdir beside the log. ``kill_both`` SIGKILLs both process groups back to back (microseconds
apart) and each ``EngineProcess`` relaunches its run with the same id: the durable one resumes
from its last checkpoint, the naive one starts over. Auto-kill does the same on a timer until
the durable run has finished (the naive one then runs to its end: both times to finish are known).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.log.reader import LogRepository, LogUnavailable, RunNow
from steplog.log.status import TERMINAL
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.processes.demo import DemoConfig, DemoLauncher
from steplog_gui.processes.engine_process import EngineProcess, LaunchSpec


class CompareRuns(QObject):
    """Starts, kills and stops the two engines of one comparison."""

    runs_started = Signal(str, str)
    """(naive run id, durable run id) of a comparison that is starting."""
    killed = Signal(float, int)
    """(time.time() of the kill, how many engines it killed)."""
    state_changed = Signal()
    """An engine started, was killed or ended; auto-kill switched (buttons follow it)."""
    problem = Signal(str)
    """Why the comparison could not start ('' when it did)."""

    def __init__(
        self,
        monitor: Monitor,
        demo: DemoLauncher,
        *,
        env: dict[str, str] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._demo = demo
        self._monitor = monitor
        self._env = env
        self.approvals = 0
        self.naive = EngineProcess(monitor, self, env=env)
        self.durable = EngineProcess(monitor, self, env=env)
        self.naive_id: str | None = None
        self.durable_id: str | None = None
        self.kills = 0
        self._repo: LogRepository | None = None  # opened on the first auto-kill tick
        self._starting = False
        self._auto = QTimer(self)
        self._auto.timeout.connect(self._auto_kill)
        for engine in self.engines:
            engine.state_changed.connect(self._engine_changed)
        demo.demo_failed.connect(self._start_failed)

    @property
    def engines(self) -> tuple[EngineProcess, EngineProcess]:
        return self.naive, self.durable

    @property
    def running(self) -> bool:
        return any(e.running for e in self.engines)

    @property
    def auto_kill_seconds(self) -> float:
        return self._auto.interval() / 1000 if self._auto.isActive() else 0.0

    def start(self, config: DemoConfig) -> None:
        """A new comparison: both agents on the first ``config.params['tickets']`` tickets."""
        if self.running or self._starting:
            raise RuntimeError("a comparison is already running; stop it or let it finish first")
        self._starting = True
        self._demo.when_outbox(lambda url: self._launch(url, config))

    def _launch(self, url: str, config: DemoConfig) -> None:
        self._starting = False
        stamp = time.strftime("compare-%Y%m%d-%H%M%S")
        if self.durable_id and self.durable_id.startswith(stamp):  # twice in one second
            stamp += f"-{int(time.time() * 1000) % 1000:03d}"
        self.naive_id, self.durable_id, self.kills = f"{stamp}-naive", f"{stamp}-durable", 0
        params = dict(config.params)
        durable = LaunchSpec(
            agent="demo",
            run_id=self.durable_id,
            db=self._monitor.path,
            outbox=url,
            pace=config.pace,
            params=params,
        )
        naive = LaunchSpec(
            agent="naive",
            run_id=self.naive_id,
            db=self._monitor.path,
            outbox=url,
            pace=config.pace,
            params={**params, "trace": "true"},
        )
        self.runs_started.emit(self.naive_id, self.durable_id)
        try:
            self.durable.start(durable)
            self.naive.start(naive)
        except (OSError, RuntimeError) as exc:
            self.terminate_now()
            self.problem.emit(f"compare mode could not start its engines: {exc}")
            return
        self.problem.emit("")

    def approve_both(self, approved: bool = True) -> None:
        """A person's answer to both agents' approval step: the durable run gets the signal
        ``approve`` (``steplog signal``, kept until its wait consumes it, once); the naive one the
        file it polls for, which it consumes, so after a kill it asks again and needs another."""
        import json
        import os

        from steplog_gui import jobs
        from steplog_gui.views.run_control import run_command

        if not (self.naive_id and self.durable_id):
            return
        self.approvals += 1
        data = json.dumps({"approved": approved})
        args = (
            "signal",
            self.durable_id,
            "approve",
            "--data",
            data,
            "--key",
            f"compare-approval-{self.approvals}",
        )
        path = self._monitor.path
        jobs.submit(
            lambda: run_command(path, args, self._env),
            lambda r: (
                None
                if r.code == 0
                else self.problem.emit(f"the durable run's approval was refused: {r.message}")
            ),
            lambda exc: self.problem.emit(str(exc)),
            owner=self,
        )
        workdir = path.parent / "runs" / self.naive_id
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = workdir / ".approval.json.tmp"
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, workdir / "approval.json")  # atomic: the agent never reads half of it

    def kill_both(self) -> int:
        """SIGKILL every running engine of the comparison at once; each is relaunched. How many."""
        at = time.time()
        n = sum(1 for engine in self.engines if engine.kill_now())
        if n:
            self.kills += 1
            self.killed.emit(at, n)
        return n

    def _auto_kill(self) -> None:
        durable = self._now(self.durable_id)
        view = self._monitor.run(self.durable_id) if self.durable_id else None
        # Done when its terminal record is in the log: its process may take a moment more to exit,
        # and the tail may be a poll behind (a kill then would count for the naive run alone).
        if (
            not self.durable.running
            or (view is not None and view.terminal)
            or (durable is not None and durable.status in TERMINAL)
        ):
            self._stop_auto()
            return
        # A kill interrupts work: an engine still starting (relaunched, its lease not taken yet)
        # leaves no trace of being killed in its log, so the tick waits for both to be at work.
        # Either way both runs' logs record the same kills, however slow a start is.
        if not (
            self._at_work(self.durable, durable)
            and self._at_work(self.naive, self._now(self.naive_id))
        ):
            return
        # The durable engine first, then its row, frozen now it is dead: had it committed its end
        # a moment before the kill (a starved monitor can take tens of ms from the check above to
        # here), the kill interrupted nothing and the naive run is spared it, so both logs agree.
        at = time.time()
        if not self.durable.kill_now():
            return  # it exited since the check: the next tick stops
        if (now := self._now(self.durable_id)) is not None and now.status in TERMINAL:
            self._stop_auto()
            return
        n = 1 + self.naive.kill_now()
        self.kills += 1
        self.killed.emit(at, n)

    @staticmethod
    def _at_work(engine: EngineProcess, now: RunNow | None) -> bool:
        """Whether ``engine`` holds the lease of its run (``now``), or the run is over (nothing to wait for)."""
        if now is not None and now.status in TERMINAL:
            return True
        return engine.running and now is not None and now.lease_pid == engine.pid

    def _now(self, run_id: str | None) -> RunNow | None:
        """The run's row as committed now (one indexed row, well under a millisecond on a file);
        ``None`` when it is not in the log yet or the log cannot be read (the tail says why)."""
        if run_id is None:
            return None
        try:
            if self._repo is None or self._repo.path != self._monitor.path:
                if self._repo is not None:
                    self._repo.close()
                self._repo = LogRepository(self._monitor.path)
            return self._repo.run_now(run_id)
        except LogUnavailable:
            return None

    def _stop_auto(self) -> None:
        # The durable run is done: the comparison is decided. Killing the naive one on and on
        # would only keep it from ever finishing (and its time to finish from being known).
        self._auto.stop()
        self.state_changed.emit()

    def set_auto_kill(self, seconds: float) -> None:
        """Kill both every ``seconds`` (0 turns it off)."""
        if seconds > 0:
            self._auto.start(int(seconds * 1000))
        else:
            self._auto.stop()
        self.state_changed.emit()

    def terminate_now(self, grace: float = 3.0) -> None:
        """Stop both engines without relaunch (the window closing, a test's teardown)."""
        self._auto.stop()
        if self._repo is not None:
            self._repo.close()
            self._repo = None
        for engine in self.engines:
            engine.terminate_now(grace)

    def _start_failed(self, _why: str) -> None:
        self._starting = (
            False  # the outbox did not start: nothing was launched (the window says why)
        )

    def _engine_changed(self) -> None:
        if not self.durable.running and self._auto.isActive():
            self._stop_auto()
            return
        self.state_changed.emit()
