"""Run control against real engine processes: wait for a signal, cancel, retry, fork.

Effects go to a *witness* (a SQLite file playing the far side: it records every attempt and applies
each idempotency key once), so "nothing sent twice" is read from the far side, not from the log.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group, storm
from helpers.logs import log_bytes
from helpers.paths import AGENTS
from helpers.waiting import wait_until
from helpers.witness import applied, items_of

pytestmark = pytest.mark.backends("sqlite", "postgres")

APPROVAL = f"{AGENTS}:approval"
FIXABLE = f"{AGENTS}:fixable"
WITNESS = f"{AGENTS}:witness"


def is_waiting(engine: Engine, run_id: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return bool(
                engine.query("SELECT 1 FROM run WHERE id = ? AND status = 'waiting'", run_id)
            )
        except sqlite3.OperationalError:
            return False

    return check


def digest(path: Path) -> str:
    return hashlib.sha256(log_bytes(path)).hexdigest()


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# -- waiting for a signal ---------------------------------------------------------------------


def test_a_waiting_run_shows_waiting_keeps_its_lease_and_carries_on_when_signalled(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    proc = engine.start(
        "run", APPROVAL, "--run-id", "w1", "--db", db, "--param", f"witness={witness}"
    )
    wait_until(is_waiting(engine, "w1"))
    s = engine.status("w1")
    assert (s["status"], s["waiting_for"], s["engine"]) == ("waiting", "approve", "live")
    assert items_of(witness, "w1") == [0, 1, 2]

    sent = engine.run(
        "signal", "w1", "approve", "--db", db, "--data", '{"approved": true, "note": "ok by Ana"}'
    )
    assert sent.returncode == 0, sent.stderr
    assert "its engine carries on now" in sent.stderr
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out.split(": ", 1)[1]) == {"approved": True, "sent": 6, "note": "ok by Ana"}
    assert items_of(witness, "w1") == [0, 1, 2, 3, 4, 5]
    assert engine.query("SELECT consumed_seq FROM signal WHERE run_id = 'w1'") == [(7,)]
    assert "waiting_for" not in engine.status("w1")


def test_a_signal_sent_before_the_wait_is_kept_and_consumed_by_it(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    proc = engine.start(
        "run",
        APPROVAL,
        "--run-id",
        "early",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "pause=1.0",
    )  # ~3 s of work before the wait: room for a slow signal command
    wait_until(lambda: engine.events("step_committed") >= 1)
    assert (
        engine.run(
            "signal", "early", "approve", "--db", db, "--data", '{"approved": false}'
        ).returncode
        == 0
    )
    code, out, err = finish(proc)
    assert code == 0, err
    assert '"approved": false' in out
    assert engine.events("waiting") == 0, "the signal was there already: the run never had to wait"
    assert items_of(witness, "early") == [0, 1, 2]


def test_exit_when_waiting_lets_the_run_go_and_the_signal_command_says_how_to_carry_on(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    args = ("run", APPROVAL, "--run-id", "batch", "--db", db, "--param", f"witness={witness}")
    first = engine.run(*args, "--exit-when-waiting")
    assert first.returncode == 6, first.stderr
    assert "steplog signal batch approve" in first.stdout
    s = engine.status("batch")
    assert (s["status"], s["waiting_for"], s["engine"]) == ("waiting", "approve", "none")

    sent = engine.run("signal", "batch", "approve", "--db", db, "--data", '{"approved": true}')
    assert f"steplog run {APPROVAL} --run-id batch" in sent.stderr
    again = engine.run(*args)
    assert again.returncode == 0, again.stderr
    assert items_of(witness, "batch") == [0, 1, 2, 3, 4, 5]
    s = engine.status("batch")
    assert s["step_executions"] == s["steps_committed"], "taking a wait up again redoes nothing"


def test_a_signal_with_the_same_key_is_one_signal(engine: Engine, tmp_path: Path) -> None:
    db = str(engine.db)
    assert (
        engine.run(
            "run",
            APPROVAL,
            "--run-id",
            "k",
            "--db",
            db,
            "--param",
            f"witness={tmp_path / 'w.db'}",
            "--exit-when-waiting",
        ).returncode
        == 6
    )
    for _ in range(3):
        sent = engine.run(
            "signal", "k", "approve", "--db", db, "--key", "click-1", "--data", '{"approved": true}'
        )
        assert sent.returncode == 0, sent.stderr
    assert "already sent with this key" in sent.stdout
    assert engine.query("SELECT count(*) FROM signal") == [(1,)]
    assert engine.events("signal_sent") == 1


def test_waiting_does_not_use_the_seconds_budget(engine: Engine, tmp_path: Path) -> None:
    db = str(engine.db)
    proc = engine.start(
        "run",
        APPROVAL,
        "--run-id",
        "patient",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--max-seconds",
        "2",
    )
    wait_until(is_waiting(engine, "patient"))
    time.sleep(2.5)  # longer than the whole budget
    assert engine.status("patient")["status"] == "waiting"
    engine.run("signal", "patient", "approve", "--db", db, "--data", '{"approved": true}')
    code, _, err = finish(proc)
    assert code == 0, err
    assert engine.status("patient")["budget"]["seconds"]["used"] < 2


def test_a_wait_that_times_out_raises_wait_timeout_and_replays_the_same(
    engine: Engine, tmp_path: Path
) -> None:
    db = str(engine.db)
    args = (
        "run",
        APPROVAL,
        "--run-id",
        "late",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "timeout=0.2",
    )
    done = engine.run(*args)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.split(": ", 1)[1]) == {"approved": None, "sent": 3}
    (result,) = engine.query("SELECT result FROM step WHERE run_id = 'late' AND kind = 'wait'")[0]
    assert json.loads(result)["timeout"] is True
    # A signal that comes after the timeout is refused: the run has finished.
    late = engine.run("signal", "late", "approve", "--db", db)
    assert late.returncode == 2 and "already ended succeeded" in late.stderr


def test_signalling_unknown_runs_or_with_bad_data_is_refused_and_writes_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    db = str(engine.db)
    engine.run(
        "run",
        APPROVAL,
        "--run-id",
        "x",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--exit-when-waiting",
    )
    before = engine.query("SELECT count(*) FROM event")
    bad = engine.run("signal", "x", "approve", "--db", db, "--data", "{not json")
    assert bad.returncode == 2 and "--data is not JSON" in bad.stderr
    unknown = engine.run("signal", "nope", "approve", "--db", db)
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr
    assert engine.query("SELECT count(*) FROM event") == before


def test_kills_while_waiting_and_right_after_the_signal_consume_it_exactly_once(
    engine: Engine, tmp_path: Path
) -> None:
    """A storm of kills over a run that waits, is signalled, and carries on: the signal is
    consumed once, every effect applied once, the run ends as an unkilled one would."""
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    args = [
        "run",
        APPROVAL,
        "--run-id",
        "stormy",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "n=4",
    ]
    rng = random.Random(7)
    kills = 0
    signalled = False
    while True:
        proc = engine.start(*args)
        if not signalled and kills >= 3:
            wait_until(is_waiting(engine, "stormy"))
            engine.run("signal", "stormy", "approve", "--db", db, "--data", '{"approved": true}')
            signalled = True
            # Kill right after the signal landed: before, during or after the wait step's record.
            time.sleep(rng.uniform(0.0, 0.15))
            kill_group(proc)
            kills += 1
            continue
        try:
            code = proc.wait(timeout=rng.uniform(0.3, 0.9) if kills < 8 else 120)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            kills += 1
            continue
        proc.communicate()
        if code == 0:
            break
        assert code == 0
    assert signalled and kills >= 4
    assert engine.query("SELECT count(*), count(consumed_seq) FROM signal") == [(1, 1)]
    assert items_of(witness, "stormy") == list(range(8))
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)), "an effect was applied twice"
    assert engine.status("stormy")["result"] == {"approved": True, "sent": 8, "note": None}


# -- cancel ----------------------------------------------------------------------------------


def test_cancelling_a_run_no_engine_holds_ends_it_at_once_and_it_never_runs_again(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    args = ("run", APPROVAL, "--run-id", "c1", "--db", db, "--param", f"witness={witness}")
    assert engine.run(*args, "--exit-when-waiting").returncode == 6
    done = engine.run("cancel", "c1", "--db", db, "--reason", "the customer withdrew")
    assert done.returncode == 0, done.stderr
    assert "run c1 cancelled (the customer withdrew)" in done.stdout
    s = engine.status("c1")
    assert (s["status"], s["reason"]) == ("cancelled", "the customer withdrew")

    before = digest(engine.db)
    again = engine.run(*args)
    assert again.returncode == 5
    assert "was cancelled: the customer withdrew" in again.stdout
    assert items_of(witness, "c1") == [0, 1, 2]
    refused = engine.run("cancel", "c1", "--db", db)
    assert refused.returncode == 2 and "already ended cancelled" in refused.stderr
    assert engine.run("signal", "c1", "approve", "--db", db).returncode == 2
    assert digest(engine.db) == before


def test_a_live_engine_stops_at_its_next_step_boundary_and_sends_nothing_after(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    proc = engine.start(
        "run",
        WITNESS,
        "--run-id",
        "c2",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "n=400",
        "--param",
        "pause=0.01",
    )
    wait_until(lambda: engine.events("step_committed") >= 10)
    done = engine.run("cancel", "c2", "--db", db, "--reason", "enough")
    assert done.returncode == 0, done.stderr
    assert "run c2 cancelled (enough)" in done.stdout
    code, out, _ = finish(proc)
    assert code == 5
    assert "was cancelled: enough" in out
    (asked,) = engine.query("SELECT id FROM event WHERE kind = 'cancel_requested'")[0]
    later = engine.query("SELECT DISTINCT seq FROM event WHERE seq IS NOT NULL AND id > ?", asked)
    assert len(later) <= 1, (
        f"only the step in flight may go on (finish or be abandoned), not {later}"
    )
    assert engine.status("c2")["status"] == "cancelled"
    assert len(items_of(witness, "c2")) < 400


def test_cancelling_a_waiting_engine_ends_it_promptly(engine: Engine, tmp_path: Path) -> None:
    db = str(engine.db)
    proc = engine.start(
        "run", APPROVAL, "--run-id", "c3", "--db", db, "--param", f"witness={tmp_path / 'w.db'}"
    )
    wait_until(is_waiting(engine, "c3"))
    assert engine.run("cancel", "c3", "--db", db).returncode == 0
    code, _, _ = finish(proc, timeout=10)
    assert code == 5
    assert engine.status("c3")["reason"] == "cancelled with steplog cancel"


def test_a_cancel_asked_of_an_engine_that_then_dies_is_honoured_by_the_next_claim(
    engine: Engine, tmp_path: Path
) -> None:
    db = str(engine.db)
    args = (
        "run",
        WITNESS,
        "--run-id",
        "c4",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "n=3",
        "--param",
        "pause=5",
        "--lease-seconds",
        "60",
    )
    proc = engine.start(*args)
    wait_until(
        lambda: engine.events("step_started") >= 1
    )  # inside a 5 s step, far from its boundary
    asked = engine.run("cancel", "c4", "--db", db, "--wait", "0")
    assert asked.returncode == 0 and "cancel requested" in asked.stderr
    kill_group(proc)
    again = engine.run(*args)
    assert again.returncode == 5, again.stderr
    assert engine.status("c4")["status"] == "cancelled"


# -- retry -----------------------------------------------------------------------------------


def test_a_failed_run_retried_runs_again_from_its_failed_step_with_fresh_attempts(
    engine: Engine, tmp_path: Path
) -> None:
    witness, fixed = tmp_path / "witness.db", tmp_path / "fixed"
    db = str(engine.db)
    first = engine.run(
        "run",
        FIXABLE,
        "--run-id",
        "r",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        f"fixed_when={fixed}",
    )
    assert first.returncode == 4 and "is missing" in first.stdout
    refused_again = engine.run("retry", "r", "--db", db)
    assert refused_again.returncode == 4, "not fixed yet: it fails again, the same way"

    fixed.touch()
    done = engine.run("retry", "r", "--db", db)
    assert done.returncode == 0, done.stderr
    assert items_of(witness, "r") == [0, 1, 2, 3, 4, 5]
    assert engine.query("SELECT attempts FROM step WHERE run_id = 'r' AND name = 'check'") == [(1,)]
    assert engine.events("retried") == 2
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys))


def test_retry_refuses_runs_that_have_not_failed_and_says_what_to_do_instead(
    engine: Engine, tmp_path: Path
) -> None:
    db = str(engine.db)
    engine.run(
        "run",
        WITNESS,
        "--run-id",
        "ok",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "n=1",
    )
    before = digest(engine.db)
    done = engine.run("retry", "ok", "--db", db)
    assert done.returncode == 2 and "nothing to retry" in done.stderr
    assert digest(engine.db) == before


def test_changed_code_blocks_a_run_instead_of_failing_it_and_retry_has_nothing_to_do(
    engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "changing.py"
    source = (
        "import steplog\n"
        "\n"
        "@steplog.agent\n"
        "def a(run):\n"
        "    run.step({!r}, int, 1)\n"
        "    run.step('two', int, 2)\n"
        "    return 2\n"
    )
    agent.write_text(source.format("one"))
    db = str(engine.db)
    crashed = engine.run(
        "run",
        f"{agent}:a",
        "--run-id",
        "nd",
        "--db",
        db,
        env={"STEPLOG_CRASH_AT": "after_step_record@1"},
    )
    assert crashed.returncode == 86
    agent.write_text(source.format("one, renamed"))  # the code changed under a run in progress
    blocked = engine.run("run", f"{agent}:a", "--run-id", "nd", "--db", db)
    assert blocked.returncode == 6 and "step 1: recorded `one(…)`" in blocked.stderr
    assert engine.status("nd")["status"] == "running"
    before = digest(engine.db)
    refused = engine.run("retry", "nd", "--db", db)
    assert refused.returncode == 2, "a blocked run has not failed: nothing to retry"
    assert digest(engine.db) == before
    agent.write_text(source.format("one"))  # the code put back: the run carries on
    assert engine.run("run", f"{agent}:a", "--run-id", "nd", "--db", db).returncode == 0


def test_retry_after_an_unconfirmed_effect_needs_force_and_then_sends_it_again(
    engine: Engine, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.txt"
    db = str(engine.db)
    args = (
        "run",
        f"{AGENTS}:fire_and_forget",
        "--run-id",
        "nr",
        "--db",
        db,
        "--param",
        f"outbox_file={sent}",
    )
    crashed = engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_started@2"})
    assert crashed.returncode == 86
    failed = engine.run(*args)
    assert failed.returncode == 4 and "needs reconciliation" in failed.stdout
    refused = engine.run("retry", "nr", "--db", db)
    assert refused.returncode == 2 and "check the target by hand" in refused.stderr
    forced = engine.run("retry", "nr", "--db", db, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "will be sent again" in forced.stderr
    assert sent.read_text().splitlines() == ["nr:2"]


# -- fork ------------------------------------------------------------------------------------


def test_a_fork_copies_history_never_effects_and_sends_its_own_from_the_fork_point(
    engine: Engine, tmp_path: Path
) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    parent = engine.run(
        "run",
        WITNESS,
        "--run-id",
        "p",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "n=4",
    )
    assert parent.returncode == 0, parent.stderr
    attempts_before = sqlite3.connect(witness).execute("SELECT count(*) FROM attempt").fetchone()[0]

    # Steps 1..10 are items 0 and 1 (5 steps each); the fork runs items 2 and 3 itself.
    done = engine.run("fork", "p", "--at-step", "11", "--run-id", "p-fork", "--db", db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "p-fork"
    s = engine.status("p-fork")
    assert s["forked_from"] == {"run_id": "p", "at_step": 11}
    assert s["result"] == engine.status("p")["result"]
    assert (s["steps_committed"], s["step_executions"]) == (20, 20)
    assert items_of(witness, "p-fork") == [2, 3], (
        "copied steps keep the parent's keys and are not sent again"
    )
    attempts_after = sqlite3.connect(witness).execute("SELECT count(*) FROM attempt").fetchone()[0]
    assert attempts_after - attempts_before == 2
    assert engine.events("step_copied") == 10
    # Its workdir started as a copy of the parent's: files of both halves are there, byte-identical.
    parent_dir, fork_dir = Path(engine.status("p")["workdir"]), Path(s["workdir"])
    assert sorted(p.name for p in (fork_dir / "out").iterdir()) == [
        "0.txt",
        "1.txt",
        "2.txt",
        "3.txt",
    ]
    assert (fork_dir / "out" / "3.txt").read_bytes() == (parent_dir / "out" / "3.txt").read_bytes()


def test_a_fork_with_a_changed_param_runs_its_own_future(engine: Engine, tmp_path: Path) -> None:
    witness = tmp_path / "witness.db"
    db = str(engine.db)
    assert (
        engine.run(
            "run",
            APPROVAL,
            "--run-id",
            "pa",
            "--db",
            db,
            "--param",
            f"witness={witness}",
            "--param",
            "timeout=0",
        ).returncode
        == 0
    )
    forked = engine.run(
        "fork",
        "pa",
        "--at-step",
        "7",
        "--run-id",
        "pa2",
        "--db",
        db,
        "--param",
        "timeout=-1",
        "--exit-when-waiting",
    )
    assert forked.returncode == 6, forked.stderr
    assert engine.status("pa2")["params"]["timeout"] == -1.0
    engine.run("signal", "pa2", "approve", "--db", db, "--data", '{"approved": true}')
    assert engine.run("run", APPROVAL, "--run-id", "pa2", "--db", db).returncode == 0
    assert items_of(witness, "pa") == [0, 1, 2]
    assert items_of(witness, "pa2") == [3, 4, 5]


def test_a_running_run_can_be_forked_from_a_committed_step_but_not_beyond(
    engine: Engine, tmp_path: Path
) -> None:
    db = str(engine.db)
    proc = engine.start(
        "run",
        WITNESS,
        "--run-id",
        "live",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "n=100",
        "--param",
        "pause=0.02",
    )
    try:
        wait_until(lambda: engine.events("step_committed") >= 6)
        beyond = engine.run("fork", "live", "--at-step", "400", "--db", db)
        assert beyond.returncode == 2 and "has committed steps 1.." in beyond.stderr
        early = engine.run(
            "fork", "live", "--at-step", "6", "--run-id", "early", "--db", db, "--max-steps", "7"
        )
        assert early.returncode == 3, (
            early.stderr
        )  # gave up at its own budget: 5 copied + 2 of its own
        assert engine.status("early")["forked_from"] == {"run_id": "live", "at_step": 6}
    finally:
        kill_group(proc)


def test_fork_refuses_bad_input_and_writes_nothing(engine: Engine, tmp_path: Path) -> None:
    db = str(engine.db)
    engine.run(
        "run",
        WITNESS,
        "--run-id",
        "src",
        "--db",
        db,
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        "n=1",
    )
    before = digest(engine.db)
    cases: list[tuple[tuple[str, ...], str]] = [
        (("fork", "nope", "--at-step", "1"), "no run 'nope'"),
        (("fork", "src", "--at-step", "0"), "--at-step"),
        (("fork", "src", "--at-step", "2", "--run-id", "src"), "exists already"),
        (("fork", "src", "--at-step", "2", "--run-id", "bad id"), "may use letters"),
        (("fork", "src", "--at-step", "2", "--param", "nosuch=1"), "has no parameter 'nosuch'"),
        (("fork", "src", "--at-step", "2", "--max-steps", "-1"), "max"),
    ]
    for args, message in cases:
        done = engine.run(*args, "--db", db)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
    assert digest(engine.db) == before
    assert not (engine.db.parent / "runs" / "src" / ".." / "nope").exists()


def test_kill_storm_on_a_forked_run_and_on_its_retry_sends_nothing_twice(
    engine: Engine, tmp_path: Path
) -> None:
    witness, fixed = tmp_path / "witness.db", tmp_path / "fixed"
    db = str(engine.db)
    base = ["--db", db]
    first = engine.run(
        "run",
        FIXABLE,
        "--run-id",
        "base",
        *base,
        "--param",
        f"witness={witness}",
        "--param",
        "n=6",
        "--param",
        f"fixed_when={fixed}",
    )
    assert first.returncode == 4
    fixed.touch()
    fork = engine.run(
        "fork", "base", "--at-step", "5", "--run-id", "branch", *base, "--max-steps", "1"
    )
    assert fork.returncode == 3, (
        fork.stderr
    )  # created; its first step hit the budget we set on purpose
    rng = random.Random(11)
    s1 = storm(
        engine,
        ["run", FIXABLE, "--run-id", "branch", *base, "--max-steps", "1000"],
        rng,
        max_kills=8,
        low=0.15,
        high=0.5,
    )
    assert s1.exit_code == 0
    s2 = storm(engine, ["retry", "base", *base], rng, max_kills=1, low=0.2, high=0.4)
    if s2.exit_code != 0:  # killed mid-retry: the run is running again, so it resumes like any run
        s2 = storm(
            engine,
            ["run", FIXABLE, "--run-id", "base", *base],
            rng,
            max_kills=6,
            low=0.15,
            high=0.5,
        )
    assert s2.exit_code == 0
    assert items_of(witness, "branch") == list(range(2, 12))
    assert items_of(witness, "base") == list(range(12))
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)), "an effect was applied twice"
    print(f"kills: fork {s1.kills}, retry {s2.kills}")


def test_the_python_api_does_what_the_commands_do(engine: Engine, tmp_path: Path) -> None:
    import steplog

    witness = tmp_path / "witness.db"
    db = engine.db
    assert (
        engine.run(
            "run",
            APPROVAL,
            "--run-id",
            "api",
            "--db",
            str(db),
            "--param",
            f"witness={witness}",
            "--exit-when-waiting",
        ).returncode
        == 6
    )
    assert steplog.signal("api", "approve", {"approved": True}, db=db) == 1
    new = steplog.fork("api", 3, new_run_id="api-fork", db=db)
    assert new == "api-fork"
    assert steplog.cancel("api-fork", "not needed", db=db) is True
    assert engine.status("api-fork")["status"] == "cancelled"
    assert engine.run("run", APPROVAL, "--run-id", "api", "--db", str(db)).returncode == 0
    with pytest.raises(steplog.ControlRefused, match="already ended succeeded"):
        steplog.cancel("api", db=db)


@pytest.mark.slow
def test_a_crash_at_every_point_of_a_forks_steps_and_of_a_signalled_wait_loses_and_repeats_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    """The sweep: for each step the run makes itself and each crash point, die exactly there,
    resume, and compare with the uncrashed run: same result, each effect applied once."""
    from steplog.runtime.crashpoints import POINTS

    witness = tmp_path / "witness.db"
    db = str(engine.db)
    base = ("--db", db, "--param", f"witness={witness}", "--param", "n=1")
    assert (
        engine.run("run", APPROVAL, "--run-id", "parent", *base, "--param", "timeout=0").returncode
        == 0
    )
    # The fork runs from step 3 (the wait) on: wait (signal sent beforehand), compute 1, apply 1.
    cases = 0
    for seq in (3, 4, 5):
        for point in POINTS:
            rid = f"f{seq}-{point}"
            made = engine.run(
                "fork",
                "parent",
                "--at-step",
                "3",
                "--run-id",
                rid,
                "--db",
                db,
                "--no-start",
                "--param",
                "timeout=-1",
            )
            assert made.returncode == 0, made.stderr
            engine.run("signal", rid, "approve", "--db", db, "--data", '{"approved": true}')
            crashed = engine.run(
                "run",
                APPROVAL,
                "--run-id",
                rid,
                "--db",
                db,
                env={"STEPLOG_CRASH_AT": f"{point}@{seq}"},
            )
            if crashed.returncode != 86:  # this step has no such point (a wait decides nothing)
                assert crashed.returncode == 0, crashed.stderr
                continue
            cases += 1
            resumed = engine.run("run", APPROVAL, "--run-id", rid, "--db", db)
            assert resumed.returncode == 0, (rid, resumed.stderr)
            assert engine.status(rid)["result"] == {"approved": True, "sent": 2, "note": None}, rid
            assert items_of(witness, rid) == [1], rid
            assert engine.query("SELECT count(consumed_seq) FROM signal WHERE run_id = ?", rid) == [
                (1,)
            ], rid
    keys = [k for k, _ in applied(witness)]
    assert len(keys) == len(set(keys)), "an effect was applied twice"
    print(f"{cases} crash cases")
    assert cases >= 8


def test_a_forks_copy_of_a_running_parents_workdir_leaves_out_half_written_files(
    tmp_path: Path,
) -> None:
    """The parent writes files atomically (a temporary file renamed into place): the fork copies the
    finished files, not the temporary ones, and one renamed away mid-copy is skipped, not an
    error."""
    from steplog.control.commands import _copy_if_there, _stage_workdir

    parent = tmp_path / "parent"
    (parent / "out").mkdir(parents=True)
    (parent / "out" / "7.txt").write_text("seven")
    (parent / "out" / ".8.txt.0b63710ce3cb.tmp").write_text("half of eig")
    (parent / ".notes.tmp").write_text("a person's own file that happens to end in .tmp")
    staged = _stage_workdir(parent, tmp_path / "runs" / "fork")
    copied = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert copied == [".notes.tmp", "out/7.txt"]
    _copy_if_there(str(parent / "out" / "gone.txt"), str(staged / "gone.txt"))  # vanished: no error
    assert not (staged / "gone.txt").exists()
