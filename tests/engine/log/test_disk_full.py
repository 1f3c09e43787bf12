"""A full disk stops the engine with one clear line and a log that resumes once space is back."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.engine import Engine, checkout_env
from helpers.paths import AGENTS


def test_disk_full_stops_with_one_line_and_the_run_resumes_when_space_returns(
    tiny_fs: Path, tmp_path: Path
) -> None:
    engine = Engine(db=tiny_fs / "steplog.db", env=checkout_env())
    args = [
        "run",
        f"{AGENTS}:noop",
        "--run-id",
        "full",
        "--db",
        str(engine.db),
        "--param",
        "n=5000",
        "--workdir",
        str(tmp_path / "wd"),
    ]
    done = engine.run(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [
        line
        for line in done.stderr.splitlines()
        if line.startswith("steplog: ") and "starting run" not in line
    ]
    assert len(lines) == 1 and "writing the log failed" in lines[0] and "full" in lines[0], (
        done.stderr
    )
    assert "Traceback" not in done.stderr

    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_fs)], check=True)
    again = engine.run(*args)
    assert again.returncode == 0, again.stderr
    status = engine.status("full")
    assert (status["status"], status["steps_committed"]) == ("succeeded", 5000)
    assert status["step_executions"] - status["steps_committed"] <= 1


def test_a_full_disk_under_the_workdir_stops_the_run_resumably_not_failed(
    tiny_fs: Path, tmp_path: Path
) -> None:
    """The log has room; the agent's files do not. Retrying cannot help and the run is not at
    fault: the engine stops like after a failed log write, and resumes once space is back."""
    engine = Engine(db=tmp_path / "data" / "steplog.db", env=checkout_env())
    witness = tmp_path / "w.db"
    args = [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "wd-full",
        "--db",
        str(engine.db),
        "--param",
        "n=120",
        "--param",
        f"witness={witness}",
        "--workdir",
        str(tiny_fs / "wd"),
    ]
    done = engine.run(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [
        line
        for line in done.stderr.splitlines()
        if line.startswith("steplog: ") and "starting run" not in line
    ]
    assert (
        len(lines) == 1
        and "could not write" in lines[0]
        and "run the same command again" in lines[0]
    ), done.stderr
    assert "Traceback" not in done.stderr
    status = engine.status("wd-full")
    assert status["status"] == "running" and status["engine"] == "none"  # resumable, lease released

    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_fs)], check=True)
    again = engine.run(*args)
    assert again.returncode == 0, again.stderr
    status = engine.status("wd-full")
    assert (status["status"], status["steps_committed"]) == ("succeeded", 120 * 5)
    import sqlite3

    conn = sqlite3.connect(witness)
    try:  # every effect at the far side exactly once, the full disk notwithstanding
        assert conn.execute("SELECT count(*), count(DISTINCT i) FROM applied").fetchone() == (
            120,
            120,
        )
    finally:
        conn.close()


def test_a_failed_checkpoint_is_not_counted_when_the_lease_is_released(engine: Engine) -> None:
    """The engine raises its usage counters before a step's write; when that write fails, releasing
    the lease (which writes the counters too) must not record the step that was never committed."""
    import sqlite3

    db = str(engine.db)
    assert (
        engine.run(
            "run", f"{AGENTS}:noop", "--run-id", "first", "--db", db, "--param", "n=0"
        ).returncode
        == 0
    )
    conn = sqlite3.connect(engine.db)  # the third step's checkpoint fails as a full disk would
    for when in ("UPDATE OF status", "INSERT"):  # a step row is updated, or inserted, committed
        conn.execute(
            f"CREATE TRIGGER fail_third_{when.split()[0]} BEFORE {when} ON step WHEN NEW.seq = 3"
            " AND NEW.status = 'committed' BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )
    conn.commit()
    conn.close()
    args = ["run", f"{AGENTS}:noop", "--run-id", "r", "--db", db, "--param", "n=5"]
    done = engine.run(*args)
    assert done.returncode == 1 and "writing the log failed" in done.stderr, done.stderr
    assert engine.query("SELECT used_steps, step_executions FROM run WHERE id = 'r'") == [(2, 3)]
    conn = sqlite3.connect(engine.db)
    conn.execute("DROP TRIGGER fail_third_UPDATE")
    conn.execute("DROP TRIGGER fail_third_INSERT")
    conn.commit()
    conn.close()
    assert engine.run(*args).returncode == 0
    assert engine.query("SELECT used_steps FROM run WHERE id = 'r'") == [(5,)]
