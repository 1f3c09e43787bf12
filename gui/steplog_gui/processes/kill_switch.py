"""Kill now, auto-kill and the kill at the next act→record window, for the engines the monitor
hosts: the one owner of killing them, for the main window (one engine) and compare mode (two).

A kill is each ``EngineProcess.kill_now`` (SIGKILL of its process group, then a relaunch of the
same run once it is reaped), all of the switch's engines back to back: microseconds apart, so
two runs side by side are cut at the same moment.

Auto-kill kills after every ``seconds`` of work until the *lead* engine's run (the first
engine: the only one, or compare mode's durable run) is done; the others then run to their end.
The seconds count from the moment every engine is at work, holding its run's lease
(``RunNow.lease_pid``, as committed now, looked at every ``AT_WORK_POLL_MS`` while they start):
an engine still starting leaves no trace of a kill in its log (a kill then would count here and
not there), and one killed as soon as it took over would never get on (a machine slow to start
engines made no progress at all when the interval ran from the last kill). Whether the lead is
done is read from the log (its terminal record), not from the tail, which may be a poll behind;
and once more right after the lead is killed: had it committed its end a moment before, the kill
interrupted nothing and the others are spared it, so every log records the same kills.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.log.events import EventKind
from steplog.log.logread import Event
from steplog.log.reader import LogRepository, LogUnavailable, RunNow
from steplog.log.status import TERMINAL
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.processes.engine_process import EngineProcess

AT_WORK_POLL_MS = 100
"""How often auto-kill looks whether the engines are at work again, while they start."""


class KillSwitch(QObject):
    """Kill now, auto-kill and the window kill over ``engines`` (the lead first)."""

    killed = Signal(float, int)
    """(time.time() of the kill, how many engines it killed)."""
    state_changed = Signal()
    """Auto-kill or the window kill was switched, or a kill was made (buttons follow it)."""

    def __init__(
        self, monitor: Monitor, engines: Sequence[EngineProcess], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._monitor = monitor
        self.engines = tuple(engines)
        self.kills = 0
        """Kills made since ``reset`` (each one kills every engine that runs)."""
        self.window_armed = False
        """The next effect that starts in a run of these engines kills them (``arm_window``)."""
        self._repo: LogRepository | None = None  # opened on the first auto-kill tick
        self._seconds = 0.0
        self._auto = QTimer(self)  # counts the seconds of work before the next kill
        self._auto.setSingleShot(True)
        self._auto.timeout.connect(self._tick)
        self._back = QTimer(self)  # looks whether the engines are at work (again)
        self._back.setInterval(AT_WORK_POLL_MS)
        self._back.timeout.connect(self._await_work)
        for engine in self.engines:
            engine.state_changed.connect(self._engine_changed)
        monitor.events_applied.connect(self._watch_window)

    @property
    def running(self) -> bool:
        return any(e.running for e in self.engines)

    @property
    def working(self) -> bool:
        """An engine is on its run (``EngineProcess.working``)."""
        return any(e.working for e in self.engines)

    @property
    def auto_kill_seconds(self) -> float:
        """The seconds of work between auto-kills; 0 when auto-kill is off."""
        return self._seconds

    # -- control ----------------------------------------------------------------------------

    def kill_now(self) -> int:
        """SIGKILL every running engine at once; each is relaunched. How many were killed."""
        at = time.time()
        n = sum(1 for engine in self.engines if engine.kill_now())
        if n:
            self._killed(at, n)
        return n

    def set_auto_kill(self, seconds: float) -> None:
        """Kill every ``seconds`` (0 turns it off; so does a lead engine that is not working:
        there is nothing to kill)."""
        self._auto.stop()
        self._back.stop()
        self._seconds = seconds if seconds > 0 and self.engines[0].working else 0.0
        if self._seconds:
            self._back.start()
            self._await_work()
        self.state_changed.emit()

    def arm_window(self) -> None:
        """Kill at the next act→record window: as soon as an effect of a run starts."""
        self.window_armed = self.working
        self.state_changed.emit()

    def reset(self) -> None:
        """A new run (or comparison): no kills yet."""
        self.kills = 0

    def stop(self) -> None:
        """No more kills (the engines are being stopped)."""
        self._seconds = 0.0
        self._auto.stop()
        self._back.stop()
        self.window_armed = False
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    # -- reacting ---------------------------------------------------------------------------

    def _killed(self, at: float, n: int) -> None:
        self.kills += 1
        self.window_armed = False
        if self._seconds:  # the next auto-kill comes after as much work again
            self._auto.stop()
            self._back.start()
        self.killed.emit(at, n)
        self.state_changed.emit()

    def _watch_window(self, events: list[Event]) -> None:
        if not self.window_armed:
            return
        ours = {e.spec.run_id for e in self.engines if e.running and e.spec is not None}
        if any(ev.run_id in ours and ev.kind == EventKind.EFFECT_STARTED for ev in events):
            self.kill_now()

    def _lead_done(self) -> bool:
        lead = self.engines[0]
        view = self._monitor.run(lead.spec.run_id) if lead.spec is not None else None
        return not lead.working or (view is not None and view.terminal) or _over(self._now(lead))

    def _await_work(self) -> None:
        """While the engines start: once all are at work, count the seconds to the next kill."""
        if self._lead_done():
            self._stop_auto()
        elif all(_at_work(e, self._now(e)) for e in self.engines):
            self._back.stop()
            self._auto.start(int(self._seconds * 1000))

    def _tick(self) -> None:
        """The seconds of work are up: kill every engine, the lead first."""
        if self._lead_done():
            self._stop_auto()
            return
        if not all(_at_work(e, self._now(e)) for e in self.engines):
            self._back.start()  # count again once all are at work
            return
        lead, others = self.engines[0], self.engines[1:]
        at = time.time()
        if not lead.kill_now():
            self._back.start()  # it exited since the check: the next look stops
            return
        if _over(self._now(lead)):
            self._stop_auto()
            return
        self._killed(at, 1 + sum(1 for e in others if e.kill_now()))

    def _now(self, engine: EngineProcess) -> RunNow | None:
        """The engine's run as committed now (one indexed row, well under a millisecond on a
        file); ``None`` when it is not in the log yet or the log cannot be read (the tail
        says why)."""
        if engine.spec is None:
            return None
        try:
            if self._repo is None or self._repo.path != self._monitor.path:
                if self._repo is not None:
                    self._repo.close()
                self._repo = LogRepository(self._monitor.path)
            return self._repo.run_now(engine.spec.run_id)
        except LogUnavailable:
            return None

    def _stop_auto(self) -> None:
        # The lead run is done: killing the others on and on would only keep them from ever
        # finishing (and their time to finish from being known).
        self._seconds = 0.0
        self._auto.stop()
        self._back.stop()
        self.state_changed.emit()

    def _engine_changed(self) -> None:
        if not self.engines[0].working and self._seconds:
            self._stop_auto()
        if not self.working and self.window_armed:
            self.window_armed = False
            self.state_changed.emit()


def _over(now: RunNow | None) -> bool:
    return now is not None and now.status in TERMINAL


def _at_work(engine: EngineProcess, now: RunNow | None) -> bool:
    """Whether ``engine`` holds the lease of its run (``now``), or the run is over (nothing to
    wait for)."""
    if _over(now):
        return True
    at_work = engine.working and not engine.relaunching
    return at_work and now is not None and now.lease_pid == engine.pid
