"""Parallel steps against sequential ones, side by side in one process run (issue 11).

Not part of the normal test run. Run:

    python -m pytest tests/benchmarks/test_parallel_bench.py -s -p no:cacheprovider

Each figure is an agent's own timing of its loop inside a real ``steplog run`` engine process
(start-up not counted), modes taking turns over ``ROUNDS`` rounds:

1. 1,000 no-op steps: one after another (sync), ``run.map`` at concurrency 8 (threads), and
   ``asyncio.gather`` in an ``async def`` agent (all 1,000 called at once).
2. 8 model calls that take 100 ms each (the offline model at ``--pace 0.1``): sequential vs
   gathered. Targets: parallel no-op steps at least as fast as sequential; 8 parallel 100 ms calls
   in ~100 ms, not 800 ms.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import steplog

STEPS = 1000
CALLS = 8
ROUNDS = 3


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
def seq_noop(run: steplog.Run, n: int = STEPS) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        run.step(f"noop {i}", int, i)
    return time.perf_counter() - t0


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
def map_noop(run: steplog.Run, n: int = STEPS) -> float:
    t0 = time.perf_counter()
    run.map("noop", int, range(n), concurrency=8)
    return time.perf_counter() - t0


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
async def gather_noop(run: Any, n: int = STEPS) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(run.step(f"noop {i}", int, i) for i in range(n)))
    return time.perf_counter() - t0


@steplog.agent
def seq_chat(run: steplog.Run, n: int = CALLS) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        run.chat([{"role": "user", "content": f"q {i}"}], name=f"ask {i}", max_tokens=16)
    return time.perf_counter() - t0


@steplog.agent
async def gather_chat(run: Any, n: int = CALLS) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            run.chat([{"role": "user", "content": f"q {i}"}], name=f"ask {i}", max_tokens=16)
            for i in range(n)
        )
    )
    return time.perf_counter() - t0


def _run(tmp: Path, agent: str, run_id: str, *extra: str) -> float:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "steplog",
            "run",
            f"{__file__}:{agent}",
            "--run-id",
            run_id,
            "--db",
            str(tmp / f"{agent}.db"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return float(json.loads(done.stdout.split(": ", 1)[1]))


def test_parallel_steps_side_by_side(tmp_path: Path) -> None:
    modes = {
        "no-op x1000, sequential": ("seq_noop", ()),
        "no-op x1000, run.map concurrency 8": ("map_noop", ()),
        "no-op x1000, asyncio.gather": ("gather_noop", ()),
        "8 model calls of 100 ms, sequential": ("seq_chat", ("--pace", "0.1")),
        "8 model calls of 100 ms, gathered": ("gather_chat", ("--pace", "0.1")),
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(ROUNDS):
        for mode, (agent, extra) in modes.items():
            times[mode].append(_run(tmp_path, agent, f"r{r}", *extra))
    base = statistics.median(times["no-op x1000, sequential"])
    print(f"\n{'mode':<40} {'median s':>9} {'min-max s':>15} {'steps/s':>9} {'vs sequential':>14}")
    for mode, ts in times.items():
        med = statistics.median(ts)
        n = STEPS if "no-op" in mode else CALLS
        ref = (
            base
            if "no-op" in mode
            else statistics.median(times["8 model calls of 100 ms, sequential"])
        )
        print(
            f"{mode:<40} {med:>9.3f} {min(ts):>7.3f}-{max(ts):<7.3f} {n / med:>9.0f} "
            f"{ref / med:>13.2f}x"
        )
