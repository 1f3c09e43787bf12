"""A rolling upgrade (``docs/versions.md``): two workers on two versions of one agent (the same
module in two folders, each worker importing its own), runs started on both; each run is
carried on only by the worker whose code can replay it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from helpers.engine import Engine

AGENT = """\
import steplog


@steplog.agent
def work(run):
    run.step("prepare", str.upper, {tag!r})
    run.wait_for("go")
    run.step("finish", str.upper, "done")
    return {tag!r}
"""


def deployment(tmp_path: Path, engine: Engine, tag: str) -> dict[str, str]:
    """A folder holding this version of ``fleet_agent``, and the environment that imports it."""
    folder = tmp_path / tag
    folder.mkdir()
    (folder / "fleet_agent.py").write_text(AGENT.format(tag=tag))
    return {"PYTHONPATH": os.pathsep.join([str(folder), engine.env.get("PYTHONPATH", "")])}


def steplog(engine: Engine, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = engine.run(*args, "--db", str(engine.db), env=env)
    assert done.returncode == 0, done.stderr
    return done


def drain(engine: Engine, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return steplog(engine, env, "worker", "--drain", "--poll", "0.05")


def test_each_worker_carries_on_only_the_runs_its_code_can_replay(
    engine: Engine, tmp_path: Path
) -> None:
    old, new = deployment(tmp_path, engine, "v1"), deployment(tmp_path, engine, "v2")
    first = steplog(engine, old, "submit", "fleet_agent:work").stdout.strip()
    drain(engine, old)  # the old fleet starts it: it waits for "go"
    second = steplog(engine, new, "submit", "fleet_agent:work").stdout.strip()
    drain(engine, new)  # the new fleet starts its own
    for rid in (first, second):
        steplog(engine, old, "signal", rid, "go")

    upgraded = drain(engine, new)  # the new fleet alone: it finishes its run, leaves the other

    assert "left for another worker" in upgraded.stderr
    runs = {r["run_id"]: r for r in json.loads(steplog(engine, new, "runs", "--json").stdout)}
    assert runs[second]["status"] == "succeeded" and runs[second]["result"] == "v2"
    assert runs[first]["status"] == "waiting"
    blocked = runs[first]["blocked"]
    assert blocked["at_step"] == 1 and "blocked for the code of worker" in blocked["reason"]
    assert "step 1: recorded `prepare(…)`" in blocked["reason"]
    listed = steplog(engine, new, "runs").stdout
    assert "blocked: blocked for the code of worker" in listed

    drain(engine, old)  # an old worker is still around: it carries the old run on

    done = engine.status(first)
    assert (done["status"], done["result"], done.get("blocked")) == ("succeeded", "v1", None)
    versions = json.loads(
        steplog(engine, new, "runs", "--json", "--version", done["version"]).stdout
    )
    assert [r["run_id"] for r in versions] == [first]
