"""``async def`` agents and parallel steps: numbered in call order, replayed identically, killed
and resumed like any agent (the kill test judges the parallel demo by its outbox and workdir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS

pytestmark = pytest.mark.backends("sqlite", "postgres")

GATHERER = f"{AGENTS}:gatherer"


def steps_of(engine: Engine, run_id: str) -> list[tuple[int, str, str]]:
    return [
        (s, n, r)
        for s, n, r in engine.query(
            "SELECT seq, name, result FROM step WHERE run_id = ? ORDER BY seq", run_id
        )
    ]


def test_an_async_agent_with_gathered_steps_runs_and_numbers_them_in_call_order(
    engine: Engine,
) -> None:
    done = engine.run("run", GATHERER, "--run-id", "a", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split(": ", 1)[1])
    assert result == {"squares": [0, 1, 4, 9, 16, 25], "mapped": [100, 101, 102, 103, 104, 105]}
    names = [n for _, n, _ in steps_of(engine, "a")]
    assert names == (
        [f"square {i}" for i in range(6)]
        + [f"ask {i}" for i in range(6)]
        + [f"write out/{i}.txt" for i in range(6)]
        + [f"plus [{i}]" for i in range(6)]
    )


def test_the_log_does_not_depend_on_which_parallel_step_finished_first(engine: Engine) -> None:
    """Three runs whose parallel steps finish in different orders write the same steps, numbered
    the same, with the same results."""
    logs = []
    for seed in (1, 2, 3):
        done = engine.run(
            "run",
            GATHERER,
            "--run-id",
            f"s{seed}",
            "--db",
            str(engine.db),
            "--param",
            f"seed={seed}",
        )
        assert done.returncode == 0, done.stderr
        logs.append(steps_of(engine, f"s{seed}"))
        finished = [
            seq
            for (seq,) in engine.query(
                "SELECT seq FROM event WHERE run_id = ? AND kind = 'step_committed' ORDER BY id",
                f"s{seed}",
            )
        ]
        assert finished != sorted(finished) or seed == 1, "the jitter did not reorder completions"
    assert logs[0] == logs[1] == logs[2]


def test_steps_made_by_coroutines_that_gather_started_are_refused_with_how_to_write_it(
    engine: Engine,
) -> None:
    done = engine.run("run", f"{AGENTS}:branching", "--run-id", "b", "--db", str(engine.db))
    assert done.returncode == 4
    assert "call steps from the agent itself" in done.stdout and "run.map" in done.stdout


def test_run_map_in_a_sync_agent_keeps_item_order_and_its_concurrency(engine: Engine) -> None:
    done = engine.run("run", f"{AGENTS}:mapper", "--run-id", "m", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split(": ", 1)[1])
    assert 1 < result["most_at_once"] <= 3
    assert result["keys"] == ["m:13", "m:14", "m:15"], (
        "current_key() inside a mapped step is that step's key"
    )


def test_parallel_model_calls_never_overshoot_the_token_budget_together(
    engine: Engine, tmp_path: Path
) -> None:
    from steplog.outbox import start_outbox

    with start_outbox(tmp_path / "outbox.db") as outbox:
        done = engine.run(
            "run",
            "demo_async",
            "--run-id",
            "tight",
            "--db",
            str(engine.db),
            "--outbox",
            outbox.url,
            "--param",
            "parallel=4",
            "--max-tokens",
            "2500",
        )
    assert done.returncode == 3, done.stderr
    tokens = engine.status("tight")["budget"]["tokens"]
    assert tokens["used"] <= tokens["limit"] == 2500


def test_the_parallel_demo_writes_and_sends_exactly_what_the_sequential_demo_does(
    engine: Engine, tmp_path: Path
) -> None:
    from steplog.outbox import start_outbox

    def outputs(run_id: str) -> dict[str, bytes]:
        workdir = Path(engine.status(run_id)["workdir"])
        return {str(p.relative_to(workdir)): p.read_bytes() for p in sorted(workdir.rglob("*.md"))}

    bodies = {}
    for agent in ("demo", "demo_async"):
        with start_outbox(tmp_path / f"{agent}.db") as outbox:
            done = engine.run(
                "run",
                agent,
                "--run-id",
                agent,
                "--db",
                str(engine.db),
                "--outbox",
                outbox.url,
                "--param",
                "tickets=6",
            )
            assert done.returncode == 0, done.stderr
            bodies[agent] = sorted(
                json.dumps(d.body, sort_keys=True) for d in outbox.ledger().deliveries
            )
    assert outputs("demo") == outputs("demo_async")
    assert bodies["demo"] == bodies["demo_async"]
    assert engine.status("demo")["result"] == engine.status("demo_async")["result"]


def test_agent_run_async_from_running_asyncio_code(tmp_path: Path) -> None:
    import asyncio

    from helpers import agents_for_tests as a

    async def main() -> object:
        return await a.gatherer.run_async("py", db=tmp_path / "log.db", n=2)

    assert asyncio.run(main()) == {"squares": [0, 1], "mapped": [100, 101]}


@pytest.mark.slow
@pytest.mark.backends(
    "sqlite"
)  # the kill test makes its own logs; storms on PostgreSQL: test_kills, test_postgres
def test_the_parallel_demo_passes_a_storm_of_30_kills_and_the_crash_point_sweep(
    engine: Engine, tmp_path: Path
) -> None:
    # All 16 tickets, and more kills asked than the 30 that must land: the parallel demo is quick,
    # and a kill planned after its end does not land.
    storm = engine.run("killtest", "demo_async", "--kills", "44", "--json", timeout=300)
    report = json.loads(storm.stdout)
    assert storm.returncode == 0 and report["passed"], storm.stdout[-3000:]
    assert report["storm"]["kills"] >= 30, "the run finished before the storm's kills landed"
    in_flight = [
        c
        for c in report["storm"]["verdict"]["checks"]
        if c["name"] == "at most one redone step per kill"
    ]
    assert in_flight and in_flight[0]["ok"]
    sweep = engine.run(
        "killtest",
        "demo_async",
        "--kills",
        "0",
        "--sweep",
        "--param",
        "tickets=2",
        "--json",
        timeout=300,
    )
    assert sweep.returncode == 0 and json.loads(sweep.stdout)["passed"], sweep.stdout[-3000:]


def test_an_async_agent_waits_for_a_signal_and_a_kill_while_waiting_loses_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    import sqlite3
    import time

    from helpers.engine import kill_group

    witness = tmp_path / "witness.db"
    args = (
        "run",
        f"{AGENTS}:async_approval",
        "--run-id",
        "aw",
        "--db",
        str(engine.db),
        "--param",
        f"witness={witness}",
    )
    proc = engine.start(*args)
    deadline = time.monotonic() + 60
    while engine.events("waiting") == 0:  # its three parallel sends done, it waits
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    kill_group(proc)
    proc = engine.start(*args)  # takes the wait up again
    assert (
        engine.run(
            "signal", "aw", "approve", "--db", str(engine.db), "--data", '{"approved": true}'
        ).returncode
        == 0
    )
    assert proc.wait(timeout=60) == 0
    conn = sqlite3.connect(witness)
    assert sorted(i for (i,) in conn.execute("SELECT i FROM applied")) == [0, 1, 2, 3, 4, 5]
    assert conn.execute("SELECT count(*) FROM attempt").fetchone() == (6,)
    conn.close()
    assert engine.query("SELECT count(consumed_seq) FROM signal") == [(1,)]
