"""Simulation, not just examples: Hypothesis generates agent programs and crash schedules, runs
them for real (engine processes dying at exact crash points, then resumed) and checks the
invariants after every move:

- every idempotent effect is applied at its target exactly once (the witness), never twice;
- the log's committed steps are always 1..k, and each crash redoes at most one step;
- a crash inside a non-idempotent effect (started, not confirmed) stops the run as "needs
  reconciliation" and it is never sent twice; otherwise the run ends as an uncrashed one does:
  the same result, the same files byte for byte, the same rows.

CI runs ``max_examples`` programs (a few seconds each); set ``STEPLOG_SIMULATION_EXAMPLES`` for a
longer run on demand. A failing case shrinks to a short program and schedule: add it below as an
example so it stays fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from helpers.engine import Engine, checkout_env
from helpers.paths import AGENTS
from steplog.runtime.crashpoints import CRASH_EXIT_CODE, POINTS

OPS = ("call", "chat", "write", "merge", "apply", "once")
EXAMPLES = int(os.environ.get("STEPLOG_SIMULATION_EXAMPLES", "8"))
ENV = checkout_env()

programs = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3)), min_size=1, max_size=6)


def outputs(workdir: Path) -> dict[str, str]:
    files = {
        str(p.relative_to(workdir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(workdir.rglob("*.txt"))
    }
    rows = workdir / "rows.db"
    if rows.exists():
        conn = sqlite3.connect(rows)
        files["rows"] = json.dumps(conn.execute("SELECT * FROM items ORDER BY i").fetchall())
        conn.close()
    return files


class CrashAndResume(RuleBasedStateMachine):
    """One generated program, run under a generated schedule of crashes and resumes."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = Path(tempfile.mkdtemp(prefix="steplog-sim-"))
        self.engine = Engine(db=self.tmp / "log.db", env=ENV)
        self.crashes = 0
        self.ambiguous = False
        self.finished: int | None = None

    @initialize(ops=programs)
    def program(self, ops: list[tuple[str, int]]) -> None:
        self.ops = ops
        self.witness = self.tmp / "witness.db"
        reference = self._run("reference", self.tmp / "reference-witness.db")
        assert reference.returncode == 0, reference.stderr
        self.expected = self.engine.status("reference")
        self.expected_outputs = outputs(Path(self.expected["workdir"]))

    def _run(self, run_id: str, witness: Path, crash: str | None = None) -> Any:
        env = {"STEPLOG_CRASH_AT": crash} if crash else None
        return self.engine.run(
            "run",
            f"{AGENTS}:program",
            "--run-id",
            run_id,
            "--db",
            str(self.engine.db),
            "--param",
            f"ops={json.dumps(self.ops)}",
            "--param",
            f"witness={witness}",
            env=env,
        )

    @precondition(lambda self: self.finished is None)
    @rule(point=st.sampled_from(POINTS), seq=st.integers(1, 6))
    def crash_at(self, point: str, seq: int) -> None:
        done = self._run("sim", self.witness, f"{point}@{seq}")
        if done.returncode == CRASH_EXIT_CODE:
            self.crashes += 1
            kind = self.ops[seq - 1][0] if seq <= len(self.ops) else None
            if kind == "once" and point in ("after_effect_started", "after_effect_applied"):
                self.ambiguous = True
        else:
            self.finished = done.returncode

    @precondition(lambda self: self.finished is None)
    @rule()
    def resume(self) -> None:
        self.finished = self._run("sim", self.witness).returncode

    @precondition(lambda self: self.finished is not None)
    @rule()
    def run_the_finished_run_again(self) -> None:
        """A finished run is reported, not run: the same exit code, nothing sent, nothing
        written."""
        before = self.engine.query("SELECT count(*) FROM event")
        again = self._run("sim", self.witness)
        assert again.returncode == self.finished
        assert self.engine.query("SELECT count(*) FROM event") == before

    @invariant()
    def nothing_applied_twice(self) -> None:
        if self.witness.exists():
            conn = sqlite3.connect(self.witness)
            keys = [k for (k,) in conn.execute("SELECT key FROM applied")]
            conn.close()
            assert len(keys) == len(set(keys))
        appended = Path(str(self.witness) + ".appended")
        if appended.exists():
            lines = appended.read_text().splitlines()
            assert len(lines) == len(set(lines)), "a non-idempotent effect was sent twice"

    @invariant()
    def committed_steps_are_a_prefix_and_each_crash_redoes_at_most_one(self) -> None:
        if not self.engine.db.exists():
            return
        seqs = [
            s
            for (s,) in self.engine.query(
                "SELECT seq FROM step WHERE run_id = 'sim' AND status = 'committed' ORDER BY seq"
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1))
        row = self.engine.query("SELECT step_executions, used_steps FROM run WHERE id = 'sim'")
        if row:
            executions, committed = row[0]
            assert executions - committed <= self.crashes + 1  # +1: one step may be running now

    def teardown(self) -> None:
        try:
            if self.finished is None and hasattr(self, "ops"):
                self.resume()
            if self.finished is None:
                return
            s = self.engine.status("sim")
            if self.ambiguous:
                assert s["status"] == "failed" and "needs reconciliation" in s["reason"], s
                return
            assert self.finished == 0 and s["status"] == "succeeded", s
            assert s["result"] == self.expected["result"]
            assert outputs(Path(s["workdir"])) == self.expected_outputs
            conn = sqlite3.connect(self.witness) if self.witness.exists() else None
            applied = sorted(i for (i,) in conn.execute("SELECT i FROM applied")) if conn else []
            want = sorted(i for op, i in self.ops if op == "apply")
            assert applied == want, (
                applied,
                want,
            )  # each apply op is its own effect (its own key), once
            if conn:
                conn.close()
        finally:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


CrashAndResume.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCrashAndResume = pytest.mark.slow(CrashAndResume.TestCase)  # 63 s in the whole suite
