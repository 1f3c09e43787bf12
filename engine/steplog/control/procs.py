"""Child processes, the one way: steplog's own commands run as ``python -P -m ...`` in a new
process group, with this steplog first on their path, and are stopped or killed as a group.

Why each part:
- ``-P``: ``python -m`` would put the working directory first on ``sys.path``, and a folder that
  merely *contains* a ``steplog/`` directory (the parent of a clone) would shadow the package; the
  working directory is appended after the package instead, so agents beside it still import.
- ``PYTHONPATH``: the child imports the same steplog as this process, installed or not, then the
  project paths this process has (an agent importable here is importable there).
- a new session (process group): ``kill_group`` is ``killpg(SIGKILL)``, which takes the engine
  and anything it started and nothing else; a Ctrl-C in the terminal reaches the parent only.
- frozen (the PyInstaller bundle in ``packaging/``): there is no ``python -m``, so children are
  the bundle's own executable with the hidden ``__module__`` argument, which runs the module the
  same way; the argv without a bundle is unchanged.

On Windows (checked with ``mypy --platform win32``; not run here): a ``CREATE_NEW_PROCESS_GROUP``
child, stopped by ``CTRL_BREAK_EVENT`` (the engine's stop signal there, like SIGTERM) and killed
with its whole tree of descendants through psutil (``TerminateProcess`` on each), the nearest
thing to a group SIGKILL without a Job Object.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

from steplog.log.launch import DIE_WITH_PARENT_ENV
from steplog.log.location import without_secrets as without_secrets

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The folder holding this ``steplog/`` package."""


FROZEN_RUN_MODULE = "__module__"
"""The hidden first argument of a frozen (PyInstaller) steplog executable: ``steplog __module__
MODULE ARGS...`` runs ``MODULE`` as ``__main__`` with ``ARGS`` (see ``run_module_as_main``)."""


def python_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """``[python, -P, -m, module, *args]`` with this interpreter; in a frozen bundle, which has
    no interpreter to give ``-m`` to, ``[the bundle's executable, __module__, module, *args]``.
    ``python``: another interpreter (a person's own environment, for their own agent)."""
    if python is not None:
        return [python, "-P", "-m", module, *args]
    if getattr(sys, "frozen", False):
        return [sys.executable, FROZEN_RUN_MODULE, module, *args]
    return [sys.executable, "-P", "-m", module, *args]


def run_module_as_main(argv: Sequence[str]) -> None:
    """What a frozen executable does with ``[FROZEN_RUN_MODULE, module, *args]``: what ``python -m
    module args`` does (``sys.argv`` is ``[module, *args]``; ``SystemExit`` passes through)."""
    import runpy

    if len(argv) < 2 or argv[0] != FROZEN_RUN_MODULE:
        raise SystemExit(f"usage: steplog {FROZEN_RUN_MODULE} MODULE [ARGS...]")
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


def child_pythonpath(extra: Sequence[str] = ()) -> str:
    """The package root, then ``extra``, then this process's own project paths (not the stdlib
    or site-packages), then the working directory."""
    prefixes = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    out = [str(PACKAGE_ROOT)]
    try:
        cwd = [os.getcwd()]
    except OSError:  # the working directory was deleted: nothing to add
        cwd = []
    candidates = [*extra, *sys.path, *os.environ.get("PYTHONPATH", "").split(os.pathsep), *cwd]
    for entry in candidates:
        if not entry or not Path(entry).is_dir():
            continue
        resolved = str(Path(entry).resolve())
        if (
            resolved.startswith(prefixes)
            or "site-packages" in resolved
            or "dist-packages" in resolved
        ):
            continue
        if resolved not in out:
            out.append(resolved)
    return os.pathsep.join(out)


def child_env(base: Mapping[str, str] | None = None, *, drop: Sequence[str] = ()) -> dict[str, str]:
    """``base`` (default: this environment) without ``drop``, with ``PYTHONPATH`` set as above."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    env["PYTHONPATH"] = child_pythonpath()
    return env


def outside_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this environment) for a program from *outside* this app: in a frozen
    bundle on Linux the bootloader prepends the bundle's library folder to ``LD_LIBRARY_PATH``
    (keeping the original in ``LD_LIBRARY_PATH_ORIG``), and another Python would load the
    bundle's libssl, libsqlite3 or libpython instead of its own."""
    env = dict(os.environ if base is None else base)
    if getattr(sys, "frozen", False) and sys.platform.startswith("linux"):
        original = env.pop("LD_LIBRARY_PATH_ORIG", None)
        if original:
            env["LD_LIBRARY_PATH"] = original
        else:
            env.pop("LD_LIBRARY_PATH", None)
    return env


