"""The workloads of the side-by-side benchmark (``compare.py``), one process per measurement.

Each *peer* does the same job with its own durable-execution machinery on a SQLite file:

- ``steplog``: this project (``run.step`` per step);
- ``dbos``: DBOS Transact on its SQLite system database (``@DBOS.step`` per step);
- ``langgraph-sync`` / ``langgraph-async``: a LangGraph ``StateGraph`` whose one node loops,
  checkpointed by ``SqliteSaver`` after every super-step, with ``durability="sync"``/``"async"``;
- ``sqlite3``: the floor: one ``INSERT`` + ``COMMIT`` per step with the standard library;
- ``sqlmodel``: the ORM floor: one ``session.add`` + ``session.commit`` per step.

Modes (``python peers.py MODE PEER ...``, one JSON object on stdout):

- ``steps``: N no-op steps at a given ``synchronous``; the time, the journal mode and synchronous
  setting read back from the peer's own connection, and the file's bytes and rows before and after
  (the WAL checkpointed into the file first). ``--markers`` brackets the timed part with two
  ``access()`` calls on marker paths, so ``strace`` can count the fsyncs between them.
- ``run``: start, or resume after a kill, a workload of N steps of ``--pause`` seconds each. Every
  step body appends its index to ``--bodylog`` (``O_APPEND`` writes survive SIGKILL), so the driver
  counts the bodies run in total (steps redone = lines - N). A process that finishes writes its
  marks to ``--marks``: when its imports were done, when its setup was done, when its first step
  body of this process was committed, and the result. ``--kill-at K`` makes the body of step K
  SIGKILL its own process (to leave a log with K committed steps behind).

steplog's ``run`` goes through the real CLI (``python -m steplog run peers.py:resumable ...``): the
agent below is what a user would write, and the marks come from inside it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

PEERS = ("steplog", "dbos", "langgraph-sync", "langgraph-async", "sqlite3", "sqlmodel")
RESUMABLE = ("steplog", "dbos", "langgraph-sync", "langgraph-async")
MARK_BEGIN = "/steplog-bench-mark/begin"
MARK_END = "/steplog-bench-mark/end"


# -- shared pieces ---------------------------------------------------------------------------


def as_installed(env: dict[str, str], *folders: Path) -> dict[str, str]:
    """``env`` for processes that import the code in ``folders`` from bytecode, as an installed
    package does (pip compiles it at install; the peers' packages are installed that way): the
    folders are compiled now, and ``PYTHONDONTWRITEBYTECODE`` (set on some machines) is dropped.
    Without this every start of steplog from a checkout compiled its modules again: the resume
    figure's imports took ~160 ms instead of ~60."""
    import compileall

    for folder in folders:
        compileall.compile_dir(str(folder), quiet=2)
    env = dict(env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def expected_result(n: int) -> int:
    return sum(i * i for i in range(n))


class Body:
    """A step body: appends its index to the body log, sleeps ``pause``, SIGKILLs the process at
    ``kill_at``; remembers whether one ran in this process (the first new step)."""

    def __init__(self, bodylog: str, pause: float, kill_at: int) -> None:
        self.fd = os.open(bodylog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if bodylog else -1
        self.pause, self.kill_at = pause, kill_at
        self.ran = 0

    def __call__(self, i: int) -> int:
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fd >= 0:
            os.write(self.fd, f"{i}\n".encode())
        if self.pause:
            time.sleep(self.pause)
        self.ran += 1
        return i * i


class Marks:
    def __init__(self, path: str, imported: float) -> None:
        self.path = path
        self.t: dict[str, Any] = {"imports": imported}

    def once(self, name: str) -> None:
        self.t.setdefault(name, time.time())

    def write(self, **extra: Any) -> None:
        if self.path:
            Path(self.path).write_text(json.dumps({**self.t, **extra}))


def checkpointed_size(db: Path) -> tuple[int, int]:
    """(bytes, rows) of a SQLite file with its WAL folded back first; rows over all tables."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = sum(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names)
    finally:
        conn.close()
    return db.stat().st_size, rows


def pragmas(conn: Any) -> dict[str, Any]:
    """journal_mode and synchronous as the peer's own connection reports them."""
    sync_names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return {
        "journal_mode": str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper(),
        "synchronous": sync_names.get(int(conn.execute("PRAGMA synchronous").fetchone()[0]), "?"),
    }


def mark(path: str, on: bool) -> None:
    if on:
        os.access(path, os.F_OK)  # an access() syscall strace can see; the path does not exist


# -- DBOS ------------------------------------------------------------------------------------


def _dbos(db: Path, sync: str) -> Any:
    import logging

    import sqlalchemy as sa
    from dbos import DBOS

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def _sync(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA synchronous = {sync}")

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "bench",
            "system_database_url": f"sqlite:///{db}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    return DBOS


def _dbos_pragmas(DBOS: Any) -> dict[str, Any]:
    import dbos._dbos as core

    inst = core._dbos_global_instance
    assert inst is not None
    raw = inst._sys_db.engine.raw_connection()
    try:
        return pragmas(raw.driver_connection)
    finally:
        raw.close()


def dbos_noop_workflow(DBOS: Any) -> Any:
    """The workflow every DBOS measurement runs: ``n`` no-op durable steps (SQLite or
    PostgreSQL)."""

    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        for i in range(n):
            step(i)
        return n

    return workflow


def dbos_steps(db: Path, n: int, sync: str, markers: bool) -> dict[str, Any]:
    DBOS = _dbos(db, sync)
    workflow = dbos_noop_workflow(DBOS)
    DBOS.launch()
    before = checkpointed_size(db)
    mark(MARK_BEGIN, markers)
    t, cpu = time.perf_counter(), time.process_time()
    workflow(n)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    mark(MARK_END, markers)
    prag = _dbos_pragmas(DBOS)
    DBOS.destroy()
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        **prag,
        "before": before,
        "after": checkpointed_size(db),
    }


def dbos_run(db: Path, n: int, body: Body, m: Marks, sync: str) -> int:
    resume = db.exists()
    DBOS = _dbos(db, sync)
    m.t["imports"] = time.time()

    @DBOS.step()
    def work(i: int) -> int:
        return body(i)

    finished: list[int] = []
    done = threading.Event()

    @DBOS.workflow()
    def workflow(n: int) -> int:
        total = 0
        for i in range(n):
            total += work(i)
            if body.ran:
                m.once("first")  # a DBOS step returns once its output is recorded
        finished.append(total)
        done.set()
        return total

    DBOS.launch()  # recovers the pending workflow of a killed process
    m.once("setup")
    if resume:
        # The recovery thread runs it. Waited for in memory: a handle's get_result() polls the
        # database, and its transactions slow the recovering workflow down severalfold.
        done.wait()
        result = finished[0]
    else:
        from dbos import SetWorkflowID

        with SetWorkflowID("w"):
            result = int(workflow(n))
    DBOS.destroy()
    return result


# -- LangGraph -------------------------------------------------------------------------------


def _langgraph(db: Path, sync: str, body: Body | None, m: Marks | None) -> tuple[Any, Any, Any]:
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    if m is not None:
        m.t["imports"] = time.time()

    class State(TypedDict):
        i: int
        n: int
        total: int

    def node(s: State) -> dict[str, int]:
        value = body(s["i"]) if body is not None else 0
        return {"i": s["i"] + 1, "total": s["total"] + value}

    class Saver(SqliteSaver):
        def put(self, *args: Any, **kwargs: Any) -> Any:
            out = super().put(*args, **kwargs)
            if m is not None and body is not None and body.ran:
                m.once("first")  # the checkpoint after the first node run in this process
            return out

    graph = StateGraph(State)
    graph.add_node("step", node)
    graph.set_entry_point("step")
    graph.add_conditional_edges("step", lambda s: END if s["i"] >= s["n"] else "step")
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = Saver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous = {sync}")
    return graph.compile(checkpointer=saver), saver, conn


def _lg_config() -> dict[str, Any]:
    return {"configurable": {"thread_id": "t"}, "recursion_limit": 10**9}


def langgraph_steps(db: Path, n: int, sync: str, markers: bool, durability: str) -> dict[str, Any]:
    app, _saver, conn = _langgraph(db, sync, None, None)
    before = checkpointed_size(db)
    mark(MARK_BEGIN, markers)
    t, cpu = time.perf_counter(), time.process_time()
    app.invoke({"i": 0, "n": n, "total": 0}, _lg_config(), durability=durability)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    mark(MARK_END, markers)
    prag = pragmas(conn)
    conn.close()
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        **prag,
        "before": before,
        "after": checkpointed_size(db),
    }


def langgraph_run(db: Path, n: int, body: Body, m: Marks, sync: str, durability: str) -> int:
    app, saver, conn = _langgraph(db, sync, body, m)
    m.once("setup")
    cfg = _lg_config()
    if saver.get_tuple(cfg) is not None:
        out = app.invoke(None, cfg, durability=durability)  # resume from the last checkpoint
    else:
        out = app.invoke({"i": 0, "n": n, "total": 0}, cfg, durability=durability)
    conn.close()
    return int(out["total"])


# -- the floors ------------------------------------------------------------------------------


def sqlite3_steps(db: Path, n: int, sync: str, markers: bool) -> dict[str, Any]:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("CREATE TABLE step (seq INTEGER PRIMARY KEY, result TEXT)")
    before = checkpointed_size(db)
    mark(MARK_BEGIN, markers)
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO step VALUES (?, ?)", (i, str(i)))
        conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    mark(MARK_END, markers)
    prag = pragmas(conn)
    conn.close()
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        **prag,
        "before": before,
        "after": checkpointed_size(db),
    }


def sqlmodel_steps(db: Path, n: int, sync: str, markers: bool) -> dict[str, Any]:
    from sqlalchemy import event
    from sqlmodel import Field, Session, SQLModel, create_engine

    class Step(SQLModel, table=True):
        seq: int | None = Field(default=None, primary_key=True)
        result: str

    engine = create_engine(f"sqlite:///{db}")

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute(f"PRAGMA synchronous = {sync}")

    SQLModel.metadata.create_all(engine)
    before = checkpointed_size(db)
    mark(MARK_BEGIN, markers)
    t, cpu = time.perf_counter(), time.process_time()
    with Session(engine) as session:
        for i in range(n):
            session.add(Step(seq=i, result=str(i)))
            session.commit()
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    mark(MARK_END, markers)
    raw = engine.raw_connection()
    prag = pragmas(raw.driver_connection)
    raw.close()
    engine.dispose()
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        **prag,
        "before": before,
        "after": checkpointed_size(db),
    }


