"""The kill test's runs: one reference, one storm of SIGKILLs, and (``--sweep``) every crash point.

Each run has its own sandbox and its own outbox process, which outlives every engine kill. Kill
moments come from ``random.Random(seed)`` and are spread over the whole run: drawn over the
reference's steps (sorted, so the storm walks from start-up to the last step), with some aimed at
start-up and some at the act→record window (fired the moment the log shows ``effect_started``).
An agent with no steps (nothing checkpointed) gets kills at random times over the reference's
duration instead. The judging is ``steplog.verdict``'s, never this module's.
"""

from __future__ import annotations

import math
import random
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from steplog.errors import EXIT_LEASE_HELD, SteplogError, UsageError
from steplog.killtest.procs import POLL_SECONDS, LogWatch, Sandbox, kill_group
from steplog.killtest.report import Report, StormResult, SweepCase, SweepResult
from steplog.log.events import EventKind
from steplog.log.location import LogLocation
from steplog.log.logread import Event
from steplog.outbox import start_outbox
from steplog.runtime import crashpoints
from steplog.runtime.agent import resolve
from steplog.runtime.params import bind_params
from steplog.verdict.judge import KillMark, Reference, collect, judge

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stage is ``reference``, ``storm`` or ``sweep``."""

MAX_KILLS_PER_STEP = 5
"""Storm kills aimed at one step at most (far below the default ``max_recoveries`` of 20)."""
EFFECT_KINDS = ("write_file", "http_post", "merge", "effect")
POINTS_BY_KIND = {
    "call": ("before_step_record", "after_step_record"),
    "chat": ("after_decision", "before_step_record", "after_step_record"),
    **{
        k: (
            "after_effect_started",
            "after_effect_applied",
            "after_effect_completed",
            "before_step_record",
            "after_step_record",
        )
        for k in EFFECT_KINDS
    },
}


class KilltestError(SteplogError):
    """The kill test could not finish (a run hung, or kept being refused); the report says so."""


@dataclass(frozen=True)
class Options:
    agent: str
    kills: int = 30
    seed: int = 0
    sweep: bool = False
    params: dict[str, str] = field(default_factory=dict)
    jobs: int = 2
    """Sweep cases run at once."""
    time_limit: float = 600.0
    """Wall-clock seconds for each of the reference, the storm and the sweep."""
    max_launches: int | None = None
    """Engine launches allowed in the storm (default: 3 per kill + 20)."""
    sweep_points: tuple[str, ...] | None = None
    """Only these crash points in the sweep (default: all of ``crashpoints.POINTS``)."""
    db: LogLocation | None = None
    """Run everything in this shared log, a database server's (``steplog killtest --db URL``;
    default: a SQLite file per run, in its sandbox)."""
    run_prefix: str = "killtest"
    """Run ids are ``PREFIX-reference``, ``PREFIX-storm``, ``PREFIX-sweep-N``; ``killtest`` makes a
    unique one for a shared log, where an earlier kill test's runs are still there."""


@dataclass(frozen=True)
class Target:
    """Where one storm kill should land."""

    mode: Literal["start-up", "step", "act", "time"]
    seq: int
    delay: float
    """Seconds after the launch (start-up, time) or after the step is seen starting (step); a
    start-up kill lands when the engine takes its lease at the latest."""


def plan_kills(rng: random.Random, n: int, ref: Reference) -> list[Target]:
    steps = len(ref.steps)
    if steps < 3:
        # Nothing checkpointed: every launch starts over, so any moment of the reference will do.
        return [Target("time", 0, rng.uniform(0.0, ref.duration * 0.9)) for _ in range(n)]
    per_step = max(0.0, ref.duration - ref.startup) / steps
    acting = [seq for seq, _name, kind in ref.steps if kind in EFFECT_KINDS]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(
                Target("start-up", rng.randint(1, steps), rng.uniform(0.0, ref.startup * 1.2))
            )
        elif r < 0.4 and acting:
            out.append(Target("act", rng.choice(acting), 0.0))
        else:
            out.append(Target("step", rng.randint(1, steps), rng.uniform(0.0, per_step * 1.5)))
    return sorted(out, key=lambda t: t.seq)