_JOBS: dict[int, Any] = {}
"""Windows: the Job Object of each process ``spawn`` started, by pid (``hard_kill`` ends the
job)."""


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a process group of its own, stdin closed, no password on its command
    line (``without_secrets``).

    On Windows, a process group of its own (so ``CTRL_BREAK_EVENT`` reaches it alone) inside a Job
    Object of its own: the process is created suspended, put in the job, then resumed, so
    everything it ever starts is in the job too and ``hard_kill`` ends them all at once, the way
    SIGKILL to a POSIX process group does."""
    argv, env = without_secrets(argv, env)
    if sys.platform == "win32":
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=cwd,
            creationflags=subprocess.CREATE_NEW_PROCESS_GROUP | _CREATE_SUSPENDED,
        )
        _into_job(popen.pid)
        return popen
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def die_with_parent() -> None:
    """If ``DIE_WITH_PARENT_ENV`` names this process's parent, arrange to be SIGKILLed when it
    dies: a worker killed with SIGKILL takes its engines with it (as a kill of the whole tree
    would), so their runs' leases are free for another worker at once. Linux: the kernel does
    it (``prctl(PR_SET_PDEATHSIG)``); elsewhere a thread watches the parent every 0.2 s. A parent
    already gone by now is noticed too. The variable is removed, so grandchildren are unaffected."""
    value = os.environ.pop(DIE_WITH_PARENT_ENV, "")
    if not value.isdigit():
        return
    parent = int(value)
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:  # it died before the prctl: we were reparented already
                os._exit(137)
            return
    import threading

    def watch() -> None:
        while _alive(parent) and (sys.platform == "win32" or os.getppid() == parent):
            time.sleep(0.2)
        os._exit(137)  # as if killed: nothing is flushed, the lease is left to the next engine

    threading.Thread(target=watch, name="steplog-parent-watch", daemon=True).start()


_CREATE_SUSPENDED = 0x00000004  # winbase.h; subprocess has no name for it


def _into_job(pid: int) -> None:
    """Windows: put suspended process ``pid`` in a new Job Object, then let it run. If the job
    cannot be made (an outer job that forbids nesting), it runs without one and ``hard_kill``
    falls back to killing its process tree."""
    if sys.platform != "win32":
        raise NotImplementedError("Job Objects are Windows only")
    import psutil
    import win32api
    import win32con
    import win32job

    try:
        # A PyHANDLE (types-pywin32's stub says None).
        job = cast(Any, win32job.CreateJobObject)(None, "")
        handle = win32api.OpenProcess(
            win32con.PROCESS_SET_QUOTA | win32con.PROCESS_TERMINATE, False, pid
        )
        try:
            win32job.AssignProcessToJobObject(cast(int, job), handle)
        finally:
            win32api.CloseHandle(handle)
        _JOBS[pid] = job
    except win32job.error:
        pass
    finally:
        psutil.Process(pid).resume()  # created suspended: nothing of it ran outside the job


def hard_kill(proc: subprocess.Popen[Any]) -> bool:
    """Kill ``proc`` and everything it started, without warning (SIGKILL to the group; on Windows
    ``TerminateJobObject``); do not wait. False if it was gone already."""
    if sys.platform == "win32":
        job = _JOBS.pop(proc.pid, None)
        if job is None:
            return _kill_tree(proc.pid)
        import win32job

        alive = proc.poll() is None
        try:
            win32job.TerminateJobObject(cast(int, job), 1)
        except win32job.error:
            return _kill_tree(proc.pid)
        return alive
    return _signal_group(proc.pid, signal.SIGKILL)


def request_stop(proc: subprocess.Popen[Any]) -> bool:
    """Ask ``proc``'s group to stop (SIGTERM; CTRL_BREAK_EVENT on Windows): a steplog engine
    stops at a safe point and releases its lease. False if it was gone already."""
    if sys.platform == "win32":
        try:
            proc.send_signal(signal.CTRL_BREAK_EVENT)
        except (OSError, ValueError):
            return False
        return True
    return _signal_group(proc.pid, signal.SIGTERM)


def _signal_group(group: int, sig: int) -> bool:
    if sys.platform == "win32":
        raise NotImplementedError("process groups are signalled on POSIX only")
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_tree(pid: int) -> bool:
    """Kill ``pid`` and all its descendants (children first listed, then killed all at once)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return True


def kill_group(proc: subprocess.Popen[Any]) -> float:
    """SIGKILL ``proc``'s whole group without warning; returns the time of the kill once the
    leader is reaped."""
    at = time.time()
    hard_kill(proc)
    proc.wait()
    return at


def stop_group(proc: subprocess.Popen[Any], grace: float) -> int:
    """SIGTERM the group (a steplog engine stops at a safe point and releases its lease), SIGKILL
    it after ``grace`` seconds, and SIGKILL whatever is left of the group; returns the exit code."""
    if proc.poll() is None:
        request_stop(proc)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            hard_kill(proc)
            proc.wait()
    if sys.platform != "win32":
        _signal_group(proc.pid, signal.SIGKILL)  # grandchildren may outlive the leader
    return int(proc.returncode)


def stop_after(leader: int, group: int, *, poll: float = 0.5) -> None:
    """Wait until process ``leader`` is gone, then stop process group ``group`` (SIGTERM, SIGKILL
    after 5 s). A left-behind helper (the demo's outbox) thus lives exactly as long as the engine
    it serves, when the window that owned both closes and the person chose to leave the engine
    running. Run detached as ``python -P -m steplog.control.procs stop-after LEADER GROUP``."""
    while _alive(leader):
        time.sleep(poll)
    if sys.platform == "win32":
        _kill_tree(
            group
        )  # no SIGTERM to a group there: the helper (the outbox) keeps no state to save
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        if not _signal_group(group, sig):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _alive(group):
            time.sleep(0.05)
        if not _alive(group):
            return


def _alive(pid: int) -> bool:
    if sys.platform == "win32":
        import psutil

        return bool(psutil.pid_exists(pid))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def spawn_stop_after(leader: int, group: int) -> subprocess.Popen[bytes]:
    """Start the detached ``stop_after`` watcher (its own session: it outlives the caller)."""
    return spawn(
        python_argv("steplog.control.procs", "stop-after", str(leader), str(group)),
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "stop-after":
        stop_after(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: python -m steplog.control.procs stop-after LEADER_PID GROUP_PID")
