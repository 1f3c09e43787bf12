"""The forge workflow (.github/workflows/ci.yml) says the same as .ci/run: valid YAML, the README's
test command on Linux, macOS and Windows, then the desktop bundle built and smoke-tested."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    found = re.search(
        r"^(pip install -e \"\.\[test\]\" && python -m pytest)$",
        (ROOT / "README.md").read_text(),
        re.M,
    )
    assert found is not None, "the README no longer shows its test command"
    return found.group(1)


def test_the_workflow_runs_the_readme_test_command_on_three_oses_and_builds_the_bundle() -> None:
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    command = readme_test_command()
    assert command in (ROOT / ".ci" / "run").read_text()
    test, bundle = flow["jobs"]["test"], flow["jobs"]["bundle"]
    assert set(test["strategy"]["matrix"]["os"]) == {
        "ubuntu-latest",
        "macos-latest",
        "windows-latest",
    }
    runs = [step.get("run", "") for step in test["steps"]]
    assert any(command in r for r in runs) and any(".ci/run" in r for r in runs)
    assert set(bundle["strategy"]["matrix"]["os"]) == set(test["strategy"]["matrix"]["os"])
    bundle_runs = " ".join(step.get("run", "") for step in bundle["steps"])
    assert "packaging/build.py" in bundle_runs and "packaging/smoke.py" in bundle_runs
