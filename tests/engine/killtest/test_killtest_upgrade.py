"""``steplog killtest AGENT --upgrade NEW_AGENT``: runs of the old code killed and resumed on the
new, each kill point reported compatible or refused at the step named (``docs/versions.md``)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.engine import Engine

AGENT = """\
import steplog


@steplog.agent
def three(run):
    run.step("load", str.upper, "a")
    run.step("send", str.upper, {arg!r})
    run.step("close", str.upper, "c")
    return "ok"
"""


def test_an_upgrade_that_changes_step_2_resumes_runs_killed_before_it_and_refuses_the_others(
    engine: Engine, tmp_path: Path
) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = tmp_path / "old" / "agent.py", tmp_path / "new" / "agent.py"
    old.write_text(AGENT.format(arg="to: a"))
    new.write_text(AGENT.format(arg="to: b"))

    done = engine.run("killtest", f"{old}:three", "--upgrade", f"{new}:three", "--json")

    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert (report["steps"], report["compatible"]) == (3, False)
    cases = {c["after_step"]: c for c in report["cases"]}
    assert cases[1]["outcome"] == "compatible"  # step 2 not recorded yet: the new code runs it
    assert (cases[2]["outcome"], cases[2]["at_step"]) == ("refused", 2)
    assert "the code asks `send('to: b')`" in cases[2]["line"]
