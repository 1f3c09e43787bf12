"""The kill test, engine side: real ``steplog run`` processes, real SIGKILL of the whole group.

A passing engine resumes from its checkpoint, redoes at most one step per kill, and applies
every effect exactly once, whatever moment the kill lands on.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
from pathlib import Path

import pytest

from helpers.engine import Engine, checkout_env, storm
from helpers.witness import witness_args
from steplog.runtime.crashpoints import CRASH_EXIT_CODE, POINTS

STORM_KILLS = 24
SEED = int(os.environ.get("STEPLOG_TEST_SEED", "20261130"))


def witness_rows(witness: Path) -> tuple[list[tuple[str, int]], int]:
    """(applied (key, i) rows, number of attempts) as the far side saw them."""
    conn = sqlite3.connect(witness)
    try:
        applied = conn.execute("SELECT key, i FROM applied ORDER BY i").fetchall()
        attempts = conn.execute("SELECT count(*) FROM attempt").fetchone()[0]
    finally:
        conn.close()
    return applied, attempts


def files_of(workdir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workdir)): p.read_bytes() for p in sorted((workdir / "out").iterdir())
    }


def rows_of(workdir: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(workdir / "rows.db")
    try:
        return conn.execute("SELECT i, value FROM items ORDER BY i").fetchall()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[int, tuple[dict[str, bytes], list[tuple[int, int]], int]]:
    """Uninterrupted runs to compare with, by item count: files, merged rows, tokens used."""
    cache: dict[int, tuple[dict[str, bytes], list[tuple[int, int]], int]] = {}

    def make(n: int) -> None:
        base = tmp_path_factory.mktemp(f"reference{n}")
        eng = Engine(db=base / "ref.db", env=checkout_env())
        done = eng.run(*witness_args(eng, "ref", base / "w.db", n, 0.0))
        assert done.returncode == 0, done.stderr
        status = eng.status("ref")
        workdir = Path(status["workdir"])
        cache[n] = (files_of(workdir), rows_of(workdir), status["budget"]["tokens"]["used"])

    for n in (4, 400):
        make(n)
    return cache


@pytest.mark.slow  # 40 s each and 34 s for the reference runs; 89 s at a load of 7
@pytest.mark.backends("sqlite", "postgres")
def test_a_storm_of_kills_loses_nothing_and_duplicates_nothing(
    engine: Engine, tmp_path: Path, reference
) -> None:  # type: ignore[no-untyped-def]
    """At least STORM_KILLS kills at random moments (start-up, inside steps, in the act→record
    window); should a run finish first, the storm goes on with a fresh run."""
    n = 400
    rng = random.Random(SEED)
    total, latencies = 0, []
    for attempt in range(10):
        run_id, witness = f"storm{attempt}", tmp_path / f"witness{attempt}.db"
        result = storm(
            engine, witness_args(engine, run_id, witness, n, 0.02), rng, STORM_KILLS - total
        )
        assert result.exit_code == 0  # never 75: a dead holder is taken over at once
        total += result.kills

        status = engine.status(run_id)
        assert status["status"] == "succeeded"
        assert status["steps_committed"] == n * 5
        assert status["step_executions"] - status["steps_committed"] <= result.kills
        applied, attempts = witness_rows(witness)
        assert [i for _key, i in applied] == list(range(n))  # every effect applied, none twice
        assert attempts - len(applied) <= result.kills  # only a kill ever makes the engine re-send
        ref_files, ref_rows, _tokens = reference[n]
        workdir = Path(status["workdir"])
        assert files_of(workdir) == ref_files  # byte for byte
        assert rows_of(workdir) == ref_rows
        firsts = dict(
            engine.query(
                "SELECT incarnation, min(ts) FROM event WHERE run_id = ? AND kind = "
                "'step_committed' GROUP BY incarnation",
                run_id,
            )
        )
        for (
            t
        ) in result.kill_times:  # kill -> first step committed by a later engine (reported only)
            later = [ts for ts in firsts.values() if ts > t]
            if later:
                latencies.append(min(later) - t)
        if total >= STORM_KILLS:
            break
    assert total >= STORM_KILLS
    if latencies:
        print(
            "\n"
            f"resume latency over {len(latencies)} kills: median "
            f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )


# Which crash points each step of a witness item passes, by its position in the item.
KIND_POINTS = {
    1: ("before_step_record", "after_step_record"),  # compute (call)
    2: ("after_decision", "before_step_record", "after_step_record"),  # think (chat)
    3: (
        "after_effect_started",
        "after_effect_applied",
        "after_effect_completed",
        "before_step_record",
        "after_step_record",
    ),  # apply
    4: (
        "after_effect_started",
        "after_effect_applied",
        "after_effect_completed",
        "before_step_record",
        "after_step_record",
    ),  # write
    5: (
        "after_effect_started",
        "after_effect_applied",
        "after_effect_completed",
        "before_step_record",
        "after_step_record",
    ),  # merge
}
CASES = [
    (point, item * 5 + pos)
    for item in (0, 3)
    for pos, points in KIND_POINTS.items()
    for point in points
]


def test_every_crash_point_is_covered() -> None:
    assert {p for p, _ in CASES} == set(POINTS)


@pytest.mark.parametrize(("point", "seq"), CASES, ids=[f"{p}@{s}" for p, s in CASES])
def test_a_crash_at_each_point_resumes_with_no_duplicate_and_nothing_missing(
    engine: Engine, tmp_path: Path, reference, point: str, seq: int
) -> None:  # type: ignore[no-untyped-def]
    crash_and_resume(engine, tmp_path, reference, point, seq)


PG_CASES = [
    (point, seq) for point, seq in CASES if seq <= 5
]  # the first item: every kind of step, every point


@pytest.mark.backends("postgres")
@pytest.mark.parametrize(("point", "seq"), PG_CASES, ids=[f"{p}@{s}" for p, s in PG_CASES])
def test_a_crash_at_each_point_on_postgres(
    engine: Engine, tmp_path: Path, reference, point: str, seq: int
) -> None:  # type: ignore[no-untyped-def]
    crash_and_resume(engine, tmp_path, reference, point, seq)


def crash_and_resume(engine: Engine, tmp_path: Path, reference, point: str, seq: int) -> None:  # type: ignore[no-untyped-def]
    n, witness = 4, tmp_path / "witness.db"
    args = witness_args(engine, "cp", witness, n, 0.0)
    crashed = engine.run(*args, env={"STEPLOG_CRASH_AT": f"{point}@{seq}"})
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    assert f"crash point {point}@{seq} reached" in crashed.stderr  # proof the point was hit
    assert engine.status("cp")["status"] == "running"

    resumed = engine.run(*args)
    assert resumed.returncode == 0, resumed.stderr
    status = engine.status("cp")
    assert status["steps_committed"] == n * 5
    assert status["step_executions"] - status["steps_committed"] <= 1  # at most the one step redone
    applied, attempts = witness_rows(witness)
    assert [i for _key, i in applied] == list(range(n))
    assert attempts - len(applied) <= 1
    ref_files, ref_rows, ref_tokens = reference[n]
    assert files_of(Path(status["workdir"])) == ref_files
    assert rows_of(Path(status["workdir"])) == ref_rows
    # A committed decision is reused, never asked for (or paid) twice.
    assert status["budget"]["tokens"]["used"] == ref_tokens
