"""The side-by-side benchmark (tests/benchmarks/compare.py) keeps working: a tiny run of it on
steplog and the sqlite3 floor (the other peers need the ``bench`` extra), table and raw numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.paths import TESTS

COMPARE = TESTS / "benchmarks" / "compare.py"


def test_the_benchmark_suite_prints_its_table_and_writes_the_raw_numbers(tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    done = subprocess.run(
        [
            sys.executable,
            str(COMPARE),
            "--figures",
            "steps,resume,length",
            "--rounds",
            "2",
            "--n",
            "30",
            "--lengths",
            "20",
            "--peers",
            "steplog,sqlite3",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "1. Durable no-op steps/s, N = 30" in done.stdout
    steplog_row = next(line for line in done.stdout.splitlines() if line.startswith("steplog  "))
    assert "WAL/FULL" in steplog_row and "1.00x" in steplog_row
    raw = json.loads(out.read_text())
    steps = raw["steps"]
    assert [len(steps["raw"][s]["steplog"]) for s in ("FULL", "NORMAL")] == [2, 2]  # one per round
    assert {x["synchronous"] for x in steps["raw"]["NORMAL"]["steplog"]} == {
        "NORMAL"
    }  # read back, not assumed
    # A step row and one event per step (a deferred start), plus the run's own few rows.
    assert 2.0 < steps["peers"]["steplog"]["rows_per_step"]["median"] < 2.5
    resume = raw["resume"]["peers"]["steplog"]
    assert (
        resume["correct"] and resume["redone"]["max"] <= 1
    )  # killed mid-run, resumed, nothing lost
    assert set(raw["length"]["table"]["20"]["steplog"]) == {"setup", "recovery", "resume", "total"}
    # Table 0: issue 29's figures beside their targets; what this run measured is filled in, the
    # rest says why it is missing instead of borrowing an earlier run's number.
    targets = done.stdout.split("0. Issue 29's targets")[1].split("\n\n")[0].splitlines()
    row = {line[:62].strip(): line[62:].split() for line in targets[2:]}
    assert row["durable no-op steps/s at FULL / raw sqlite3 commit floor"][1:3] == [">=", "0.8x"]
    assert row["kill -> first new step / python -c 'import steplog'"][0].endswith("x")
    assert row["bytes per no-op step / DBOS's"][0] == "-"  # DBOS was not among the peers
    assert "not measured" in " ".join(row["PostgreSQL steps/s at FULL / DBOS's on the same server"])


def test_a_bad_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(COMPARE), "--peers", "steplog,nosuchpeer"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown peer(s) ['nosuchpeer']" in done.stderr
