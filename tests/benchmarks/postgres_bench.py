"""Durable no-op steps/s with the log on PostgreSQL, beside SQLite and DBOS on the same server;
resume after a worker's kill; a fleet of engines writing one database.

    pip install -e ".[test,bench]"
    python tests/benchmarks/postgres_bench.py [--rounds 3] [--n 2000] [--json results.json]
                                              [--figures steps,resume,fleet,claim] [--fleet 1,2,4]
                                              [--fleet-n 500]

The server is ``$STEPLOG_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``); each measurement gets a fresh database there
(dropped afterwards) and runs in a fresh process. Peers take turns (A B C A B C ...) for
``--rounds`` rounds; each figure is the median and the min-max. At "FULL" every checkpoint is
durable when its commit returns (``synchronous_commit = on``; steplog's step-start markers are
committed with it off, as on SQLite they skip the fsync); at "NORMAL" none waits for the WAL flush
(``off``: a server crash may lose the last commits, a process kill never does).

- ``steplog-pg``: ``run.step`` per step, ``--db postgresql://…``;
- ``steplog-sqlite``: the same on a SQLite file on this machine's disk (the default log);
- ``dbos-pg``: DBOS Transact 3.4 with its system database on the same server (``@DBOS.step``);
- ``psycopg``: the floor: one ``INSERT`` + ``COMMIT`` per step with psycopg.

``resume`` (a worker SIGKILLed, a new one started): a queued run of ``bench_agents.resumable``
(200 steps of 10 ms) is claimed by ``steplog worker``; after 100 step bodies the worker's whole
process group is SIGKILLed (its engine dies with it: ``procs.die_with_parent``) and a new worker
(``--drain``) is started at once. Kill -> the first step committed by the new worker's engine
(``run.step`` returned), kill -> the new worker's claim (its ``worker_claimed`` event), steps
redone (body log lines - 200), and the result checked; on PostgreSQL and on a SQLite file, in
turns, each in a fresh log.

``claim`` (submit -> claim): runs submitted one at a time, at random moments, to an idle
``steplog worker``: from each run's ``run_created`` event to its ``worker_claimed``. On
PostgreSQL the worker is woken by the submit's ``NOTIFY``; on SQLite it polls (0.2 s).

``fleet``: K engines (K = 1, 2, 4), each a process running a run of its own of ``--fleet-n``
no-op steps, started together on one fresh PostgreSQL database: aggregate steps/s = K x N /
(last engine done - first engine started), at FULL and NORMAL; then the same on one SQLite file,
for comparison (SQLite has one writer at a time by design).
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
FIGURES = ("steps", "resume", "fleet", "claim")
RESUME_STEPS, RESUME_PAUSE, RESUME_KILL_AFTER = 200, 0.01, 100
CLAIM_RUNS = 10
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

    from steplog.log.db import location, open_log
    from steplog.runtime.engine import execute

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
    DBOS(
        config={
            "name": "bench",
            "system_database_url": url,
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
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
        conn.execute(
            "CREATE TABLE step (run_id TEXT, seq BIGINT, result TEXT, PRIMARY KEY (run_id, seq))"
        )
        t, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            with conn.transaction():
                conn.execute(
                    "INSERT INTO step (run_id, seq, result) VALUES (%s, %s, %s)",
                    ("bench", i, str(i)),
                )
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


def fleet_engine(db: str, run_id: str, n: int, sync: str, start_at: float) -> dict[str, Any]:
    """One engine of the fleet: wait for the common start, then run ``n`` no-op steps."""
    sys.path.insert(0, str(HERE))
    from bench_agents import noop

    from steplog.log.db import location
    from steplog.runtime.engine import execute

    where = location(db)
    time.sleep(max(0.0, start_at - time.time()))
    began, cpu = time.time(), time.process_time()
    execute(noop, run_id=run_id, db=where, params={"n": n}, synchronous=sync)  # type: ignore[arg-type]
    return {"began": began, "ended": time.time(), "cpu": time.process_time() - cpu}


# -- resume after killing a worker (real processes, real SIGKILL of the worker's group) ----------


def create_db() -> str:
    import psycopg

    name = f"steplog_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_db(name: str) -> None:
    import psycopg

    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


ENGINE = Path(os.environ.get("BENCH_STEPLOG_ENGINE", ROOT / "engine"))
"""The steplog measured: this checkout's, or another's ``engine`` folder (``BENCH_STEPLOG_ENGINE``,
to measure a before and an after with one script)."""


def bench_env(**extra: str) -> dict[str, str]:
    """The measured steplog and this folder, imported from bytecode as installed code is."""
    from peers import as_installed  # this folder: sys.path[0] when run as a script

    return {
        **as_installed(dict(os.environ), ENGINE / "steplog", HERE),
        **extra,
        "PYTHONPATH": os.pathsep.join([str(ENGINE), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


def steplog_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "steplog", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"steplog {args[0]} exited {done.returncode}: {done.stderr[-1500:]}")
    return done


def one_worker_resume(backend: str, tmp: Path) -> dict[str, Any]:
    import signal

    d = Path(tempfile.mkdtemp(prefix=f"resume-{backend}-", dir=tmp))
    name = create_db() if backend == "postgres" else ""
    db = with_db(SERVER, name) if name else str(d / "log.db")
    bodylog, marks = d / "bodies.txt", d / "marks.json"
    env = bench_env(BENCH_BODYLOG=str(bodylog), BENCH_MARKS=str(marks), BENCH_KILL_AT="-1")
    try:
        steplog_cli(
            "submit",
            f"{HERE / 'bench_agents.py'}:resumable",
            "--run-id",
            "r",
            "--db",
            db,
            "--param",
            f"n={RESUME_STEPS}",
            "--param",
            f"pause={RESUME_PAUSE}",
            env=env,
        )
        worker_argv = [sys.executable, "-m", "steplog", "worker", "--db", db, "--poll", "0.05"]
        first = subprocess.Popen(
            worker_argv,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 120
        while len(lines(bodylog)) < RESUME_KILL_AFTER:
            if first.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{backend}: the first worker ended or stalled before the kill: "
                    f"{first.stderr.read()!r}"
                )  # type: ignore[union-attr]
            time.sleep(0.002)
        os.killpg(first.pid, signal.SIGKILL)
        t_kill = time.time()
        first.wait()
        first.stderr.close()  # type: ignore[union-attr]
        second = subprocess.run(
            [*worker_argv, "--drain"],
            env=env,
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if second.returncode != 0 or "1 succeeded" not in second.stderr:
            raise RuntimeError(
                f"{backend}: the second worker did not finish the run: {second.stderr[-1500:]}"
            )
        status = json.loads(steplog_cli("status", "r", "--db", db, "--json", env=env).stdout)
        claimed = claim_times(db)
    finally:
        if name:
            drop_db(name)
    m = json.loads(marks.read_text())
    bodies = lines(bodylog)
    return {
        "total": m["first"] - t_kill,
        "claim": claimed[-1] - t_kill,
        "engine_start": m["imports"] - claimed[-1],
        "redone": len(bodies) - RESUME_STEPS,
        "incarnations": status["incarnations"],
        "correct": m["result"] == sum(i * i for i in range(RESUME_STEPS))
        and sorted(set(bodies)) == list(range(RESUME_STEPS)),
    }


def claim_times(db: str) -> list[float]:
    from steplog.log.db import location, open_readonly

    conn = open_readonly(location(db), one_shot=True)
    try:
        return [
            float(ts)
            for (ts,) in conn.execute(
                "SELECT ts FROM event WHERE run_id = 'r' AND kind = 'worker_claimed' ORDER BY id"
            )
        ]
    finally:
        conn.close()


# -- submit -> claim: how soon an idle worker claims a submitted run ------------------------------


def one_claim(backend: str, tmp: Path) -> list[float]:
    """``CLAIM_RUNS`` runs submitted one by one (``steplog submit``, at random moments) to an idle
    ``steplog worker`` (the default poll, 0.2 s): seconds from each run's ``run_created`` to its
    ``worker_claimed`` event, both stamped by this machine's clock."""
    import random
    import signal

    d = Path(tempfile.mkdtemp(prefix=f"claim-{backend}-", dir=tmp))
    name = create_db() if backend == "postgres" else ""
    db = with_db(SERVER, name) if name else str(d / "log.db")
    env = bench_env()
    try:
        steplog_cli(
            "submit",
            f"{HERE / 'bench_agents.py'}:noop",
            "--run-id",
            "c0",
            "--db",
            db,
            "--param",
            "n=1",
            env=env,
        )  # the log made before the worker opens it
        worker = subprocess.Popen(
            [sys.executable, "-m", "steplog", "worker", "--db", db, "--concurrency", "4"],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while len(kinds(db, "worker_claimed")) < 1:
                time.sleep(0.05)
            for i in range(1, CLAIM_RUNS + 1):
                time.sleep(random.uniform(0.1, 0.4))
                steplog_cli(
                    "submit",
                    f"{HERE / 'bench_agents.py'}:noop",
                    "--run-id",
                    f"c{i}",
                    "--db",
                    db,
                    "--param",
                    "n=1",
                    env=env,
                )
            deadline = time.monotonic() + 60
            while len(kinds(db, "worker_claimed")) < CLAIM_RUNS + 1:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{backend}: the worker did not claim every run")
                time.sleep(0.05)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
        created, claimed = kinds(db, "run_created"), kinds(db, "worker_claimed")
    finally:
        if name:
            drop_db(name)
    return [claimed[rid] - created[rid] for rid in created if rid != "c0"]


def kinds(db: str, kind: str) -> dict[str, float]:
    """The first event of ``kind`` of each run: its time."""
    from steplog.log.db import location, open_readonly

    conn = open_readonly(location(db), one_shot=True)
    try:
        out: dict[str, float] = {}
        for rid, ts in conn.execute(
            "SELECT run_id, ts FROM event WHERE kind = ? ORDER BY id", (kind,)
        ):
            out.setdefault(str(rid), float(ts))
        return out
    finally:
        conn.close()


def figure_claim(rounds: int, tmp: Path) -> dict[str, Any]:
    raw: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    for r in range(rounds):
        for backend in raw:
            raw[backend].extend(one_claim(backend, tmp))
        print(f"claim: round {r + 1}/{rounds} done", file=sys.stderr)
    return {
        "runs": CLAIM_RUNS,
        "rounds": rounds,
        "backends": {b: summary(v) for b, v in raw.items()},
    }


def lines(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def figure_resume(rounds: int, tmp: Path) -> dict[str, Any]:
    raw: dict[str, list[dict[str, Any]]] = {"postgres": [], "sqlite": []}
    for r in range(rounds):
        for backend in raw:
            raw[backend].append(one_worker_resume(backend, tmp))
        print(f"resume: round {r + 1}/{rounds} done", file=sys.stderr)
    out: dict[str, Any] = {
        "steps": RESUME_STEPS,
        "pause": RESUME_PAUSE,
        "kill_after": RESUME_KILL_AFTER,
        "rounds": rounds,
        "raw": raw,
        "backends": {},
    }
    for backend, rs in raw.items():
        out["backends"][backend] = {
            k: summary([x[k] for x in rs]) for k in ("total", "claim", "engine_start", "redone")
        }
        out["backends"][backend]["correct"] = all(
            x["correct"] and x["incarnations"] == 2 for x in rs
        )
    out["ratio_pg_sqlite"] = (
        out["backends"]["postgres"]["total"]["median"]
        / out["backends"]["sqlite"]["total"]["median"]
    )
    return out


# -- a fleet of engines on one database -----------------------------------------------------------


def one_fleet(backend: str, k: int, n: int, sync: str, tmp: Path) -> dict[str, Any]:
    name = create_db() if backend == "postgres" else ""
    db = (
        with_db(SERVER, name)
        if name
        else str(Path(tempfile.mkdtemp(prefix="fleet-", dir=tmp)) / "log.db")
    )
    try:
        from steplog.log.db import location, open_log

        open_log(
            location(db)
        ).close()  # the schema first: the fleet measures steps, not its creation
        start_at = time.time() + 1.5  # every engine's interpreter and imports are done by then
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--fleet-engine",
                    db,
                    "--run-id",
                    f"f{i}",
                    "--n",
                    str(n),
                    "--sync",
                    sync,
                    "--start-at",
                    repr(start_at),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=bench_env(),
            )
            for i in range(k)
        ]
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"fleet engine exited {proc.returncode}: {err[-1500:]}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if name:
            drop_db(name)
    span = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    late = max(o["began"] for o in outs) - start_at
    return {
        "steps_per_s": k * n / span,
        "per_engine": [n / (o["ended"] - o["began"]) for o in outs],
        "cpu_us_per_step": sum(o["cpu"] for o in outs) / (k * n) * 1e6,
        "late_start": late,
    }


