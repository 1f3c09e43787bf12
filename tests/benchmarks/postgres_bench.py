"""Durable no-op steps/s with the log on PostgreSQL, beside SQLite and DBOS on the same server.

    pip install -e ".[test,bench]"
    python tests/benchmarks/postgres_bench.py [--rounds 3] [--n 2000] [--json results.json]

The server is ``$STEPLOG_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
each measurement gets a fresh database there (dropped afterwards) and runs in a fresh process.
Peers take turns (A B C A B C ...) for ``--rounds`` rounds; each figure is the median and the
min-max. At "FULL" every checkpoint is durable when its commit returns (``synchronous_commit =
on``; steplog's step-start markers are committed with it off, as on SQLite they skip the fsync);
at "NORMAL" none waits for the WAL flush (``off``: a server crash may lose the last commits, a
process kill never does).

- ``steplog-pg``: ``run.step`` per step, ``--db postgresql://…``;
- ``steplog-sqlite``: the same on a SQLite file on this machine's disk (the default log);
- ``dbos-pg``: DBOS Transact 3.4 with its system database on the same server (``@DBOS.step``);
- ``psycopg``: the floor: one ``INSERT`` + ``COMMIT`` per step with psycopg.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEERS = ("steplog-pg", "steplog-sqlite", "dbos-pg", "psycopg")
SERVER = os.environ.get("STEPLOG_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def with_db(url: str, name: str, sync: str | None = None) -> str:
    parts = urlsplit(url)
    query = parts.query
    if sync is not None:
        opt = f"options=-csynchronous_commit%3D{'on' if sync == 'FULL' else 'off'}"
        query = f"{query}&{opt}" if query else opt
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, query, parts.fragment))


# -- workers (one process per measurement) -------------------------------------------------------

def steplog_steps(db: str, n: int, sync: str) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from bench_agents import noop  # the same agent as compare.py's steplog peer

    from steplog.db import location, open_log
    from steplog.engine import execute

    where = location(db)
    open_log(where).close()
    t, cpu = time.perf_counter(), time.process_time()
    execute(noop, run_id="bench", db=where, params={"n": n}, synchronous=sync)  # type: ignore[arg-type]
    return {"elapsed": time.perf_counter() - t, "cpu": time.process_time() - cpu}


def dbos_steps(url: str, n: int, sync: str) -> dict[str, Any]:
    import logging

    from dbos import DBOS
    from peers import dbos_noop_workflow  # this folder: sys.path[0] when run as a script

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "bench", "system_database_url": url, "run_admin_server": False, "log_level": "WARNING"})
    workflow = dbos_noop_workflow(DBOS)
    DBOS.launch()
    t, cpu = time.perf_counter(), time.process_time()
    workflow(n)
    out = {"elapsed": time.perf_counter() - t, "cpu": time.process_time() - cpu}
    DBOS.destroy()
    return out


def psycopg_steps(url: str, n: int, sync: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE step (run_id TEXT, seq BIGINT, result TEXT, PRIMARY KEY (run_id, seq))")
        t, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            with conn.transaction():
                conn.execute("INSERT INTO step (run_id, seq, result) VALUES (%s, %s, %s)", ("bench", i, str(i)))
        return {"elapsed": time.perf_counter() - t, "cpu": time.process_time() - cpu}


def worker(peer: str, n: int, sync: str, tmp: Path) -> dict[str, Any]:
    import psycopg

    if peer == "steplog-sqlite":
        return steplog_steps(str(tmp / f"bench-{secrets.token_hex(3)}.db"), n, sync)
    name = f"steplog_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        if peer == "steplog-pg":
            return steplog_steps(with_db(SERVER, name), n, sync)
        if peer == "dbos-pg":
            return dbos_steps(with_db(SERVER, name, sync), n, sync)
        return psycopg_steps(with_db(SERVER, name, sync), n, sync)
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the driver ----------------------------------------------------------------------------------

def run_worker(peer: str, n: int, sync: str, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__, "--worker", peer, "--n", str(n), "--sync", sync, "--tmp", str(tmp)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} {sync} failed: {done.stderr[-1500:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def available(peer: str) -> bool:
    if peer != "dbos-pg":
        return True
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def measure(peers: list[str], rounds: int, n: int) -> dict[str, Any]:
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {s: {p: [] for p in peers} for s in ("FULL", "NORMAL")}
    with tempfile.TemporaryDirectory(prefix="steplog-pgbench-") as tmp:
        for r in range(rounds):
            for sync in ("FULL", "NORMAL"):
                for peer in peers:
                    raw[sync][peer].append(run_worker(peer, n, sync, Path(tmp)))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    table = {p: {s: {"steps_per_s": [n / x["elapsed"] for x in raw[s][p]],
                     "cpu_us_per_step": [x["cpu"] / n * 1e6 for x in raw[s][p]]} for s in raw} for p in peers}
    return {"n": n, "rounds": rounds, "server": SERVER.split("@")[-1], "peers": table}


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def print_table(res: dict[str, Any]) -> None:
    print(f"durable no-op steps/s, {res['n']} steps, {res['rounds']} round(s), PostgreSQL at {res['server']}"
          " (median (min-max))")
    print(f"{'peer':<16} {'steps/s FULL':<24} {'steps/s NORMAL':<24} {'CPU µs/step FULL':<20}")
    for peer, by in res["peers"].items():
        print(f"{peer:<16} {fmt(by['FULL']['steps_per_s']):<24} {fmt(by['NORMAL']['steps_per_s']):<24} "
              f"{fmt(by['FULL']['cpu_us_per_step']):<20}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=PEERS)
    p.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL")
    p.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.n, a.sync, a.tmp)))
        return 0
    peers = [x for x in a.peers.split(",") if available(x)]
    res = measure(peers, a.rounds, a.n)
    print_table(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
