"""Start, kill and relaunch one engine process (``steplog run``) for one run.

The engine runs in its own process group (``steplog.control.procs``), so ``kill_now`` is a
``killpg(SIGKILL)`` that leaves no grandchild behind; the time of the kill goes to the relaunched
engine (``--killed-at``), which records it, so a reopened run shows the kill exactly as seen
live. After a kill the same command (same run id) is relaunched as soon as the dead process is
reaped; the engine takes the dead holder's lease at once and resumes. Exits are noticed by a
50 ms ``poll()`` timer: nothing here ever blocks the GUI thread on the process.

When to kill (Kill now for all of a window's engines, auto-kill, the act→record window) is
``kill_switch.KillSwitch``'s; this module only kills when told.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.control.procs import hard_kill, request_stop, stop_group
from steplog.errors import exit_meaning
from steplog_gui import startup_trace
from steplog_gui.processes.launch import LaunchSpec, spawn_engine

__all__ = ["EngineProcess", "LaunchSpec"]

POLL_MS = 50
STOP_GRACE_S = 5.0


class EngineProcess(QObject):
    """The engine working on one run: launched, killed and relaunched, stopped."""

    engine_started = Signal(str, int)
    """(run_id, pid) of a new engine process (first launch or relaunch)."""
    engine_killed = Signal(str, float)
    """(run_id, time.time() of the SIGKILL)."""
    engine_exited = Signal(str, int, str)
    """(run_id, exit code, one line saying what it means) when it ended on its own."""
    state_changed = Signal()
    """Started, killed or ended (buttons follow it)."""

    def __init__(self, parent: QObject | None = None, *, env: dict[str, str] | None = None) -> None:
        super().__init__(parent)
        self._env = env
        self.spec: LaunchSpec | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._output_path: Path | None = None
        self._killed_by_us = False
        self._last_kill: float | None = None
        self._stopping = False
        self.kills = 0
        """SIGKILLs of this run's engine since it was started on this run."""
        self.last_exit: tuple[int, str] | None = None
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._check)
        self._stop_deadline = 0.0

    # -- state ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def relaunching(self) -> bool:
        """Killed by ``kill_now``: gone, or about to be, and relaunched once reaped."""
        return self._killed_by_us and not self._stopping and self._proc is not None

    @property
    def working(self) -> bool:
        """On its run: running and not asked to stop, or killed and about to be relaunched."""
        return self.relaunching or (self.running and not self._stopping)

    # -- control ----------------------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> None:
        """Launch (or relaunch) ``spec``; a previous process must be gone."""
        if self.running:
            raise RuntimeError("an engine is already running; stop it first")
        if self.spec is None or self.spec.run_id != spec.run_id:
            self.kills = 0
        self.spec = spec
        self._stopping = False
        self._launch()

    def _launch(self) -> None:
        assert self.spec is not None
        self._forget_output()
        killed_at, self._last_kill = self._last_kill, None
        self._proc, self._output_path = spawn_engine(self.spec, self._env, killed_at)
        self._started()

    def adopt(self, spec: LaunchSpec, proc: subprocess.Popen[bytes], output: Path) -> None:
        """Take over an engine already started for ``spec`` (``spawn_engine`` on another thread:
        the demo's, started before the window was up) as if ``start`` had launched it."""
        if self.running:
            raise RuntimeError("an engine is already running; stop it first")
        self.kills = 0
        self.spec = spec
        self._stopping = False
        self._forget_output()
        self._proc, self._output_path = proc, output
        self._started()

    def _started(self) -> None:
        assert self.spec is not None and self._proc is not None
        self._killed_by_us = False
        startup_trace.mark("engine_spawned")
        self._poll.start()
        self.engine_started.emit(self.spec.run_id, self._proc.pid)
        self.state_changed.emit()

    def kill_now(self) -> bool:
        """SIGKILL the engine's process group; it is relaunched once reaped. False if none runs."""
        if not self.running or self._proc is None or self.spec is None or self._killed_by_us:
            return False  # nothing to kill, or the last kill is not reaped and relaunched yet
        ts = time.time()
        if not hard_kill(self._proc):
            return False
        self._last_kill = ts  # handed to the relaunched engine, which records it in the log
        self._killed_by_us = True
        self.kills += 1
        self.engine_killed.emit(self.spec.run_id, ts)
        self.state_changed.emit()
        return True

    def stop(self) -> None:
        """SIGTERM (the engine releases its lease), SIGKILL after a grace period; no relaunch."""
        self._stopping = True
        if self.running and self._proc is not None:
            request_stop(self._proc)
            self._stop_deadline = time.monotonic() + STOP_GRACE_S
        self.state_changed.emit()

    def terminate_now(self, grace: float = 3.0) -> None:
        """Stop now without relaunch and reap (window closing, test teardown): SIGTERM so the
        engine releases its lease, SIGKILL to the group after ``grace`` seconds."""
        self._stopping = True
        if self._proc is not None:
            stop_group(self._proc, grace)
        self._poll.stop()

    def detach(self) -> None:
        """Leave the engine running on its own (closing the window, "leave it running")."""
        self._poll.stop()
        self._proc = None

    # -- watching ---------------------------------------------------------------------------

    def _check(self) -> None:
        proc = self._proc
        if proc is None:
            self._poll.stop()
            return
        code = proc.poll()
        if code is None:
            if self._stopping and self._stop_deadline and time.monotonic() > self._stop_deadline:
                hard_kill(proc)
            return
        assert self.spec is not None
        if self._killed_by_us and not self._stopping:
            self._launch()  # same run id: the engine resumes from its last checkpoint
            return
        self._poll.stop()
        message = self._describe_exit(code)
        self._forget_output()
        self.last_exit = (code, message)
        self.engine_exited.emit(self.spec.run_id, code, message)
        self.state_changed.emit()

    def _describe_exit(self, code: int) -> str:
        """One line: the exit code, its meaning (``steplog.errors.exit_meaning``, the one table of
        them) and, unless the run succeeded, the engine's last line (how it ended, or why not)."""
        if self._stopping:
            return "stopped; Resume continues it from its last checkpoint"
        detail = ""
        if self._output_path is not None:
            try:
                text = self._output_path.read_text(errors="replace")
                lines = [ln for ln in text.splitlines() if ln.strip()]
                detail = lines[-1].removeprefix("steplog: ") if lines else ""
            except OSError:
                pass
        if code == 2 and "import" in detail and self.spec is not None and self.spec.python is None:
            detail += (
                "; if it lives in another Python environment, choose that Python in Run → New run"
            )
        said = f"exit {code}" if code >= 0 else "no exit code"
        ended = f" — {detail}" if detail and code != 0 else ""
        return f"engine {said}: {exit_meaning(code)}{ended}"

    def _forget_output(self) -> None:
        """The last engine's output file, once read (one per launch: a kill storm made hundreds)."""
        if self._output_path is not None:
            try:
                self._output_path.unlink(missing_ok=True)
            except OSError:  # Windows: an engine left running still has it open
                pass
            self._output_path = None
