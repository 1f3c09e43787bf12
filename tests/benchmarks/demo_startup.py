"""``steplog demo`` from a cold start: the window up and the first step drawn (issue 29).

    python tests/benchmarks/demo_startup.py [--rounds 5] [--json FILE] [--tree DIR ...]

Each round launches ``python -m steplog demo --db FRESH`` (the console script's command line, its
exec into the monitor included) as a real process under ``QT_QPA_PLATFORM=offscreen``, with a
fresh log, fresh settings (a first launch) and ``STEPLOG_TRACE_STARTUP`` naming a file where the
monitor writes its milestones (``steplog_gui.startup_trace``). Times are seconds from just before
the launch. The engine's own milestones come from its log: ``run_created`` (the engine up, its
log open) and the first ``step_committed``. The round ends with SIGTERM, which stops the engine
and the outbox as a person's close would.

The code runs from bytecode with ``PYTHONDONTWRITEBYTECODE`` dropped, as an installed steplog
would (``peers.as_installed``). The machine may be shared: each round also times
``python -c "import PySide6.QtWidgets"`` the moment before, and the load average is printed, so
a figure can be read against what the machine gave everyone then.

Run by ``compare.py`` (figure ``monitor``), it records its medians beside issue 29's targets
(``targets.record``). ``--tree DIR`` (repeatable) launches the code of another checkout (an
export of an older commit that writes the same trace) instead of this one; with several, each
round launches each tree in turn, so a busier moment of the machine weighs on all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from peers import as_installed  # noqa: E402
from targets import record  # noqa: E402

WINDOW_TARGET_S = 1.5
FIRST_STEP_TARGET_S = 2.5
GUI_MILESTONES = (
    "main",
    "qapplication",
    "window_built",
    "window_painted",
    "outbox_listening",
    "engine_spawned",
    "views_ready",
    "first_step_drawn",
)
ORDER = (*GUI_MILESTONES[:6], "engine_run_created", "engine_first_step", *GUI_MILESTONES[6:])


def environment(trace: Path, home: Path, root: Path = ROOT) -> dict[str, str]:
    """The launched monitor's environment: the checkout ``root`` first, offscreen, a fresh
    config."""
    paths = [str(root / "engine"), str(root / "gui")]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STEPLOG_") and k not in ("PYTHONPATH", "DISPLAY")
    }
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        QT_QPA_PLATFORM="offscreen",
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        STEPLOG_TRACE_STARTUP=str(trace),
    )
    return as_installed(env, root / "engine", root / "gui")


def read_trace(trace: Path) -> dict[str, float]:
    marks: dict[str, float] = {}
    if trace.exists():
        for line in trace.read_text(encoding="utf-8").splitlines():
            stamp, _, name = line.partition(" ")
            marks.setdefault(name, float(stamp))
    return marks


def engine_marks(db: Path) -> dict[str, float]:
    """The engine's milestones from its log (``ts`` of the events, ``time.time()``)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        found = {}
        for kind, name in (
            ("run_created", "engine_run_created"),
            ("step_committed", "engine_first_step"),
        ):
            row = conn.execute("SELECT min(ts) FROM event WHERE kind = ?", (kind,)).fetchone()
            if row and row[0] is not None:
                found[name] = float(row[0])
        return found
    except sqlite3.Error:
        return {}
    finally:
        conn.close()


def import_qt_seconds(env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import PySide6.QtWidgets"], env=env, check=True)
    return time.perf_counter() - t


def one_round(root: Path = ROOT, timeout: float = 60.0) -> dict[str, float]:
    """One cold launch of the demo from the checkout ``root``; milestones in seconds since the
    launch."""
    with tempfile.TemporaryDirectory(prefix="steplog-demo-start-") as tmp:
        home = Path(tmp)
        trace, db = home / "trace.txt", home / "steplog.db"
        env = environment(trace, home, root)
        qt = import_qt_seconds(env)
        t0 = time.time()
        app = subprocess.Popen(
            [sys.executable, "-m", "steplog", "demo", "--db", str(db)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + timeout
            while "first_step_drawn" not in read_trace(trace):
                if app.poll() is not None:
                    raise RuntimeError(f"the demo exited {app.returncode}: {app.stderr.read()!r}")  # type: ignore[union-attr]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no step drawn after {timeout:g} s: {read_trace(trace)}")
                time.sleep(0.02)
            time.sleep(0.2)  # the engine's commit is in the log by now; let the trace settle
            marks = {**read_trace(trace), **engine_marks(db)}
        finally:
            app.send_signal(signal.SIGTERM)
            try:
                app.wait(timeout=30)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()
            if app.stderr:
                app.stderr.close()
        result = {name: marks[name] - t0 for name in ORDER if name in marks}
        result["import_qt"] = qt
        return result


def report(name: str, rounds: list[dict[str, float]], loads: list[float]) -> None:
    print(
        f"\n{name}: steplog demo, cold start, {len(rounds)} rounds, median (min-max) seconds since"
        f" launch; load average {min(loads):.1f}-{max(loads):.1f}"
    )
    targets = {"window_painted": WINDOW_TARGET_S, "first_step_drawn": FIRST_STEP_TARGET_S}
    for key in (*ORDER, "import_qt"):
        values = [r[key] for r in rounds if key in r]
        if not values:
            continue
        med, target = statistics.median(values), targets.get(key)
        note = ""
        if target:
            note = f"   target <= {target:.1f} s: {'met' if med <= target else 'MISSED'}"
        print(f"  {key:<20} {med:6.2f} ({min(values):.2f}-{max(values):.2f}){note}")
    qt = statistics.median(r["import_qt"] for r in rounds)
    for key in ("window_painted", "first_step_drawn"):
        values = [r[key] for r in rounds if key in r]
        if values:
            print(f"  {key} / import PySide6.QtWidgets: {statistics.median(values) / qt:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to launch")
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in args.tree] if args.tree else [ROOT]
    rounds: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    loads: list[float] = []
    for i in range(args.rounds):
        for tree in trees:
            loads.append(os.getloadavg()[0])
            r = one_round(tree)
            rounds[str(tree)].append(r)
            print(
                f"round {i + 1} {tree.name}: window painted {r.get('window_painted', 0):.2f} s, "
                f"first step drawn {r.get('first_step_drawn', 0):.2f} s "
                f"(import PySide6.QtWidgets {r['import_qt']:.2f} s, load {loads[-1]:.1f})",
                flush=True,
            )
    for tree in trees:
        report(str(tree), rounds[str(tree)], loads)
    if trees == [ROOT]:  # this checkout's figures, for compare.py's table of issue 29's targets
        mine = rounds[str(ROOT)]
        record("demo_window_s", statistics.median(r["window_painted"] for r in mine))
        record("demo_first_step_s", statistics.median(r["first_step_drawn"] for r in mine))
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
