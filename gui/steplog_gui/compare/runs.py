"""Compare mode's two engines: the naive agent and the durable demo, same tickets, one kill for
both.

Both runs are started together on the demo outbox (``DemoLauncher.when_outbox``), each with its
own run id, so each has its own part of the outbox's ledger (``Ledger.for_run``) and its own
workdir beside the log. Killing is the ``KillSwitch``'s, as in the main window, with the durable
engine as its lead: Kill now SIGKILLs both process groups back to back (microseconds apart) and
each ``EngineProcess`` relaunches its run with the same id, the durable one resuming from its
last checkpoint, the naive one starting over; auto-kill does the same on a timer until the
durable run has finished (the naive one then runs to its end: both times to finish are known).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Signal

from steplog_gui.feeds.monitor import Monitor
from steplog_gui.processes.demo import DemoConfig, DemoLauncher
from steplog_gui.processes.engine_process import EngineProcess, LaunchSpec
from steplog_gui.processes.kill_switch import KillSwitch


class CompareRuns(QObject):
    """Starts and stops the two engines of one comparison; ``switch`` kills them."""

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
        self.naive = EngineProcess(self, env=env)
        self.durable = EngineProcess(self, env=env)
        self.switch = KillSwitch(monitor, (self.durable, self.naive), self)
        self.naive_id: str | None = None
        self.durable_id: str | None = None
        self._starting = False
        self.switch.killed.connect(self.killed)
        self.switch.state_changed.connect(self.state_changed)
        for engine in self.engines:
            engine.state_changed.connect(self.state_changed)
        demo.demo_failed.connect(self._start_failed)

    @property
    def engines(self) -> tuple[EngineProcess, EngineProcess]:
        return self.naive, self.durable

    @property
    def running(self) -> bool:
        return any(e.running for e in self.engines)

    @property
    def kills(self) -> int:
        """Kills of this comparison (each one of both engines, or of the one still running)."""
        return self.switch.kills

    @property
    def auto_kill_seconds(self) -> float:
        return self.switch.auto_kill_seconds

    def kill_both(self) -> int:
        """SIGKILL every running engine of the comparison at once; each is relaunched. How many."""
        return self.switch.kill_now()

    def set_auto_kill(self, seconds: float) -> None:
        """Kill both every ``seconds`` (0 turns it off) until the durable run is done."""
        self.switch.set_auto_kill(seconds)

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
        self.naive_id, self.durable_id = f"{stamp}-naive", f"{stamp}-durable"
        self.switch.reset()

        def spec(agent: str, run_id: str, **more: str) -> LaunchSpec:
            """The same tickets, pace and outbox for both; the naive agent also keeps a trace."""
            params = {**config.params, **more}
            db = self._monitor.path
            return LaunchSpec(agent, run_id, db, outbox=url, pace=config.pace, params=params)

        durable = spec("demo", self.durable_id)
        naive = spec("naive", self.naive_id, trace="true")
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

    def terminate_now(self, grace: float = 3.0) -> None:
        """Stop both engines without relaunch (the window closing, a test's teardown)."""
        self.switch.stop()
        for engine in self.engines:
            engine.terminate_now(grace)

    def _start_failed(self, _why: str) -> None:
        self._starting = False  # the outbox did not start: nothing was launched (the window says)
