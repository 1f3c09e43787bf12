"""Smoke-test a built app: ``python packaging/smoke.py [dist/steplog/steplog]``.

Everything goes through the bundle's own executable, as a person would use it:
1. ``steplog --version``: the command line starts (its start-up time is printed);
2. ``steplog killtest demo --kills 3 --param tickets=4``: PASS with kills landed, the engines
   and the outbox being the bundle's own processes;
3. ``steplog demo``: the monitor opens with the demo running; under Xvfb (when ``Xvfb`` and
   ``xdotool`` are installed) Ctrl+K, the monitor's Kill now, kills the engine mid-run, the monitor
   relaunches it and the run ends ``succeeded``, and a screenshot of the screen is saved
   (``--screenshot``, with ImageMagick's ``import``); without them the monitor runs offscreen
   and the kill is left out (said so on the output). Then SIGTERM: the app exits 0 and leaves no
   process behind.
Exit 0 when every part passed; the first failure is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXE = ROOT / "dist" / "steplog" / ("steplog.exe" if sys.platform == "win32" else "steplog")
DEMO_TIMEOUT_S = 240.0


class SmokeFailure(Exception):
    """One part of the smoke test failed; the message says which and why."""


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, alive: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if alive is not None and alive.poll() is not None:
            raise SmokeFailure(f"the app exited ({alive.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise SmokeFailure(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    """Read-only, like the monitor; nothing while the log does not exist yet."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the schema is being created
        return []
    finally:
        conn.close()


def count(db: Path, kind: str) -> int:
    rows = query(db, f"SELECT count(*) FROM event WHERE kind = '{kind}'")
    return int(str(rows[0][0])) if rows else 0