def figure_fleet(ks: list[int], n: int, rounds: int, tmp: Path) -> dict[str, Any]:
    """Each K on PostgreSQL, then the same on one SQLite file (its one writer at a time), in
    turns."""
    cases = [(b, str(k)) for b in ("postgres", "sqlite") for k in ks]
    raw: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {
        s: {c: [] for c in cases} for s in ("FULL", "NORMAL")
    }
    for r in range(rounds):
        for sync in ("FULL", "NORMAL"):
            for backend, k in cases:
                raw[sync][(backend, k)].append(one_fleet(backend, int(k), n, sync, tmp))
        print(f"fleet: round {r + 1}/{rounds} done", file=sys.stderr)
    table: dict[str, dict[str, Any]] = {b: {} for b in ("postgres", "sqlite")}
    for backend, k in cases:
        table[backend][k] = {
            s: {
                "steps_per_s": summary([x["steps_per_s"] for x in raw[s][(backend, k)]]),
                "per_engine": summary([v for x in raw[s][(backend, k)] for v in x["per_engine"]]),
                "cpu_us_per_step": summary([x["cpu_us_per_step"] for x in raw[s][(backend, k)]]),
                "late_start": max(x["late_start"] for x in raw[s][(backend, k)]),
            }
            for s in raw
        }
    return {"n": n, "rounds": rounds, "ks": ks, "table": table}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# -- the driver ----------------------------------------------------------------------------------


