"""Pruning selected runs from the monitor: the size it frees first, then ``steplog prune`` itself.

The monitor never writes the log: it reads what pruning would free (``steplog.log.prune.estimate``,
read-only, off the GUI thread) and runs the command as a child process, the one way the engine's
own commands are started (``steplog.control.procs``). The tailer then sees the ``runs_pruned``
event and the runs leave the list.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from steplog.control.procs import child_env, python_argv, spawn
from steplog.log.db import hand_over
from steplog.log.location import LogLocation
from steplog.log.prune import Candidate, estimate
from steplog_gui import jobs

POLL_MS = 100


def describe_estimate(found: Sequence[Candidate]) -> str:
    """ "3 runs, 12,345 rows, about 4.2 MB"."""
    rows = sum(sum(c.rows.values()) for c in found)
    size = sum(c.bytes for c in found)
    amount = f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.0f} kB"
    return f"{len(found)} run{'s' if len(found) != 1 else ''}, {rows:,} rows, about {amount}"


class Pruner(QObject):
    """Estimates and prunes runs of one log through ``steplog prune``."""

    estimated = Signal(object)
    """The ``steplog.log.prune.Candidate`` list for the runs asked about (what pruning frees)."""
    refused = Signal(str)
    """Why those runs cannot be pruned (one line: a run is running, unknown, held...)."""
    finished = Signal(int, str)
    """(exit code, one line) when ``steplog prune`` ended: what it pruned and reclaimed, or why
    not."""

    def __init__(
        self,
        log: Callable[[], LogLocation],
        parent: QObject | None = None,
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(parent)
        self._log = log
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: Path | None = None
        self._err: Path | None = None
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._check)

    @property
    def busy(self) -> bool:
        return self._proc is not None

    def estimate(self, run_ids: Sequence[str]) -> None:
        """Read what pruning ``run_ids`` frees (off the GUI thread); ``estimated`` or ``refused``
        follows."""
        path, ids = self._log(), tuple(run_ids)
        jobs.submit(
            lambda: estimate(path, ids),
            self.estimated.emit,
            lambda exc: self.refused.emit(str(exc)),
            owner=self,
        )

    def prune(self, run_ids: Sequence[str], *, archive: Path | None = None) -> None:
        """Start ``steplog prune RUN_ID... --db LOG [--archive FILE]``; ``finished`` follows."""
        if self._proc is not None:
            raise RuntimeError("a prune is already running")
        # A file on the command line; a URL in the environment (it may carry a password).
        where, env = hand_over(self._log())
        args = ["prune", *run_ids, *where]
        if archive is not None:
            args += ["--archive", str(archive)]
        out_fd, out = tempfile.mkstemp(prefix="steplog-prune-", suffix=".out")
        err_fd, err = tempfile.mkstemp(prefix="steplog-prune-", suffix=".err")
        self._out, self._err = Path(out), Path(err)
        try:
            self._proc = spawn(
                python_argv("steplog", *args),
                stdout=out_fd,
                stderr=err_fd,
                env={**child_env(self._env), **env},
            )
        finally:
            os.close(out_fd)
            os.close(err_fd)
        self._poll.start()

    def _check(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        self._poll.stop()
        self._proc = None
        text = ""
        for path in (self._out, self._err):
            if path is not None:
                if not text:
                    lines = [
                        ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()
                    ]
                    text = (
                        " ".join(ln.strip() for ln in lines)
                        if proc.returncode == 0
                        else (lines[-1] if lines else "")
                    )
                path.unlink(missing_ok=True)
        self.finished.emit(
            int(proc.returncode), text or f"steplog prune exited with code {proc.returncode}"
        )

    def wait(self, timeout: float = 60) -> None:
        """Block until the running prune exits (tests, shutdown); ``finished`` is emitted."""
        if self._proc is not None:
            self._proc.wait(timeout)
            self._check()


def ask_and_prune(
    parent: QWidget, pruner: Pruner, run_ids: Sequence[str], found: Sequence[Candidate]
) -> None:
    """The dialog: what goes and what it frees; prune, archive then prune, or cancel."""
    box = QMessageBox(parent)
    box.setWindowTitle("Prune runs")
    box.setIcon(QMessageBox.Icon.Question)
    box.setText(f"Remove {describe_estimate(found)} from the log?")
    box.setInformativeText(
        "Only these finished runs' records go (their workdir files stay). An archive can be "
        "loaded back with `steplog import`."
    )
    prune_button = box.addButton("Prune", QMessageBox.ButtonRole.DestructiveRole)
    archive_button = box.addButton("Archive, then prune…", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    if clicked is prune_button:
        pruner.prune(run_ids)
    elif clicked is archive_button:
        name, _ = QFileDialog.getSaveFileName(
            parent, "Archive the runs to", "steplog-runs.jsonl.gz", "steplog archives (*.jsonl.gz)"
        )
        if name:
            pruner.prune(run_ids, archive=Path(name))
