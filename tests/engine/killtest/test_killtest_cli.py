"""``steplog killtest`` as a user runs it: the demo passes a storm and a sweep, the naive agent
fails.

Real processes throughout: the CLI launches engines in their own process groups and SIGKILLs them.
Sizes for CI: the storm is the full demo (16 tickets, 67 steps) with 32 kills; the sweep is the
demo with 2 tickets (11 steps, 40 crash-point cases: every kind of step and every point), since
the full sweep (67 steps, 246 cases) takes about 3 minutes on two cores.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers.engine import Engine
from steplog.runtime.crashpoints import POINTS

pytestmark = pytest.mark.slow


def test_the_demo_survives_a_storm_of_30_kills(engine: Engine, tmp_path: Path) -> None:
    junit = tmp_path / "killtest.xml"
    done = engine.run(
        "killtest",
        "demo",
        "--kills",
        "32",
        "--seed",
        "1",
        "--json",
        "--junit",
        str(junit),
        timeout=280,
    )
    report = json.loads(done.stdout)
    storm = report["storm"]
    verdict = storm["verdict"]
    assert done.returncode == 0, json.dumps(verdict["checks"], indent=1) + done.stderr
    assert report["passed"] and storm["error"] is None
    assert storm["kills"] >= 30, "the run finished before the storm's kills landed"
    assert verdict["status"] == "succeeded"
    assert verdict["duplicates"] == verdict["missing"] == verdict["different"] == []
    assert set(verdict["redone_per_kill"]) <= {"0", "1"}
    assert (
        sum(k["redone"] for k in verdict["kills"]) == verdict["redone_steps"]
    )  # each redo traced to its kill
    phases = {k["phase"] for k in verdict["kills"]}
    assert (
        "start-up" in phases and "acting" in phases
    )  # spread from start-up into the act→record window
    lat = verdict["resume_latency"]
    print(
        "\n"
        f"storm: {storm['kills']} kills in {storm['wall_time']:.1f} s; resume latency median "
        f"{lat['median'] * 1000:.0f} ms, p95 {lat['p95'] * 1000:.0f} ms; redone per kill "
        f"{verdict['redone_per_kill']}"
    )

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    names = {case.get("name") for case in suite.iter("testcase")}
    assert {"no duplicate effects", "nothing missing", "at most one redone step per kill"} <= names


def test_the_demo_passes_the_crash_point_sweep(engine: Engine) -> None:
    done = engine.run(
        "killtest", "demo", "--param", "tickets=2", "--kills", "0", "--sweep", "--json", timeout=280
    )
    report = json.loads(done.stdout)
    sweep = report["sweep"]
    failed = [r for r in sweep["results"] if not r["passed"]]
    assert done.returncode == 0, json.dumps(failed[:3], indent=1)
    assert report["reference"]["steps"] == 11
    # load 2 points + 2 tickets × (chat 3 + 3 effects × 5) + summary and digest 2 × 5
    assert sweep["cases"] == 48 and sweep["failed"] == 0
    assert {r["point"] for r in sweep["results"]} == set(POINTS)
    assert all(r["redone"] <= 1 for r in sweep["results"])
    lat = sweep["resume_latency"]
    print(
        "\n"
        f"sweep: {sweep['cases']} cases in {sweep['wall_time']:.1f} s; resume latency median "
        f"{lat['median'] * 1000:.0f} ms, p95 {lat['p95'] * 1000:.0f} ms; redone per kill "
        f"{sweep['redone_per_kill']}"
    )


def test_the_naive_agent_fails_loudly_with_its_duplicates_named(engine: Engine) -> None:
    done = engine.run("killtest", "naive", "--kills", "6", "--seed", "3", timeout=200)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "✗ no duplicate effects" in out
    assert re.search(r"message for ticket T-1001: delivered \d+ times \(keys ", out), out
    assert re.search(r"replies\.log: \d+ extra lines?, written again", out), out
    assert re.search(
        r"helpdesk\.db tickets: row id=T-1001: appears \d+ times \(the reference has 1\)", out
    ), out
    assert out.rstrip().splitlines()[-1].startswith("verdict: FAIL")
    # A FAIL report never ticks the work it cannot count, and says what its words mean.
    assert (
        "· at most one redone step per kill" in out
        and "✓ at most one redone step per kill" not in out
    )
    assert (
        "launches: engine processes started; incarnations: engines that took the run's lease" in out
    )
    assert (
        "(keys killtest…" not in out
    )  # keys are told apart by their ends, not all cut to the run id


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-agent"], "unknown agent 'no-such-agent'"),
        (["demo", "--param", "colour=blue"], "has no parameter 'colour'"),
        (["demo", "--kills", "-1"], "--kills"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(engine: Engine, args: list[str], message: str) -> None:
    done = engine.run("killtest", *args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