def run_worker(peer: str, n: int, sync: str, tmp: Path) -> dict[str, Any]:
    env = bench_env()
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            peer,
            "--n",
            str(n),
            "--sync",
            sync,
            "--tmp",
            str(tmp),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
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
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {p: [] for p in peers} for s in ("FULL", "NORMAL")
    }
    with tempfile.TemporaryDirectory(prefix="steplog-pgbench-") as tmp:
        for r in range(rounds):
            for sync in ("FULL", "NORMAL"):
                for peer in peers:
                    raw[sync][peer].append(run_worker(peer, n, sync, Path(tmp)))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    table = {
        p: {
            s: {
                "steps_per_s": [n / x["elapsed"] for x in raw[s][p]],
                "cpu_us_per_step": [x["cpu"] / n * 1e6 for x in raw[s][p]],
            }
            for s in raw
        }
        for p in peers
    }
    return {"n": n, "rounds": rounds, "server": SERVER.split("@")[-1], "peers": table}


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def print_table(res: dict[str, Any]) -> None:
    if "steps" in res:
        steps = res["steps"]
        print(
            f"durable no-op steps/s, {steps['n']} steps, {steps['rounds']} round(s), PostgreSQL at "
            f"{steps['server']}"
            " (median (min-max))"
        )
        print(
            f"{'peer':<16} {'steps/s FULL':<24} {'steps/s NORMAL':<24} {'CPU µs/step FULL':<22}"
            "CPU µs/step NORMAL"
        )
        for peer, by in steps["peers"].items():
            print(
                f"{peer:<16} {fmt(by['FULL']['steps_per_s']):<24} "
                f"{fmt(by['NORMAL']['steps_per_s']):<24} {fmt(by['FULL']['cpu_us_per_step']):<22}"
                f"{fmt(by['NORMAL']['cpu_us_per_step'])}"
            )
        for line in ratios(steps["peers"]):
            print(line)
    if "resume" in res:
        rs = res["resume"]
        print(
            "\n"
            f"resume after a worker's SIGKILL: {rs['steps']} steps of {rs['pause'] * 1000:.0f} ms, "
            f"the worker's group killed after {rs['kill_after']} bodies, a new worker started at "
            f"once; ms, median (min-max) of {rs['rounds']} round(s); PostgreSQL / SQLite = "
            f"{rs['ratio_pg_sqlite']:.2f}x"
        )
        print(
            f"{'log':<10} {'kill->claim':<20} {'claim->engine imports':<24} "
            f"{'kill->1st new step':<22} {'redone':<8} result"
        )
        for backend, by in rs["backends"].items():
            print(
                f"{backend:<10} {fmt_s(by['claim'], 1000):<20} "
                f"{fmt_s(by['engine_start'], 1000):<24} {fmt_s(by['total'], 1000):<22} "
                f"{fmt_s(by['redone']):<8} {'ok' if by['correct'] else 'WRONG'}"
            )
    if "claim" in res:
        cl = res["claim"]
        print(
            "\n"
            f"submit -> claim: {cl['runs']} runs submitted one at a time to an idle worker (poll "
            f"0.2 s), x {cl['rounds']} round(s); ms from run_created to worker_claimed, median "
            "(min-max)"
        )
        for backend, by in cl["backends"].items():
            print(f"{backend:<10} {fmt_s(by, 1000)}")
    if "fleet" in res:
        fl = res["fleet"]
        print(
            "\n"
            f"fleet: K engines, each its own run of {fl['n']} no-op steps, started together on one "
            "log; aggregate steps/s = K x N / (last done - first started), median (min-max) of "
            f"{fl['rounds']} round(s)"
        )
        print(
            f"{'log':<9} {'K':<3} {'steps/s FULL':<22} {'per engine FULL':<20} "
            f"{'steps/s NORMAL':<22} {'per engine NORMAL':<20} {'CPU µs/step F/N':<16}"
        )
        for backend, ks in fl["table"].items():
            for k, by in ks.items():
                full, normal = by["FULL"], by["NORMAL"]
                print(
                    f"{backend:<9} {k:<3} {fmt_s(full['steps_per_s']):<22} "
                    f"{fmt_s(full['per_engine']):<20} "
                    f"{fmt_s(normal['steps_per_s']):<22} {fmt_s(normal['per_engine']):<20} "
                    f"{full['cpu_us_per_step']['median']:,.0f}"
                    f"/{normal['cpu_us_per_step']['median']:,.0f}"
                )
        late = max(
            by[s]["late_start"] for ks in fl["table"].values() for by in ks.values() for s in by
        )
        print(
            f"(the last engine to start began {late * 1000:,.0f} ms after the common start at "
            "worst)"
        )


