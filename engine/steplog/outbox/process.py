"""Run the outbox as a child process in its own session: the demo, the kill test and the tests use
it.

Its own session (process group) means a SIGKILL aimed at an engine's group never takes the
outbox with it, and a Ctrl-C in the terminal reaches the parent only; the parent ends it
explicitly with ``stop()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from steplog.control.procs import child_env, python_argv, spawn, stop_group
from steplog.errors import EXIT_USAGE, SteplogError, UsageError
from steplog.outbox.ledger import Ledger

POLL_SECONDS = 0.01
STOP_GRACE_SECONDS = 5.0


class OutboxProcess:
    """A running outbox child: its URL, port and pid; ``stop()`` or ``with`` ends it."""

    def __init__(
        self, popen: subprocess.Popen[bytes], *, host: str, port: int, db: Path, scratch: Path
    ) -> None:
        self.popen = popen
        self.host = host
        self.port = port
        self.db = db
        self._scratch = scratch  # port file and stderr log, removed by stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def ledger(self) -> Ledger:
        """``GET /messages`` on this outbox."""
        from steplog.outbox.client import fetch_ledger

        return fetch_ledger(self.url)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; returns the exit code.
        Idempotent."""
        code = stop_group(self.popen, grace)
        shutil.rmtree(self._scratch, ignore_errors=True)
        return code

    def __enter__(self) -> OutboxProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"OutboxProcess(url={self.url!r}, pid={self.pid}, db={str(self.db)!r})"


def start_outbox(
    db: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    delay: float = 0.0,
    timeout: float = 10.0,
) -> OutboxProcess:
    """Start ``python -m steplog.outbox`` on ``db`` and return once it is listening.

    Raises ``UsageError`` when the child refuses its options (port in use, foreign data file),
    and ``SteplogError`` when it crashes or is not listening within ``timeout`` seconds; either
    message carries the child's stderr.
    """
    scratch = Path(tempfile.mkdtemp(prefix="steplog-outbox-"))
    port_file = scratch / "port"
    argv = python_argv(
        "steplog.outbox",
        "--db", str(db), "--host", host, "--port", str(port),
        "--port-file", str(port_file), "--delay", repr(float(delay)),
    )  # fmt: skip
    with open(scratch / "stderr.log", "wb") as stderr:
        popen = spawn(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=child_env())
    deadline = time.monotonic() + timeout
    while True:
        if port_file.exists():  # written atomically: it exists only with the whole number in it
            bound = int(port_file.read_text(encoding="ascii").strip())
            return OutboxProcess(popen, host=host, port=bound, db=Path(db), scratch=scratch)
        code = popen.poll()
        if code is not None or time.monotonic() > deadline:
            if code is None:
                popen.kill()
                popen.wait()
            stderr_text = (scratch / "stderr.log").read_text(errors="replace").strip()
            shutil.rmtree(scratch, ignore_errors=True)
            raise _startup_error(code, stderr_text, timeout)
        time.sleep(POLL_SECONDS)


def _startup_error(code: int | None, stderr: str, timeout: float) -> SteplogError:
    last = stderr.splitlines()[-1] if stderr else ""
    if code == EXIT_USAGE and last.startswith("steplog: "):
        return UsageError(last.removeprefix("steplog: "))
    what = f"was not listening after {timeout:g} s" if code is None else f"exited with code {code}"
    detail = f": {stderr}" if stderr else " (no output on stderr)"
    return SteplogError(f"the outbox {what}{detail}")
