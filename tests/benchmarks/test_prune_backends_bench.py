"""Import and prune benchmark on both logs: N finished runs of M steps imported from one archive,
then pruned (archive first), while an engine steps another run of the same log.

Not part of the normal test run. Run (a PostgreSQL server as for the tests):

    python -m pytest tests/benchmarks/test_prune_backends_bench.py -s -p no:cacheprovider

The archive is made from one real run of ``STEPS`` steps (the engine's own rows and event
payloads), copied under ``RUNS`` run ids. Printed per backend: import time, prune time by phase,
and the longest gap between the live engine's step commits during the prune (on SQLite its steps
take turns with prune's transactions on the file's lock; on PostgreSQL prune locks only its runs).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, checkout_env, kill_group
from helpers.paths import AGENTS

RUNS = int(os.environ.get("PRUNE_BENCH_RUNS", "500"))
STEPS = int(os.environ.get("PRUNE_BENCH_STEPS", "100"))


def _archive(tmp_path: Path) -> Path:
    """One real run exported, then copied under ``RUNS`` ids into one archive."""
    tpl = Engine(db=tmp_path / "tpl" / "steplog.db", env=checkout_env())
    done = tpl.run(
        "run", f"{AGENTS}:noop", "--run-id", "tpl", "--db", str(tpl.db), "--param", f"n={STEPS}"
    )
    assert done.returncode == 0, done.stderr
    lines = [
        json.loads(x) for x in tpl.run("export", "tpl", "--db", str(tpl.db)).stdout.splitlines()
    ]
    out = tmp_path / "runs.jsonl"
    with out.open("w") as f:
        for i in range(RUNS):
            rid = f"r{i:05d}"
            for obj in lines:
                text = json.dumps(obj)
                f.write(text.replace('"tpl"', json.dumps(rid)) + "\n")
    return out


def _bench(engine: Engine, archive: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = engine.run("import", str(archive), "--db", str(engine.db), timeout=1800)
    assert done.returncode == 0, done.stderr
    imported = time.perf_counter() - started
    live = engine.start(
        "run", f"{AGENTS}:noop", "--run-id", "live", "--db", str(engine.db), "--param", "n=10000000"
    )
    try:
        deadline = time.monotonic() + 60
        while engine.committed("live") < 20:
            assert time.monotonic() < deadline and live.poll() is None
            time.sleep(0.05)
        t0 = time.time()
        started = time.perf_counter()
        done = engine.run(
            "prune",
            "--status",
            "succeeded",
            "--archive",
            str(archive.parent / f"pruned-{os.getpid()}-{time.time_ns()}.jsonl.gz"),
            "--db",
            str(engine.db),
            "--json",
            timeout=1800,
        )
        pruned = time.perf_counter() - started
        t1 = time.time()
        time.sleep(0.5)
    finally:
        kill_group(live)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    ts = [
        r[0]
        for r in engine.query(
            "SELECT ts FROM event WHERE run_id = 'live' AND kind = 'step_committed' AND ts >= ? "
            "AND ts <= ? ORDER BY id",
            t0,
            t1,
        )
    ]
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    return {
        "import_s": round(imported, 2),
        "prune_s": round(pruned, 2),
        "phases": report["phases"],
        "runs": len(report["runs"]),
        "rows": report["rows"],
        "reclaimed_by": report["reclaimed_by"],
        "bytes": (report["file_bytes_before"], report["file_bytes_after"]),
        "live_steps_during_prune": len(ts),
        "live_longest_gap_ms": round(1000 * max(gaps, default=0.0)),
    }


@pytest.mark.backends("sqlite", "postgres")
def test_import_then_prune_beside_a_live_engine(engine: Engine, tmp_path: Path) -> None:
    figures = _bench(engine, _archive(tmp_path))
    kind = "PostgreSQL" if isinstance(engine.db, str) else "SQLite"
    print(
        f"\n{RUNS} runs x {STEPS} steps on {kind}: {json.dumps(figures)}",
        file=sys.stderr,
    )
    assert figures["runs"] == RUNS
