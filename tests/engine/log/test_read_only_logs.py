"""A log steplog cannot write (a read-only file, or a folder where -wal and -shm cannot be made):
``status``, ``runs`` and ``check`` read it without creating a file; ``run`` exits 2 saying why.

How "read-only" is made real: the tests run as root here, and root writes through mode 0444.
So, as root, the folder is a read-only bind mount inside a private mount namespace (``unshare
--mount``: the command sees EROFS, nothing outside that one process sees a mount) and a single
read-only file is ``chattr +i``; as any other user, plain ``chmod`` does both. A test skips, and
says why, where none of these is available.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS

ROOT = os.geteuid() == 0
Wrap = Callable[[list[str]], list[str]]


def _unshare_works(folder: Path) -> bool:
    probe = folder / "probe"
    probe.mkdir()
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0"'
            ' && ! touch "$0/x" 2>/dev/null',
            str(probe),
        ],
        capture_output=True,
    )
    shutil.rmtree(probe)
    return done.returncode == 0


@contextmanager
def read_only_folder(folder: Path) -> Iterator[Wrap]:
    """Run commands (through the returned argv wrapper) that see ``folder`` read-only."""
    if ROOT:
        if shutil.which("unshare") is None or not _unshare_works(folder.parent):
            pytest.skip(
                "running as root without unshare/mount: cannot make a folder read-only for root"
            )
        script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
        yield lambda argv: [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            str(folder),
            *argv,
        ]
        return
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}
    for p in modes:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield lambda argv: argv
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


@contextmanager
def read_only_file(path: Path) -> Iterator[Wrap]:
    """The file itself cannot be written; its folder can."""
    if ROOT:
        if (
            shutil.which("chattr") is None
            or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode
        ):
            pytest.skip("running as root without chattr +i: cannot make a file read-only for root")
        try:
            yield lambda argv: argv
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o444)
    try:
        yield lambda argv: argv
    finally:
        path.chmod(mode)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file in the folder and its bytes' hash: a read must leave this exactly as it was."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.fixture
def log(engine: Engine) -> Path:
    """A real log with one finished run ``done``, idle (no -wal beside it)."""
    done = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "done", "--param", "n=5", "--db", str(engine.db)
    )
    assert done.returncode == 0, done.stderr
    assert not Path(f"{engine.db}-wal").exists()
    return engine.db


def leave_a_wal(db: Path) -> None:
    """A writer that commits (the change lives only in -wal) and is then SIGKILLed, as an engine
    killed mid-run leaves it: -wal and -shm stay beside the log."""
    code = (
        "import os, signal, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute(\"UPDATE run SET reason = 'only in the wal' WHERE id = 'done'\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert subprocess.run([sys.executable, "-c", code, str(db)]).returncode == -signal.SIGKILL
    assert Path(f"{db}-wal").stat().st_size > 0 and Path(f"{db}-shm").exists()


def steplog(engine: Engine, wrap: Wrap, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wrap(engine.argv(*args)), capture_output=True, text=True, timeout=120, env=engine.env
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steplog: "), stderr
    return lines[0]


@pytest.mark.parametrize("state", ["idle", "left by a killed engine"])
def test_status_runs_and_check_read_a_log_in_a_read_only_folder_and_create_nothing(
    engine: Engine, log: Path, state: str
) -> None:
    if state != "idle":
        leave_a_wal(log)
    before = snapshot(log.parent)
    with read_only_folder(log.parent) as wrap:
        status = steplog(engine, wrap, "status", "done", "--db", str(log), "--json")
        runs = steplog(engine, wrap, "runs", "--db", str(log))
        check = steplog(engine, wrap, "check", "--db", str(log))
    assert status.returncode == 0, status.stderr
    assert '"status": "succeeded"' in status.stdout
    if state != "idle":
        assert "only in the wal" in status.stdout, "the committed change in -wal is read too"
    assert runs.returncode == 0 and "done" in runs.stdout, runs.stderr
    assert check.returncode == 0 and check.stdout.startswith("ok: 1 runs, 5 steps"), check.stderr
    assert snapshot(log.parent) == before


@pytest.mark.parametrize("run_id", ["new", "done"])
@pytest.mark.parametrize("what", ["folder", "file"])
def test_run_on_a_read_only_log_exits_2_saying_so_and_writes_nothing(
    engine: Engine, log: Path, what: str, run_id: str
) -> None:
    """A new run or a resume needs to write: refused before SQLite is asked to (it used to end
    in an ``attempt to write a readonly database`` traceback, leaving -wal and -shm behind)."""
    before = snapshot(log.parent)
    read_only = read_only_folder(log.parent) if what == "folder" else read_only_file(log)
    with read_only as wrap:
        done = steplog(
            engine,
            wrap,
            "run",
            f"{AGENTS}:noop",
            "--run-id",
            run_id,
            "--param",
            "n=5",
            "--db",
            str(log),
        )
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert f"{log} cannot be written" in line and "read-only" in line, line
    assert "make it writable" in line and "status" in line, line
    assert snapshot(log.parent) == before
