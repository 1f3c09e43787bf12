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

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.control.procs import (
    child_env,
    hard_kill,
    outside_env,
    python_argv,
    request_stop,
    spawn,
    stop_group,
)
from steplog.errors import exit_meaning
from steplog.log.location import LogLocation
from steplog_gui import startup_trace

POLL_MS = 50
STOP_GRACE_S = 5.0


@dataclass
class LaunchSpec:
    """What to run: the same spec relaunches the run after every kill."""

    agent: str
    run_id: str
    db: LogLocation
    outbox: str | None = None
    pace: float = 0.0
    params: dict[str, str] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    """CLI limit options without the leading dashes, e.g. {"max-steps": 100}."""
    python: str | None = None
    """The interpreter for a person's own agent (``steplog_gui.processes.interpreter``);
    ``None``: the monitor's."""

    def argv(self, killed_at: float | None = None) -> list[str]:
        """The command; ``killed_at`` (a relaunch after Kill now) is recorded with the takeover."""
        args = python_argv(
            "steplog",
            "run",
            self.agent,
            "--run-id",
            self.run_id,
            "--db",
            str(self.db),
            python=self.python,
        )
        if killed_at is not None:
            args += ["--killed-at", repr(killed_at)]
        if self.outbox:
            args += ["--outbox", self.outbox]
        if self.pace:
            args += ["--pace", repr(float(self.pace))]
        for k, v in self.params.items():
            args += ["--param", f"{k}={v}"]
        for name, limit in self.limits.items():
            args += [f"--{name}", str(limit)]
        return args


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
        fd, name = tempfile.mkstemp(prefix="steplog-engine-", suffix=".log")
        self._output_path = Path(name)
        killed_at, self._last_kill = self._last_kill, None
        try:
            # Another interpreter gets the environment as it is, none of the monitor's paths.
            env = child_env(self._env) if self.spec.python is None else outside_env(self._env)
            # Both streams in one file: the engine says how its run ended on stdout, why it
            # refused on stderr; the last line of either is shown with the exit code's meaning.
            self._proc = spawn(self.spec.argv(killed_at), stdout=fd, stderr=fd, env=env)
        finally:
            os.close(fd)
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
