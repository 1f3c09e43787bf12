"""Finding runs in a big log (issue 32): ``steplog runs --limit 50`` and filtered queries on
100,000 finished runs, as a person types them, and the same queries in process.

Not part of the normal test run. Run:

    python -m pytest tests/benchmarks/test_find_runs_bench.py -s -p no:cacheprovider

The log is written by ``helpers.many_runs`` (a run row, two tags and two events per run, one a
minute). Printed: each command's wall time (a fresh process: interpreter, import, open, query,
print) and each query's time in process (median of 5), with the query plan SQLite chose.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.engine import checkout_env
from helpers.many_runs import write_runs
from steplog.log.db import open_readonly
from steplog.log.find import RunQuery, find_runs, where_clause
from steplog.log.runstatus import RunStatus

RUNS = int(os.environ.get("FIND_BENCH_RUNS", "100000"))

QUERIES: dict[str, tuple[list[str], RunQuery]] = {
    "newest 50": (["--limit", "50"], RunQuery(limit=50)),
    "failed, newest 50": (
        ["--status", "failed", "--limit", "50"],
        RunQuery(statuses=(RunStatus.FAILED,), limit=50),
    ),
    "agent + tag, 50": (
        ["--agent", "billing", "--tag", "team=ops", "--limit", "50"],
        RunQuery(agent="billing", tags=(("team", "ops"),), limit=50),
    ),
    "rare tag (1,000 runs), all": (["--tag", "batch=42"], RunQuery(tags=(("batch", "42"),))),
    "since 1 day, all": (
        ["--since", "1d"],
        RunQuery(since=time.time() - 86400),
    ),
    "search text, 50": (
        ["--search", "timeout", "--limit", "50"],
        RunQuery(search="timeout", limit=50),
    ),
    "failed + search, 50": (
        ["--status", "failed", "--search", "crm", "--limit", "50"],
        RunQuery(statuses=(RunStatus.FAILED,), search="crm", limit=50),
    ),
}


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("find") / "runs.db"
    t = time.perf_counter()
    write_runs(db, RUNS)
    print(
        f"\nwrote {RUNS:,} runs in {time.perf_counter() - t:.1f} s ({db.stat().st_size >> 20} MB)"
    )
    return db


def test_find_runs_figures(big_log: Path) -> None:
    env = checkout_env()
    print(f"\n{'query':<30} {'steplog runs':>13} {'in process':>11}  plan")
    conn = open_readonly(big_log)
    try:
        for name, (argv, query) in QUERIES.items():
            walls = []
            for _ in range(3):
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "steplog", "runs", "--db", str(big_log), *argv],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                walls.append(time.perf_counter() - t)
                assert done.returncode == 0, done.stderr
            times = []
            for _ in range(5):
                t = time.perf_counter()
                found = find_runs(conn, query)
                times.append(time.perf_counter() - t)
            where, args = where_clause(conn, query)
            plan = "; ".join(
                r[3]
                for r in conn.execute(
                    f"EXPLAIN QUERY PLAN SELECT id FROM run WHERE {where} "
                    "ORDER BY created_at DESC, id DESC LIMIT 50",
                    args,
                )
            )
            print(
                f"{name:<30} {statistics.median(walls) * 1000:>10.0f} ms "
                f"{statistics.median(times) * 1000:>8.1f} ms  ({len(found)} runs) {plan}"
            )
        page, q = [], RunQuery(limit=50)
        t = time.perf_counter()
        for _ in range(200):  # scroll 10,000 runs down
            page = find_runs(conn, q)
            q = q.next_page(page[-1])
        per = (time.perf_counter() - t) / 200
        print(f"{'scrolling: one page of 50':<30} {'':>13} {per * 1000:>8.1f} ms  (pages 1-200)")
    finally:
        conn.close()
