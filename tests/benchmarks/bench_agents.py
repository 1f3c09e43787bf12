"""steplog's side of the benchmark (see ``peers.py``): the agents a user would write.

``resumable`` runs through the real CLI (``python -m steplog run bench_agents.py:resumable``); the
CLI imports this file once steplog and the CLI are loaded, so the time taken at its top is the
"interpreter + imports" mark.
"""

from __future__ import annotations

import time

T_IMPORTED = time.time()

import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from peers import MARK_BEGIN, MARK_END, Body, Marks, checkpointed_size, mark, pragmas  # noqa: E402

import steplog  # noqa: E402


@steplog.agent(budget=steplog.Budget(max_steps=10_000_000, max_retries=None, max_recoveries=None))
def noop(run: steplog.Run, n: int = 1000, probe: str = "") -> int:
    for i in range(n):
        run.step("noop", int, i)
    if probe:  # the engine's own connection: what it really ran with
        Path(probe).write_text(json.dumps(pragmas(run._journal.conn)))
    return n


@steplog.agent(budget=steplog.Budget(max_steps=10_000_000, max_retries=None, max_recoveries=None))
def resumable(run: steplog.Run, n: int = 200, pause: float = 0.0) -> int:
    """The resume workload. The body log, the marks file and the step to die at come from the
    environment (``BENCH_BODYLOG``, ``BENCH_MARKS``, ``BENCH_KILL_AT``), not from params: a resumed
    run must be started with its recorded params, and these differ from one process to the next."""
    m = Marks(os.environ.get("BENCH_MARKS", ""), T_IMPORTED)
    m.once("setup")  # the log is open, the lease taken, the recorded steps loaded
    body = Body(
        os.environ.get("BENCH_BODYLOG", ""), pause, int(os.environ.get("BENCH_KILL_AT", "-1"))
    )
    total = 0
    for i in range(n):
        total += run.step("work", body, i)
        if body.ran:
            m.once("first")  # run.step returns after the commit
    m.write(done=time.time(), result=total, ran=body.ran)
    return total


def steplog_steps(db: Path, n: int, sync: str, markers: bool) -> dict[str, Any]:
    from steplog.log.db import open_log
    from steplog.runtime.engine import execute

    open_log(db).close()
    before = checkpointed_size(db)
    probe = db.with_suffix(".probe")
    mark(MARK_BEGIN, markers)
    t, cpu = time.perf_counter(), time.process_time()
    execute(noop, run_id="bench", db=db, params={"n": n, "probe": str(probe)}, synchronous=sync)  # type: ignore[arg-type]
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    mark(MARK_END, markers)
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        **json.loads(probe.read_text()),
        "before": before,
        "after": checkpointed_size(db),
    }