def ratios(peers: dict[str, Any]) -> list[str]:
    """steplog-pg against DBOS and against the psycopg floor, beside issue 29's targets
    (``targets.py``, which are at FULL; NORMAL is shown against the same bound): ratios of the
    medians of the same run."""
    from targets import BY_KEY  # this folder: sys.path[0] when run as a script

    if "steplog-pg" not in peers:
        return []
    out = []
    for peer, key in (("dbos-pg", "pg_steps_vs_dbos"), ("psycopg", "pg_steps_vs_floor")):
        if peer not in peers:
            continue
        target, cells = BY_KEY[key], []
        for sync in ("FULL", "NORMAL"):
            ours = statistics.median(peers["steplog-pg"][sync]["steps_per_s"])
            r = ours / statistics.median(peers[peer][sync]["steps_per_s"])
            cells.append(f"{sync} {r:.2f}x ({'met' if target.met(r) else 'NOT met'})")
        out.append(f"steplog-pg / {peer}: {', '.join(cells)}; target {target.describe()}")
    return out


def fmt_s(s: dict[str, float], scale: float = 1.0) -> str:
    return f"{s['median'] * scale:,.0f} ({s['min'] * scale:,.0f}-{s['max'] * scale:,.0f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=PEERS)
    p.add_argument("--fleet-engine", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--run-id", default="f0", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL")
    p.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--figures", default=",".join(FIGURES), help="any of " + ",".join(FIGURES))
    p.add_argument("--fleet", default="1,2,4", help="engine counts of the fleet figure")
    p.add_argument(
        "--fleet-n", type=int, default=500, help="no-op steps per engine in the fleet figure"
    )
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.n, a.sync, a.tmp)))
        return 0
    if a.fleet_engine:
        print(json.dumps(fleet_engine(a.fleet_engine, a.run_id, a.n, a.sync, a.start_at)))
        return 0
    figures = [f for f in a.figures.split(",") if f]
    unknown = set(figures) - set(FIGURES)
    if unknown:
        p.error(f"unknown figure(s) {', '.join(sorted(unknown))}: use {','.join(FIGURES)}")
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": os.getloadavg(),
    }
    if "steps" in figures:
        res["steps"] = measure([x for x in a.peers.split(",") if available(x)], a.rounds, a.n)
    with tempfile.TemporaryDirectory(prefix="steplog-pgbench-") as tmp:
        if "resume" in figures:
            res["resume"] = figure_resume(a.rounds, Path(tmp))
        if "claim" in figures:
            res["claim"] = figure_claim(a.rounds, Path(tmp))
        if "fleet" in figures:
            res["fleet"] = figure_fleet(
                [int(k) for k in a.fleet.split(",")], a.fleet_n, a.rounds, Path(tmp)
            )
    res["load_after"] = os.getloadavg()
    print_table(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
