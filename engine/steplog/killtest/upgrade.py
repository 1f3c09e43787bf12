"""``steplog killtest AGENT --upgrade NEW_AGENT``: may this change be deployed under runs in
flight? (``docs/versions.md``)

The old agent's source file is copied into a folder of the test's own (the deployment) and run
from there to its end once, to count its steps. Then, for a few kill points (after the first
step, half-way, before the last), a run of it is killed there (a crash point: the engine dies
without a word), the deployment's file is replaced by the new agent's, and the same
``steplog run`` resumes the run on the new code: *compatible* when it finishes, *refused* with the
step and the refusal's line when the new code cannot replay what the old one recorded.
Each run has its own log, workdir and outbox, as in the kill test.
"""

from __future__ import annotations

import inspect
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steplog.errors import EXIT_BLOCKED, EXIT_OK
from steplog.killtest.harness import KilltestError
from steplog.killtest.procs import Sandbox
from steplog.log.db import open_log
from steplog.log.steps import contiguous_committed
from steplog.outbox import start_outbox
from steplog.runtime.agent import resolve


@dataclass(frozen=True)
class UpgradeCase:
    """One kill point: the old code killed after ``after_step``, the new code resuming."""

    after_step: int
    outcome: str
    """``compatible`` (resumed and finished), ``refused`` (exit 6) or ``failed (exit N)``."""
    at_step: int | None = None
    line: str = ""


@dataclass
class UpgradeReport:
    old: str
    new: str
    steps: int
    cases: list[UpgradeCase] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.outcome == "compatible" for c in self.cases)

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "steps": self.steps,
            "compatible": self.passed,
            "cases": [c.__dict__ for c in self.cases],
        }

    def summary(self) -> str:
        lines = [
            f"upgrade {self.old} -> {self.new}: "
            + ("COMPATIBLE" if self.passed else "REFUSED")
            + f" ({self.steps} steps, killed after step "
            + ", ".join(str(c.after_step) for c in self.cases)
            + ")"
        ]
        for c in self.cases:
            where = f" at step {c.at_step}" if c.at_step is not None else ""
            lines.append(f"  killed after step {c.after_step}: {c.outcome}{where}")
            if c.line:
                lines.append(f"    {c.line}")
        return "\n".join(lines)


def _source(spec: str) -> tuple[Path, str]:
    """The file an agent spec's function is defined in, and the function's name there."""
    agent = resolve(spec)
    path = inspect.getsourcefile(agent.fn)
    if path is None:
        raise KilltestError(f"agent {spec} has no source file to deploy; name it by file.py:fn")
    return Path(path).resolve(), agent.fn.__qualname__


def kill_points(steps: int) -> list[int]:
    """After the first step, half-way and before the last (those there are)."""
    return sorted({k for k in (1, steps // 2, steps - 1) if 1 <= k < steps})


def upgrade_test(
    old: str, new: str, root: Path, *, params: dict[str, str], time_limit: float
) -> UpgradeReport:
    (old_file, old_fn), (new_file, new_fn) = _source(old), _source(new)
    if old_fn != new_fn:
        raise KilltestError(
            f"--upgrade compares two versions of one agent: {old} defines {old_fn}, {new} "
            f"{new_fn}; name the same function"
        )
    # The deployment's copy still finds the modules beside the originals.
    extra = [str(old_file.parent), str(new_file.parent)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*extra, *filter(None, [os.environ.get("PYTHONPATH")])]
    )

    def deployed(box: Sandbox, source: Path) -> None:
        target = box.root / "deploy" / old_file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        for cache in target.parent.glob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)

    def sandbox(name: str) -> Sandbox:
        spec = f"{root / name / 'deploy' / old_file.name}:{old_fn}"
        return Sandbox(root / name, spec, f"upgrade-{name}", params)

    ref = sandbox("reference")
    deployed(ref, old_file)
    with start_outbox(ref.outbox_db) as outbox:
        ref.outbox_url = outbox.url
        done = ref.wait(ref.launch(), time_limit)
    if done.code != EXIT_OK:
        raise KilltestError(
            f"the old agent's run did not succeed (exit {done.code}): {done.stderr.strip()[-300:]}"
        )
    steps = _committed(ref)
    report = UpgradeReport(old, new, steps)
    for k in kill_points(steps):
        box = sandbox(f"after-{k}")
        deployed(box, old_file)
        with start_outbox(box.outbox_db) as outbox:
            box.outbox_url = outbox.url
            box.wait(box.launch(crash_at=f"after_step_record@{k}"), time_limit)
            deployed(box, new_file)  # the deploy: the same file, the new code
            resumed = box.wait(box.launch(), time_limit)
        report.cases.append(_case(k, resumed.code, resumed.stderr))
    return report


def _committed(box: Sandbox) -> int:
    conn = open_log(box.db)
    try:
        return contiguous_committed(conn, box.run_id, 2**62)
    finally:
        conn.close()


def _case(after: int, code: int, stderr: str) -> UpgradeCase:
    if code == EXIT_OK:
        return UpgradeCase(after, "compatible")
    lines = [line.removeprefix("steplog: ") for line in stderr.splitlines() if line.strip()]
    if code == EXIT_BLOCKED:
        line = next((ln for ln in reversed(lines) if ln.startswith("step ")), lines[-1])
        at = int(line.split(":", 1)[0].removeprefix("step ").strip() or 0)
        return UpgradeCase(after, "refused", at, line)
    return UpgradeCase(after, f"failed (exit {code})", None, lines[-1] if lines else "")
