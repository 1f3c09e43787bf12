"""Engine benchmarks: durable no-op step throughput and kill → resume latency.

Not part of the normal test run (``addopts`` ignores this folder). Run:

    python -m pytest tests/benchmarks -s -p no:cacheprovider

Everything is measured side by side in one process run and printed as a table with ratios,
against raw ``sqlite3`` doing one fsynced commit per step (the floor any SQLite engine sits on).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peers import as_installed

import steplog

STEPS = 3000
KILLS = 20


@steplog.agent(budget=steplog.Budget(max_steps=1_000_000, max_retries=None, max_recoveries=None))
def noop(run: steplog.Run, n: int = STEPS) -> int:
    for i in range(n):
        run.step("noop", int, i)
    return n


def raw_sqlite(path: Path, n: int, synchronous: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE step (seq INTEGER PRIMARY KEY, result TEXT)")
    t = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO step VALUES (?, ?)", (i, str(i)))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t
    conn.close()
    return n / elapsed


def steplog_steps(path: Path, n: int, synchronous: str) -> float:
    from steplog.runtime.engine import execute

    t = time.perf_counter()
    execute(noop, run_id="bench", db=path, params={"n": n}, synchronous=synchronous)  # type: ignore[arg-type]
    return n / (time.perf_counter() - t)


def resume_latencies(tmp: Path, kills: int) -> list[float]:
    """Kill a long no-op run at random points; time kill → first commit of the next engine."""
    import random

    db = tmp / "resume.db"
    engine = Path(__file__).parents[2] / "engine"
    env = {
        **as_installed(dict(os.environ), engine / "steplog"),
        "PYTHONPATH": os.pathsep.join([str(engine), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [
        sys.executable,
        "-m",
        "steplog",
        "run",
        f"{__file__}:noop",
        "--run-id",
        "r",
        "--db",
        str(db),
        "--param",
        "n=100000000",
    ]
    rng = random.Random(5)
    out: list[float] = []
    proc = subprocess.Popen(
        argv, env=env, start_new_session=True, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    for _ in range(kills + 1):
        deadline = time.monotonic() + 30
        while True:  # wait until this engine commits, then a little more
            inc = None
            if db.exists():
                conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
                try:
                    inc = conn.execute(
                        "SELECT max(incarnation) FROM event WHERE kind = 'step_committed'"
                    ).fetchone()[0]
                except sqlite3.OperationalError:
                    pass  # the schema is being created
                conn.close()
            if inc is not None and inc >= len(out) + 1:
                break
            assert time.monotonic() < deadline
            time.sleep(0.005)
        if len(out) == kills:
            break
        time.sleep(rng.uniform(0.05, 0.3))
        t_kill = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc = subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
            row = conn.execute(
                "SELECT min(ts) FROM event WHERE kind = 'step_committed' AND incarnation = ?",
                (len(out) + 2,),
            ).fetchone()
            conn.close()
            if row[0] is not None:
                out.append(row[0] - t_kill)
                break
            assert time.monotonic() < deadline
            time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return out


def test_engine_benchmarks(tmp_path: Path) -> None:
    rows = []
    for sync in ("FULL", "NORMAL"):
        raw = raw_sqlite(tmp_path / f"raw-{sync}.db", STEPS, sync)
        ours = steplog_steps(tmp_path / f"steplog-{sync}.db", STEPS, sync)
        rows.append((sync, raw, ours))
    lat = resume_latencies(tmp_path, KILLS)
    print()
    print(
        f"{'synchronous':<12} {'raw sqlite3 commits/s':>22} {'steplog no-op steps/s':>22} "
        f"{'ratio':>7}"
    )
    for sync, raw, ours in rows:
        print(f"{sync:<12} {raw:>22,.0f} {ours:>22,.0f} {ours / raw:>7.2f}")
    q = statistics.quantiles(lat, n=20)
    print(
        f"kill -> first step committed by the next engine, {len(lat)} kills: median "
        f"{statistics.median(lat) * 1000:.0f} ms, p95 {q[-1] * 1000:.0f} ms, max "
        f"{max(lat) * 1000:.0f} ms"
    )
