"""Prune benchmark: 10,000 finished runs / 1,000,000 steps out of a log that keeps 1,000 more,
while an engine works on the same log and a monitor-style reader tails it.

Not part of the normal test run. Run:

    python -m pytest tests/benchmarks/test_prune_bench.py -s -p no:cacheprovider

The log is built from one real run of ``TEMPLATE_STEPS`` steps (made by the engine: real rows,
real event payloads), copied under 11,000 run ids with SQL. Printed: the time of the deletes and
of giving the space back, the bytes reclaimed, the estimate against the real figure, the longest
wait of the tailing reader and of the live engine's steps during the prune.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.paths import AGENTS
from steplog.log.db import open_log
from steplog.log.prune import Selection, log_bytes, prune

RUNS_PRUNED = 10_000
RUNS_KEPT = 1_000
TEMPLATE_STEPS = 100
RECLAIM = os.environ.get("PRUNE_BENCH_RECLAIM", "auto")
"""``auto`` (the default: a rewrite, the log keeps ~60 MB) or ``incremental`` to measure that."""


def build_log(path: Path, *, old_style: bool = False) -> None:
    if old_style:  # a log made before incremental vacuum (auto_vacuum NONE)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2] / "engine"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "steplog",
            "run",
            f"{AGENTS}:noop",
            "--run-id",
            "tpl",
            "--db",
            str(path),
            "--param",
            f"n={TEMPLATE_STEPS}",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    conn = open_log(path, synchronous="NORMAL")
    total = RUNS_PRUNED + RUNS_KEPT
    run_cols = [
        r[1]
        for r in conn.execute("PRAGMA table_info(run)")
        if r[1] not in ("id", "created_at", "finished_at")
    ]
    step_cols = [r[1] for r in conn.execute("PRAGMA table_info(step)") if r[1] != "run_id"]
    ev_cols = ["ts", "incarnation", "kind", "seq", "data"]
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TEMP TABLE nums (n INTEGER PRIMARY KEY)")
    conn.executemany("INSERT INTO nums VALUES (?)", [(n,) for n in range(total)])
    base = time.time() - 30 * 86_400
    conn.execute(
        f"INSERT INTO run (id, created_at, finished_at, {', '.join(run_cols)}) SELECT "
        f"printf('r%05d', n), ? + n * 60, ? + n * 60 + 5, {', '.join(run_cols)} FROM run, nums "
        "WHERE id = 'tpl'",
        (base, base),
    )
    conn.execute(
        f"INSERT INTO step (run_id, {', '.join(step_cols)}) SELECT printf('r%05d', n), "
        f"{', '.join(step_cols)}"
        " FROM step, nums WHERE run_id = 'tpl' ORDER BY n, seq"
    )
    conn.execute(
        f"INSERT INTO event (run_id, {', '.join(ev_cols)}) SELECT printf('r%05d', n), "
        f"{', '.join(ev_cols)}"
        " FROM event, nums WHERE run_id = 'tpl' ORDER BY n, event.id"
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


class Tail(threading.Thread):
    """The monitor's reader (``steplog.log.reader.LogRepository``, as its tailer uses it):
    polls ``data_version`` and reads events above its bookmark every 50 ms."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        from steplog.log.reader import LogRepository

        self.repo = LogRepository(path)
        self.stop = threading.Event()
        self.longest = 0.0
        self.events = 0
        self.pruned_events = 0
        self.errors: list[str] = []

    def run(self) -> None:
        bookmark = self.repo.events_since(0, limit=1)[0].id
        while True:  # start at the end, as a monitor that has caught up
            batch = self.repo.events_since(bookmark, limit=50_000)
            if not batch:
                break
            bookmark = batch[-1].id
        while not self.stop.is_set():
            t = time.perf_counter()
            try:
                self.repo.data_version()
                while True:
                    batch = self.repo.events_since(bookmark, limit=5000)
                    if not batch:
                        break
                    bookmark = batch[-1].id
                    self.events += len(batch)
                    self.pruned_events += sum(e.kind == "runs_pruned" for e in batch)
            except Exception as exc:  # a reader that cannot read is what this measures
                self.errors.append(repr(exc))
            self.longest = max(self.longest, time.perf_counter() - t)
            time.sleep(0.05)
        self.repo.close()


