"""What an engine process is started with, and starting it: no Qt here, so the demo can start its
engine on a plain thread before the monitor has imported Qt (``demo_start``)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from steplog.control.procs import child_env, outside_env, python_argv, spawn
from steplog.log.location import LogLocation


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


def spawn_engine(
    spec: LaunchSpec, env: dict[str, str] | None = None, killed_at: float | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the engine of ``spec`` in a process group of its own; its stdout and stderr go to
    the returned file (``EngineProcess`` shows the last line when it ends, then deletes it)."""
    fd, name = tempfile.mkstemp(prefix="steplog-engine-", suffix=".log")
    try:
        # Another interpreter gets the environment as it is, none of the monitor's paths.
        env = child_env(env) if spec.python is None else outside_env(env)
        # Both streams in one file: the engine says how its run ended on stdout, why it
        # refused on stderr; the last line of either is shown with the exit code's meaning.
        proc = spawn(spec.argv(killed_at), stdout=fd, stderr=fd, env=env)
    except BaseException:
        os.unlink(name)
        raise
    finally:
        os.close(fd)
    return proc, Path(name)
