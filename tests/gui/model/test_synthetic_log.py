"""The synthetic logs the monitor's scale tests and benchmarks open hold the rows a real engine
writes: a real ``steplog run`` of the ``noop`` agent, SIGKILLed and relaunched, against
``helpers.synthetic_log`` told the same run, compared column by column (times and the clock's
figures aside)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group
from helpers.logs import query_log
from helpers.paths import AGENTS
from helpers.synthetic_log import SyntheticRun, write_log

STEPS = 20_000
TIMES = {"ts", "started_at", "finished_at"}
"""Columns that are clock readings: compared only for order, not value."""
RUN_CLOCK = {
    "used_seconds",
    "lease_proc_start",
    "lease_expires",
    "lease_expires_boot",
    "created_at",
    "updated_at",
    "finished_at",
}
PAYLOAD_CLOCK = {"started", "killed_at", "seconds"}
"""Payload fields that are clock readings (``seconds``: inside ``usage``)."""


def real_run(engine: Engine, run_id: str, *, kills_at: list[int], finish: bool) -> None:
    """``noop`` of ``STEPS`` steps, SIGKILLed once at least each of ``kills_at`` steps are
    committed and relaunched with the kill's time (as Kill now does); after the last kill,
    relaunched to its end if ``finish``, else left for dead."""
    args = [
        "run",
        f"{AGENTS}:noop",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"n={STEPS}",
        "--sync",
        "normal",
        "--max-steps",
        str(STEPS * 2),
    ]
    killed_at: float | None = None
    for at in kills_at:
        proc = engine.start(*args, *(["--killed-at", repr(killed_at)] if killed_at else []))
        while engine.committed(run_id) < at:
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.002)
        killed_at = kill_group(proc)
    if finish:
        proc = engine.start(*args, "--killed-at", repr(killed_at))
        assert proc.wait(timeout=120) == 0


def rows(db: Path, table: str, order: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    conn_rows = query_log(db, f"SELECT * FROM {table} ORDER BY {order}")
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        names = [d[0] for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
    finally:
        conn.close()
    return names, conn_rows


def without_clock(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: "<clock>" if k in PAYLOAD_CLOCK else without_clock(v) for k, v in data.items()}
    return data


def assert_same_log(real: Path, synthetic: Path) -> None:
    for table, order, clock in (
        ("run", "id", RUN_CLOCK),
        ("step", "run_id, seq", TIMES),
        ("event", "id", TIMES),
    ):
        names, want = rows(real, table, order)
        synthetic_names, got = rows(synthetic, table, order)
        assert synthetic_names == names
        assert len(got) == len(want), (
            f"{table}: {len(got)} rows written, the engine wrote {len(want)}"
        )
        for i, name in enumerate(names):
            if name in clock:
                w, g = [r[i] for r in want], [r[i] for r in got]
                assert [v is None for v in g] == [v is None for v in w], f"{table}.{name}: NULLs"
                if table != "run":
                    assert g == sorted(g) or name != "ts", f"{table}.{name} out of order"
                continue
            for n, (w_row, g_row) in enumerate(zip(want, got, strict=True)):
                w, g = w_row[i], g_row[i]
                if name == "data":
                    w, g = without_clock(json.loads(w)), without_clock(json.loads(g))
                assert g == w, f"{table} row {n} ({want[n][:6]}), {name}: wrote {g!r}, engine {w!r}"


def kill_points(db: Path, run_id: str) -> list[int]:
    """After which committed step each kill landed (the takeovers' positions)."""
    events = query_log(db, "SELECT kind, seq FROM event WHERE run_id = ? ORDER BY id", run_id)
    out, last = [], 0
    for kind, seq in events:
        if kind == "step_committed":
            last = seq
        elif kind == "lease_acquired" and last:
            out.append(last)
    return out


def synthetic_twin(real: Path, run_id: str, out: Path, *, finished: bool) -> None:
    """The synthetic run told what the real one was: its agent, workdir, host, pids and kills."""
    (agent, workdir, params, host, boot) = query_log(
        real, "SELECT agent, workdir, params, lease_host, lease_boot FROM run WHERE id = ?", run_id
    )[0]
    pids = [
        json.loads(d)["pid"]
        for (d,) in query_log(
            real, "SELECT data FROM event WHERE kind = 'lease_acquired' ORDER BY id"
        )
    ]
    twin = SyntheticRun(
        run_id,
        STEPS if finished else int(query_log(real, "SELECT count(*) FROM step")[0][0]),
        kills=kill_points(real, run_id),
        finished=finished,
        agent=agent,
        params=json.loads(params),
        max_steps=STEPS * 2,
        workdir=workdir,
        host=host,
        boot=boot,
        pids=pids,
    )
    write_log(out, twin)


@pytest.mark.slow
@pytest.mark.xfail(
    reason="schema 8 (issue 31): the engine records run.version and step.args_hash, the "
    "synthetic writer does not yet",
    strict=True,
)
def test_a_synthetic_log_has_the_rows_of_a_real_run_with_kills(
    engine: Engine, tmp_path: Path
) -> None:
    real_run(engine, "noop", kills_at=[3_000, 9_000], finish=True)
    assert len(kill_points(engine.db, "noop")) == 2
    synthetic = tmp_path / "synthetic.db"
    synthetic_twin(engine.db, "noop", synthetic, finished=True)
    assert_same_log(engine.db, synthetic)


@pytest.mark.slow
@pytest.mark.xfail(
    reason="schema 8 (issue 31): the engine records run.version and step.args_hash, the "
    "synthetic writer does not yet",
    strict=True,
)
def test_a_synthetic_killed_run_has_the_rows_of_a_real_one_left_for_dead(
    engine: Engine, tmp_path: Path
) -> None:
    real_run(engine, "noop", kills_at=[2_000, 6_000], finish=False)
    synthetic = tmp_path / "synthetic.db"
    synthetic_twin(engine.db, "noop", synthetic, finished=False)
    assert_same_log(engine.db, synthetic)