@pytest.mark.timeout(3600)
def test_prune_ten_thousand_runs_and_a_million_steps(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    t = time.perf_counter()
    build_log(path)
    built = time.perf_counter() - t
    size_before = log_bytes(path)
    steps = open_log(path).execute("SELECT count(*) FROM step").fetchone()[0]

    t = time.perf_counter()
    dry = prune(path, Selection(older_than_days=1, keep_last=RUNS_KEPT), dry_run=True)
    dry_in = time.perf_counter() - t

    tail = Tail(path)
    tail.start()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2] / "engine"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    # An engine working throughout: a witness run (model calls, effects) pausing 20 ms per item.
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steplog",
            "run",
            f"{AGENTS}:witness",
            "--run-id",
            "live",
            "--db",
            str(path),
            "--param",
            "n=100000",
            "--param",
            "pause=0.02",
            "--param",
            f"witness={tmp_path / 'w.db'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    time.sleep(2.0)
    t = time.perf_counter()
    started = time.time()
    report = prune(path, Selection(older_than_days=1, keep_last=RUNS_KEPT), reclaim=RECLAIM)
    pruned_in = time.perf_counter() - t
    ended = time.time()
    assert live.poll() is None, live.stderr.read() if live.stderr else ""
    live.terminate()  # SIGTERM: it stops at a safe point and lets go of the run
    assert live.wait(timeout=60) == 130
    tail.stop.set()
    tail.join()

    conn = open_log(path)
    ts = [
        r[0]
        for r in conn.execute(
            "SELECT ts FROM event WHERE run_id = 'live' AND ts BETWEEN ? AND ? ORDER BY id",
            (started, ended),
        )
    ]
    gaps = sorted(b - a for a, b in itertools.pairwise(ts))
    worst = max(itertools.pairwise(ts), key=lambda p: p[1] - p[0])
    bounds, acc = [], 0.0
    for name, secs in report.phases.items():
        acc += secs
        bounds.append((acc, name))
    worst_phase = next((name for end, name in bounds if worst[0] - started <= end), "after")
    kept = conn.execute("SELECT count(*) FROM run").fetchone()[0]
    conn.close()
    out = report.as_json()
    print()
    print(
        f"log built in {built:.1f} s: {RUNS_PRUNED + RUNS_KEPT + 1:,} runs, {steps:,} steps, "
        f"{size_before / 1e6:,.0f} MB"
    )
    print(
        f"prune of {len(report.pruned):,} runs / {report.rows:,} rows: {pruned_in:.1f} s (report: "
        f"{out['seconds']} s); the log {out['file_bytes_before'] / 1e6:,.0f} MB -> "
        f"{out['file_bytes_after'] / 1e6:,.0f} MB, reclaimed {out['reclaimed_bytes'] / 1e6:,.0f} "
        f"MB (the dry run, {dry_in:.1f} s, estimated {dry.estimated_bytes / 1e6:,.0f} MB), freed "
        f"pages {report.freed_pages:,}"
    )
    print(
        f"tailing reader: {tail.events:,} events read during the prune, {tail.pruned_events} "
        f"runs_pruned events, longest poll {tail.longest * 1000:.0f} ms, errors {len(tail.errors)}"
    )
    print(
        f"live engine on the same log during the prune: {len(ts):,} events written; gaps between "
        f"them median {gaps[len(gaps) // 2] * 1000:.1f} ms, p99 "
        f"{gaps[int(len(gaps) * 0.99)] * 1000:.0f} ms, max {gaps[-1] * 1000:.0f} ms "
        f"({worst[0] - started:.1f} s into the prune, while {worst_phase})"
    )
    print(f"phases: {out['phases']}")
    print(json.dumps(out | {"runs": len(out["runs"])}))  # type: ignore[operator]
    assert len(report.pruned) == RUNS_PRUNED and kept == RUNS_KEPT + 2
    assert not tail.errors and tail.pruned_events > 0 and tail.events > tail.pruned_events
    assert out["file_bytes_after"] < out["file_bytes_before"]


@pytest.mark.timeout(3600)
def test_prune_then_vacuum_an_older_log_with_no_engine_running(tmp_path: Path) -> None:
    """The same 10,000 runs out of a log made before incremental vacuum: the deletes leave the
    pages free inside the file; ``--reclaim vacuum`` (no engine running) rewrites it once."""
    path = tmp_path / "old.db"
    build_log(path, old_style=True)
    pruned = prune(path, Selection(older_than_days=1, keep_last=RUNS_KEPT), reclaim="none")
    t = time.perf_counter()
    vacuumed = prune(path, Selection(statuses=frozenset()), reclaim="vacuum")
    print()
    print(
        f"older log: prune of {len(pruned.pruned):,} runs {pruned.seconds:.1f} s {pruned.phases}, "
        f"the file {pruned.file_bytes_before / 1e6:,.0f} MB -> "
        f"{pruned.file_bytes_after / 1e6:,.0f} MB; then --reclaim vacuum "
        f"{time.perf_counter() - t:.1f} s: {vacuumed.file_bytes_before / 1e6:,.0f} MB -> "
        f"{vacuumed.file_bytes_after / 1e6:,.0f} MB"
    )
    assert vacuumed.file_bytes_after < pruned.file_bytes_after / 4
