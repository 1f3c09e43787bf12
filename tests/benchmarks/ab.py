"""A/B of two checkouts of steplog on the no-op job: steps/s, CPU and bytes per step.

    python tests/benchmarks/ab.py old=/path/to/checkout-a new=/path/to/checkout-b ROUNDS N SYNC

Each round runs N durable no-op steps once per checkout, in turns, each in a fresh process with
that checkout's ``engine`` first on ``PYTHONPATH`` and its bytecode compiled (this machine sets
``PYTHONDONTWRITEBYTECODE``); prints medians (and the steps/s range). ``SYNC``: FULL or NORMAL.
Use ``git worktree add --detach DIR COMMIT`` for the other checkout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

CHILD = r"""
import json, sqlite3, sys, time
from pathlib import Path
import steplog
from steplog.log.db import open_log
from steplog.runtime.engine import execute
@steplog.agent(budget=steplog.Budget(max_steps=10**7, max_retries=None, max_recoveries=None))
def noop(run, n: int = 1000):
    for i in range(n):
        run.step("noop", int, i)
    return n
def size(db):
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    return db.stat().st_size
db, n, sync = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
open_log(db).close()
before = size(db)
t, cpu = time.perf_counter(), time.process_time()
execute(noop, run_id="bench", db=db, params={"n": n}, synchronous=sync)
el, cpu = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"sps": n / el, "cpu_us": cpu / n * 1e6, "bytes": (size(db) - before) / n}))
"""


def main(argv: list[str]) -> None:
    trees = dict(a.split("=", 1) for a in argv[:2])
    rounds, n, sync = int(argv[2]), int(argv[3]), argv[4]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", f"{tree}/engine"], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(rounds):
        for name, tree in trees.items():
            with tempfile.TemporaryDirectory() as d:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, f"{d}/b.db", str(n), sync],
                    env={**env, "PYTHONPATH": f"{tree}/engine"},
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    sys.exit(out.stderr)
                results[name].append(json.loads(out.stdout))
    for name, runs in results.items():
        sps = [r["sps"] for r in runs]
        cpu = statistics.median(r["cpu_us"] for r in runs)
        size = statistics.median(r["bytes"] for r in runs)
        print(
            f"{name:6} steps/s {statistics.median(sps):8.0f} (min {min(sps):.0f} max "
            f"{max(sps):.0f})  cpu us/step {cpu:6.0f}  bytes/step {size:5.0f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