def killtest(opts: Options, base: Path, progress: Progress | None = None) -> Report:
    """Run the whole kill test in folder ``base``; bad usage raises ``UsageError`` first."""
    agent = resolve(opts.agent)
    bind_params(agent, opts.params)
    if opts.kills < 0:
        raise UsageError(f"--kills must be 0 or more (got {opts.kills})")
    unknown = set(opts.sweep_points or ()) - set(crashpoints.POINTS)
    if unknown:
        raise UsageError(
            f"unknown crash point(s) {', '.join(sorted(unknown))}: use "
            f"{', '.join(crashpoints.POINTS)}"
        )
    if opts.db is not None and opts.run_prefix == "killtest":
        opts = replace(
            opts, run_prefix=f"killtest-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        )
    tell = progress or (lambda _stage, _done, _total: None)
    started = time.monotonic()
    ref = run_reference(opts, base / "reference", tell)
    storm = run_storm(opts, ref, base / "storm", tell) if opts.kills else None
    sweep = run_sweep(opts, ref, base / "sweep", tell) if opts.sweep else None
    return Report(
        agent=opts.agent,
        params=dict(opts.params),
        seed=opts.seed,
        kills_requested=opts.kills,
        reference=ref,
        storm=storm,
        sweep=sweep,
        wall_time=time.monotonic() - started,
    )


def run_reference(opts: Options, root: Path, tell: Progress) -> Reference:
    tell("reference", 0, 1)
    box = Sandbox(root, opts.agent, f"{opts.run_prefix}-reference", opts.params, log=opts.db)
    with start_outbox(box.outbox_db) as outbox:
        box.outbox_url = outbox.url
        launched = time.time()
        t0 = time.monotonic()
        done = box.wait(box.launch(), opts.time_limit)
        duration = time.monotonic() - t0
        if done.code == 2:
            last = (done.stderr.strip().splitlines() or ["bad usage"])[-1]
            raise UsageError(last.removeprefix("steplog: "))
        if done.code not in (0, 3, 4):
            raise KilltestError(
                f"the reference run of {opts.agent} exited {done.code}: "
                f"{done.stderr.strip()[-400:]}"
            )
        watch = LogWatch(box.db, box.run_id)
        leases = [e.ts for e in watch.poll() if e.kind == EventKind.LEASE_ACQUIRED]
        watch.close()
        startup = (leases[0] - launched) if leases else duration
        ref = Reference.capture(
            box.db, box.run_id, ledger=outbox.ledger(), duration=duration, startup=startup
        )
    tell("reference", 1, 1)
    return ref


def run_storm(opts: Options, ref: Reference, root: Path, tell: Progress) -> StormResult:
    targets = plan_kills(random.Random(opts.seed), opts.kills, ref)
    box = Sandbox(root, opts.agent, f"{opts.run_prefix}-storm", opts.params, log=opts.db)
    max_launches = opts.max_launches or 3 * opts.kills + 20
    kills: list[float] = []
    refusals, error = 0, None
    started = time.monotonic()
    deadline = started + opts.time_limit
    watch = LogWatch(box.db, box.run_id)
    # Kills per step: one while there are fewer kills than steps, else a few each; never so many
    # that the run's recovery budget (a poison-pill guard, 20 by default) would fail it.
    per_step = 1 if len(targets) <= len(ref.steps) else MAX_KILLS_PER_STEP
    step_time = max(0.0, ref.duration - ref.startup) / max(1, len(ref.steps))
    landed: dict[int, int] = {}
    previous_kill: float | None = None
    with start_outbox(box.outbox_db) as outbox:
        box.outbox_url = outbox.url
        try:
            while True:
                if box.launches >= max_launches:
                    raise KilltestError(
                        f"the storm stopped after {box.launches} engine launches without the run "
                        f"ending (limit {max_launches}); look at the engines' output in {root}"
                    )
                target = targets[len(kills)] if len(kills) < len(targets) else None
                watch.poll()
                at, last = watch.max_seq, len(ref.steps)
                if target is not None and target.mode in ("step", "act") and target.seq <= at:
                    # Already passed (the last kill landed later than drawn). Once this step has had
                    # its share, aim at the next one, so the kills cover the whole run; the last
                    # step may take up to the cap, then the run is let finish.
                    if at < last and landed.get(at, 0) >= per_step:
                        target = replace(target, seq=at + 1)
                    elif at >= last and landed.get(at, 0) >= MAX_KILLS_PER_STEP:
                        target = None
                # A step or effect aimed at may never show in this engine (an effect finished
                # before the last kill is replayed, not run again; parallel steps pass each
                # other): the kill then lands anyway, by twice the time the reference took to get
                # there, instead of letting the run finish unkilled.
                backstop = (
                    2 * ref.startup
                    + 2 * step_time * (max(0, (target.seq if target else 0) - at) + 3)
                    + 0.2
                )
                proc = box.launch(killed_at=previous_kill)
                try:
                    killed_at = _kill_when(proc, target, watch, deadline, backstop)
                finally:
                    if proc.poll() is None:  # the deadline passed, or we were interrupted
                        kill_group(proc)
                if killed_at is not None:
                    previous_kill = (
                        killed_at  # handed to the next engine, which records it with its takeover
                    )
                    kills.append(killed_at)
                    watch.poll()
                    landed[watch.max_seq] = landed.get(watch.max_seq, 0) + 1
                    tell("storm", len(kills), len(targets))
                    continue
                code = proc.returncode
                if code == EXIT_LEASE_HELD:  # the dead engine's lease not seen as vacant: a finding
                    refusals += 1
                    continue
                if code in (0, 3, 4):
                    break
                raise KilltestError(
                    f"an engine of the storm exited {code}: {box.stderr_of().strip()[-400:]}"
                )
        except (KilltestError, TimeoutError) as exc:
            error = str(exc)
        finally:
            watch.close()
        tell("storm", len(targets), len(targets))
        if not box.db.exists():
            raise KilltestError(
                f"the storm's engines never created their log; see their output in {root}: "
                + (error or box.stderr_of().strip()[-400:])
            )
        verdict = judge(
            collect(
                box.db,
                box.run_id,
                ledger=outbox.ledger(),
                kill_times=kills,
                reference=ref,
                lease_refusals=refusals,
            )
        )
    return StormResult(
        verdict=verdict,
        planned=len(targets),
        launches=box.launches,
        wall_time=time.monotonic() - started,
        error=error,
    )


def _kill_when(
    proc: subprocess.Popen[bytes],
    target: Target | None,
    watch: LogWatch,
    deadline: float,
    backstop: float = math.inf,
) -> float | None:
    """Wait for the target moment and SIGKILL the group then (returns the kill time), or for
    the engine to exit by itself (returns ``None``). Past ``deadline``: ``KilltestError``. A
    step or effect target not reached ``backstop`` seconds after the launch fires then."""
    t0 = time.monotonic()
    watch.poll()  # skip what earlier engines wrote
    fire_at = (
        t0 + target.delay if target is not None and target.mode in ("start-up", "time") else None
    )
    seen = False  # a step or effect target: its step or effect has shown
    if target is not None and target.mode in ("step", "act"):
        fire_at = t0 + backstop
    while True:
        if proc.poll() is not None:
            return None
        now = time.monotonic()
        if now > deadline:
            raise KilltestError(
                f"the storm took longer than its time limit; the run is not finished "
                f"(engine pid {proc.pid} still going)"
            )
        if target is not None and target.mode == "start-up":
            # The reference's start-up was a cold one (first imports, a new log), and a warm
            # engine may finish a short remainder within it: a start-up kill lands at the latest
            # when this engine has its lease, or it would not land at all.
            if any(e.kind == EventKind.LEASE_ACQUIRED for e in watch.poll()):
                fire_at = min(fire_at or now, now)
        elif target is not None and target.mode in ("step", "act") and not seen:
            for e in watch.poll():
                if _reached(target, e):
                    seen, fire_at = True, min(t0 + backstop, now + target.delay)
                    break
        if fire_at is not None and now >= fire_at:
            return kill_group(proc)
        time.sleep(POLL_SECONDS)


def _reached(target: Target, e: Event) -> bool:
    """Has the engine got to the target's step (``step``) or to its act (``act``)? A plain step's
    start is not written when it begins (a deferred start): the commit of the step before it, or
    the lease for the first one, says it is beginning."""
    if target.mode == "act":
        return e.kind == EventKind.EFFECT_STARTED and e.seq is not None and e.seq >= target.seq
    if e.kind == EventKind.STEP_STARTED:
        return e.seq is not None and e.seq >= target.seq
    if e.kind == EventKind.STEP_COMMITTED:
        return e.seq is not None and e.seq >= target.seq - 1
    return e.kind == EventKind.LEASE_ACQUIRED and target.seq <= 1


def sweep_cases(
    ref: Reference, points: tuple[str, ...] | None = None
) -> list[tuple[int, str, str]]:
    """(seq, point, step name) for every step of the reference and every point its kind passes."""
    return [
        (seq, point, name)
        for seq, name, kind in ref.steps
        for point in POINTS_BY_KIND.get(kind, ())
        if points is None or point in points
    ]


def run_sweep(opts: Options, ref: Reference, root: Path, tell: Progress) -> SweepResult:
    cases = sweep_cases(ref, opts.sweep_points)
    started = time.monotonic()
    lock, done = threading.Lock(), [0]
    per_case = max(30.0, ref.duration * 20)

    def one(case: tuple[int, str, str]) -> SweepCase:
        result = _sweep_case(opts, ref, root / f"{case[0]}-{case[1]}", case, per_case)
        with lock:
            done[0] += 1
            tell("sweep", done[0], len(cases))
        return result

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        results = list(pool.map(one, cases))
    return SweepResult(cases=results, wall_time=time.monotonic() - started)


def _sweep_case(
    opts: Options, ref: Reference, root: Path, case: tuple[int, str, str], timeout: float
) -> SweepCase:
    seq, point, name = case
    crash_at = f"{point}@{seq}"
    box = Sandbox(root, opts.agent, f"{opts.run_prefix}-sweep-{seq}", opts.params, log=opts.db)
    with start_outbox(box.outbox_db) as outbox:
        box.outbox_url = outbox.url
        error, refusals = None, 0
        try:
            crashed = box.wait(box.launch(crash_at), timeout)
            at = time.time()
            proved = (
                crashed.code == crashpoints.CRASH_EXIT_CODE
                and f"crash point {crash_at} reached" in crashed.stderr
            )
            for _ in range(5):
                resumed = box.wait(box.launch(killed_at=at), timeout)
                if resumed.code != EXIT_LEASE_HELD:
                    break
                refusals += 1
        except TimeoutError as exc:
            error, at, proved = str(exc), time.time(), False
        if not box.db.exists():
            raise KilltestError(
                f"sweep case {crash_at}: the engine never created its log; see {root}"
            )
        verdict = judge(
            collect(
                box.db,
                box.run_id,
                ledger=outbox.ledger(),
                reference=ref,
                lease_refusals=refusals,
                kill_times=[KillMark(at, crash_at, proved)],
            )
        )
    return SweepCase(seq=seq, point=point, step_name=name, verdict=verdict, error=error)