# -- entry point -----------------------------------------------------------------------------


def steps(peer: str, db: Path, n: int, sync: str, markers: bool) -> dict[str, Any]:
    if peer == "steplog":
        from bench_agents import steplog_steps  # steplog is imported by its worker only

        return steplog_steps(db, n, sync, markers)
    if peer == "dbos":
        return dbos_steps(db, n, sync, markers)
    if peer.startswith("langgraph-"):
        return langgraph_steps(db, n, sync, markers, peer.removeprefix("langgraph-"))
    if peer == "sqlite3":
        return sqlite3_steps(db, n, sync, markers)
    if peer == "sqlmodel":
        return sqlmodel_steps(db, n, sync, markers)
    raise SystemExit(f"unknown peer {peer!r}; one of {', '.join(PEERS)}")


def main(argv: list[str]) -> None:
    # Imported here: steplog's agent module imports this file, and its import time is measured.
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("steps", "run"))
    p.add_argument("peer", choices=PEERS)
    p.add_argument("--db", type=Path, required=True)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--sync", default="FULL", choices=("FULL", "NORMAL", "OFF"))
    p.add_argument("--markers", action="store_true")
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--bodylog", default="")
    p.add_argument("--marks", default="")
    p.add_argument("--kill-at", type=int, default=-1)
    a = p.parse_args(argv)
    if a.mode == "steps":
        print(json.dumps(steps(a.peer, a.db, a.n, a.sync, a.markers)))
        return
    m = Marks(a.marks, 0.0)  # each peer marks its imports done
    body = Body(a.bodylog, a.pause, a.kill_at)
    if a.peer == "dbos":
        result = dbos_run(a.db, a.n, body, m, a.sync)
    elif a.peer.startswith("langgraph-"):
        result = langgraph_run(a.db, a.n, body, m, a.sync, a.peer.removeprefix("langgraph-"))
    else:
        raise SystemExit(
            f"run {a.peer} through its own entry point (steplog: python -m steplog run "
            "peers.py:resumable)"
        )
    m.write(done=time.time(), result=result, ran=body.ran)


if __name__ == "__main__":
    main(sys.argv[1:])
