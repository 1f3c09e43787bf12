"""What a kill test found, as values, as a readable summary and as one JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steplog.verdict.judge import Check, Kill, Reference, Verdict, latency_stats, redone_histogram


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
        """The storm's verdict; without a storm, the first failing sweep case's (or the last
        case's)."""
        if self.storm is not None:
            return self.storm.verdict
        if self.sweep is not None and self.sweep.cases:
            return (self.sweep.failed or self.sweep.cases)[
                -1 if not self.sweep.failed else 0
            ].verdict
        return None

    def summary(self) -> str:
        """The readable summary (``render``)."""
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


# The readable summary: each kill, each check with ✓/✗, and what was duplicated or lost.

MARK = {True: "✓", False: "✗", None: "·"}
MAX_LISTED = 12
PER_KIND = 5


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def _params(report: Report) -> str:
    return " ".join(f"{k}={v}" for k, v in report.params.items())


def stats_line(kills: list[Kill]) -> str:
    lat = latency_stats(kills)
    hist = (
        ", ".join(f"{n} redone × {count}" for n, count in redone_histogram(kills).items())
        or "no kills"
    )
    return (
        f"resume latency median {_secs(lat['median'])}, p95 {_secs(lat['p95'])}, max "
        f"{_secs(lat['max'])}; {hist}"
    )


def kills_table(kills: list[Kill], since: float) -> list[str]:
    lines = [f"  {'#':>3}  {'at':>8}  {'step':<34} {'phase':<10} {'latency':>8}  redone"]
    for i, k in enumerate(kills, 1):
        step = (
            f"{k.seq} {k.step_name}"
            if k.seq is not None
            else "(start-up)"
            if k.phase == "start-up"
            else "—"
        )
        lines.append(
            f"  {i:>3}  {k.at - since:>7.2f}s  {step[:34]:<34} {k.phase:<10} "
            f"{_secs(k.resume_latency):>8}  {k.redone}"
        )
    return lines


def checks_lines(checks: list[Check], indent: str = "  ") -> list[str]:
    width = max((len(c.name) for c in checks), default=0)
    return [f"{indent}{MARK[c.ok]} {c.name:<{width}}  {c.detail}" for c in checks]


def findings_lines(v: Verdict, indent: str = "  ") -> list[str]:
    """Every kind of thing (messages, files, rows) gets its own few lines, so none hides another."""
    lines: list[str] = []
    for title, found in (
        ("duplicated", v.duplicates),
        ("missing", v.missing),
        ("different", v.different),
    ):
        if found:
            lines.append(f"{indent}{title} ({len(found)}):")
            for kind in ("message", "file", "row"):
                of_kind = [f for f in found if f.kind == kind]
                lines += [f"{indent}  - {f}" for f in of_kind[:PER_KIND]]
                if len(of_kind) > PER_KIND:
                    lines.append(
                        f"{indent}  … and {len(of_kind) - PER_KIND} more {kind}s (--json lists all)"
                    )
    return lines


def _sweep_lines(sweep: SweepResult) -> list[str]:
    ok = len(sweep.cases) - len(sweep.failed)
    lines = [
        f"sweep: {len(sweep.cases)} crash-point cases in {sweep.wall_time:.1f} s: {ok} passed, "
        f"{len(sweep.failed)} failed — {'PASS' if sweep.passed else 'FAIL'}",
        f"  {stats_line(sweep.kills)}",
    ]
    for case in sweep.failed[:MAX_LISTED]:
        lines.append(f"  ✗ {case.name}" + (f": {case.error}" if case.error else ""))
        lines += checks_lines([c for c in case.verdict.checks if c.ok is False], indent="      ")
        lines += findings_lines(case.verdict, indent="      ")
    if len(sweep.failed) > MAX_LISTED:
        lines.append(
            f"  … and {len(sweep.failed) - MAX_LISTED} more failed cases (--json lists all)"
        )
    return lines


def render(report: Report) -> str:
    ref = report.reference
    lines = [
        f"steplog killtest {report.agent}"
        + (f" ({_params(report)})" if report.params else "")
        + f", seed {report.seed}",
        f"reference: {ref.status}, {len(ref.steps)} steps, {len(ref.messages)} messages, "
        f"{len(ref.outputs.files)} files, {len(ref.outputs.tables)} tables, {ref.duration:.2f} s",
    ]
    if report.storm is not None:
        s, v = report.storm, report.storm.verdict
        first = min((k.at for k in v.kills), default=0.0)
        lines += [
            "",
            f"storm: {len(v.kills)} kills ({s.planned} planned) in {s.wall_time:.1f} s, "
            f"{s.launches} engine launches — {'PASS' if s.passed else 'FAIL'}",
        ]
        lines.append(
            "  (launches: engine processes started; incarnations: engines that took the run's "
            "lease; —: not measured, e.g. no step committed after that kill; · not checked, ✓ "
            "passed, ✗ failed)"
        )
        if s.error:
            lines.append(f"  ! {s.error}")
        if not v.kills and s.planned:
            lines.append(
                "  ! no planned kill landed before the run finished: the storm tested nothing "
                "(the run is faster than the kill moments; run it again, or give it more work)"
            )
        elif len(v.kills) < s.planned:
            lines.append(
                f"  note: the run finished before {s.planned - len(v.kills)} planned kill(s) landed"
            )
        lines += kills_table(v.kills, first) if v.kills else []
        lines.append(f"  {stats_line(v.kills)}")
        lines.append(
            f"  run {v.status}: {v.steps_committed} steps committed, {v.step_executions} executed, "
            f"{v.incarnations} incarnations"
            + (
                f", outbox {v.attempts} attempts / {v.deliveries} deliveries"
                if v.deliveries is not None
                else ""
            )
        )
        lines += checks_lines(v.checks)
        lines += findings_lines(v)
    if report.sweep is not None:
        lines += ["", *_sweep_lines(report.sweep)]
    lines += ["", f"verdict: {'PASS' if report.passed else 'FAIL'} ({report.wall_time:.1f} s)"]
    return "\n".join(lines)