def check_cli(exe: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [str(exe), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    if done.returncode != 0 or "version" not in done.stdout:
        raise SmokeFailure(
            f"steplog --version exited {done.returncode}: {done.stderr.strip()[-300:]}"
        )
    return took


def check_killtest(exe: Path, env: dict[str, str], work: Path) -> str:
    """PASS with at least one kill landed. Four tickets, not two: the bundle's engine runs the
    two-ticket demo in ~0.3 s, and then most planned kills come after the run has finished."""
    done = subprocess.run(
        [str(exe), "killtest", "demo", "--kills", "3", "--param", "tickets=4"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    if done.returncode != 0 or "verdict: PASS" not in out:
        raise SmokeFailure(f"killtest exited {done.returncode}: {out.strip()[-600:]}")
    storm = next(
        (ln.strip() for ln in out.splitlines() if ln.startswith("storm:") and "kills" in ln), ""
    )
    landed = re.match(r"storm: (\d+) kills", storm)
    if landed is None or int(landed.group(1)) < 1:
        raise SmokeFailure(f"killtest passed without killing anything: {storm!r}")
    return storm


def start_xvfb(work: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    if not (shutil.which("Xvfb") and shutil.which("xdotool")):
        return None
    for n in range(90, 110):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            display = f":{n}"
            break
    else:
        return None
    proc = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=(work / "xvfb.log").open("wb"),
    )
    wait_for("Xvfb", lambda: Path(f"/tmp/.X11-unix/X{display[1:]}").exists(), 15)
    return proc, display


def processes_in(work: Path) -> list[int]:
    """Processes whose command line names the smoke test's folder (the app's engines, outbox)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(work) in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid():
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def window_shown(env: dict[str, str]) -> bool:
    found = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", "steplog"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return bool(found.stdout.split())


def press_kill_now(env: dict[str, str]) -> None:
    """Ctrl+K in the monitor's window, as a person would press it."""
    found = subprocess.run(
        ["xdotool", "search", "--sync", "--onlyvisible", "--name", "steplog"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    windows = found.stdout.split()
    if not windows:
        raise SmokeFailure("no monitor window on the X display")
    subprocess.run(
        ["xdotool", "windowfocus", "--sync", windows[-1]], env=env, check=True, timeout=30
    )
    subprocess.run(
        ["xdotool", "key", "--clearmodifiers", "ctrl+k"], env=env, check=True, timeout=30
    )


def check_monitor(exe: Path, env: dict[str, str], work: Path, screenshot: Path | None) -> list[str]:
    db = work / "monitor" / "steplog.db"
    db.parent.mkdir()
    env = {**env, "STEPLOG_DB": str(db), "XDG_CONFIG_HOME": str(work / "config")}
    notes = []
    xvfb = start_xvfb(work)
    if xvfb is None:
        env["QT_QPA_PLATFORM"] = "offscreen"
        notes.append("monitor offscreen (no Xvfb/xdotool): Kill now and the screenshot left out")
    else:
        env["DISPLAY"] = xvfb[1]
        env.pop("QT_QPA_PLATFORM", None)
        env.pop("WAYLAND_DISPLAY", None)
    started = time.monotonic()
    app = subprocess.Popen(
        [str(exe), "demo"],
        env=env,
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=(work / "app.log").open("w"),
        text=True,
    )
    try:
        if xvfb is not None:
            wait_for("the monitor's window", lambda: window_shown(env), 60, app)
            notes.append(f"monitor: window shown {time.monotonic() - started:.1f} s after launch")
        wait_for("the demo's first step", lambda: count(db, "step_committed") >= 1, 60, app)
        notes.append(
            f"monitor: first demo step committed {time.monotonic() - started:.1f} s after launch"
        )
        if xvfb is not None:
            wait_for("the demo's third step", lambda: count(db, "step_committed") >= 3, 60, app)
            press_kill_now(env)
            wait_for(
                "the engine relaunched after Kill now",
                lambda: count(db, "lease_acquired") >= 2,
                30,
                app,
            )
            notes.append("Kill now (Ctrl+K): engine killed and relaunched by the monitor")
            if screenshot is not None:
                time.sleep(2.0)  # the timeline shows the kill and the new lane
                subprocess.run(
                    ["import", "-display", xvfb[1], "-window", "root", str(screenshot)],
                    check=True,
                    timeout=60,
                )
                notes.append(f"screenshot: {screenshot}")
            wait_for(
                "the demo run to succeed",
                lambda: query(db, "SELECT status FROM run") == [("succeeded",)],
                DEMO_TIMEOUT_S,
                app,
            )
            steps = query(db, "SELECT count(*) FROM step")
            notes.append(
                f"demo run succeeded after the kill ({steps[0][0] if steps else '?'} steps)"
            )
        app.send_signal(signal.SIGTERM)
        code = app.wait(timeout=30)
        if code != 0:
            raise SmokeFailure(f"the monitor exited {code} on SIGTERM; see {work / 'app.log'}")
        leases = query(
            db,
            "SELECT lease_pid FROM run WHERE status NOT IN ('succeeded', 'failed', 'gave_up', "
            "'cancelled')",
        )
        if any(pid is not None for (pid,) in leases):
            raise SmokeFailure("an engine still holds its lease after the monitor exited")
        wait_for(
            "the engine and the outbox to exit after the monitor",
            lambda: not processes_in(work),
            15,
        )
        notes.append("SIGTERM: the monitor exited 0, its engine and outbox with it")
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        if app.stdout:
            app.stdout.close()
        if xvfb is not None:
            xvfb[0].terminate()
            xvfb[0].wait()
    return notes


def main() -> int:
    parser = argparse.ArgumentParser(description="Smoke-test the built steplog app.")
    parser.add_argument(
        "exe", nargs="?", type=Path, default=DEFAULT_EXE, help=f"the app (default: {DEFAULT_EXE})"
    )
    parser.add_argument(
        "--screenshot", type=Path, default=None, help="save a PNG of the monitor here (Xvfb only)"
    )
    args = parser.parse_args()
    exe = args.exe.resolve()
    if not exe.is_file():
        print(
            f"error: no built app at {exe}; build it with python packaging/build.py",
            file=sys.stderr,
        )
        return 1
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPLOG_", "PYTHON"))}
    with tempfile.TemporaryDirectory(prefix="steplog-smoke-") as tmp:
        work = Path(tmp)
        env["STEPLOG_DB"] = str(work / "cli.db")
        try:
            print(f"cli: steplog --version in {check_cli(exe, env):.2f} s")
            print(f"killtest: PASS, {check_killtest(exe, env, work)}")
            for note in check_monitor(exe, env, work, args.screenshot):
                print(note)
        except (SmokeFailure, subprocess.SubprocessError, OSError) as exc:
            print(f"smoke test FAILED: {exc}", file=sys.stderr)
            log = work / "app.log"
            if log.exists():
                print(log.read_text(errors="replace")[-2000:], file=sys.stderr)
            return 1
    print("smoke test PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
