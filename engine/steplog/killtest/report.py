"""What a kill test found, as values, as a readable summary and as one JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..verdict import Kill, Reference, Verdict, latency_stats, redone_histogram


@dataclass
class StormResult:
    verdict: Verdict
    planned: int
    launches: int
    wall_time: float
    error: str | None = None
    """Why the storm could not finish (time limit, launch limit, an engine that exited oddly)."""

    @property
    def passed(self) -> bool:
        """The run survived its kills; a storm in which no planned kill landed tested nothing."""
        return (
            self.error is None
            and self.verdict.passed is True
            and (self.planned == 0 or bool(self.verdict.kills))
        )


@dataclass
class SweepCase:
    seq: int
    point: str
    step_name: str
    verdict: Verdict
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.point}@{self.seq} '{self.step_name}'"

    @property
    def passed(self) -> bool:
        return self.error is None and self.verdict.passed is True


@dataclass
class SweepResult:
    cases: list[SweepCase]
    wall_time: float

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @property
    def failed(self) -> list[SweepCase]:
        return [c for c in self.cases if not c.passed]

    @property
    def kills(self) -> list[Kill]:
        return [k for c in self.cases for k in c.verdict.kills]


@dataclass
class Report:
    """The kill test's result: ``passed``, the storm's ``verdict``, every sweep case, timings."""

    agent: str
    params: dict[str, str]
    seed: int
    kills_requested: int
    reference: Reference
    storm: StormResult | None
    sweep: SweepResult | None
    wall_time: float

    @property
    def passed(self) -> bool:
        parts = [p.passed for p in (self.storm, self.sweep) if p is not None]
        return bool(parts) and all(parts)

    @property
    def verdicts(self) -> list[Verdict]:
        return ([self.storm.verdict] if self.storm else []) + (
            [c.verdict for c in self.sweep.cases] if self.sweep else []
        )

    @property
    def verdict(self) -> Verdict | None:
        """The storm's verdict; without a storm, the first failing sweep case's (or the last case's)."""
        if self.storm is not None:
            return self.storm.verdict
        if self.sweep is not None and self.sweep.cases:
            return (self.sweep.failed or self.sweep.cases)[
                -1 if not self.sweep.failed else 0
            ].verdict
        return None

    def summary(self) -> str:
        from .render import render

        return render(self)

    def to_json(self) -> dict[str, Any]:
        ref = self.reference
        out: dict[str, Any] = {
            "agent": self.agent,
            "params": self.params,
            "seed": self.seed,
            "passed": self.passed,
            "wall_time": round(self.wall_time, 3),
            "reference": {
                "status": ref.status,
                "steps": len(ref.steps),
                "messages": len(ref.messages),
                "files": len(ref.outputs.files),
                "tables": len(ref.outputs.tables),
                "duration": round(ref.duration, 3),
                "startup": round(ref.startup, 3),
            },
            "storm": None,
            "sweep": None,
        }
        if self.storm is not None:
            s = self.storm
            out["storm"] = {
                "passed": s.passed,
                "kills_requested": self.kills_requested,
                "kills": len(s.verdict.kills),
                "planned": s.planned,
                "launches": s.launches,
                "wall_time": round(s.wall_time, 3),
                "error": s.error,
                "verdict": s.verdict.to_json(),
            }
        if self.sweep is not None:
            w = self.sweep
            out["sweep"] = {
                "passed": w.passed,
                "cases": len(w.cases),
                "failed": len(w.failed),
                "wall_time": round(w.wall_time, 3),
                "resume_latency": latency_stats(w.kills),
                "redone_per_kill": {str(k): v for k, v in redone_histogram(w.kills).items()},
                "results": [
                    {
                        "seq": c.seq,
                        "point": c.point,
                        "step": c.step_name,
                        "passed": c.passed,
                        "error": c.error,
                        "resume_latency": c.verdict.kills[0].resume_latency
                        if c.verdict.kills
                        else None,
                        "redone": c.verdict.kills[0].redone if c.verdict.kills else None,
                        "failed_checks": [ch.name for ch in c.verdict.checks if ch.ok is False],
                        **({"verdict": c.verdict.to_json()} if not c.passed else {}),
                    }
                    for c in w.cases
                ],
            }
        return out
