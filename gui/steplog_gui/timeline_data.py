"""Timeline geometry from a ``RunState``: numpy arrays of bars per outcome and kill markers; Qt-free."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .run_state import OUTCOME_NAMES, PHASES, RUNNING, Kill, RunState

BAR_HEIGHT = 0.7
MIN_WIDTH = 0.02
"""Seconds: a step that took microseconds still gets a visible sliver."""

F = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Bars:
    x0: F
    width: F
    y0: F


def bars(run: RunState, outcome: int, now: float) -> Bars:
    """Bars (x in seconds since the run started, y = engine incarnation) for one outcome."""
    ex = run.executions
    mask = ex["outcome"] == outcome
    start = ex["start"][mask]
    end = ex["end"][mask]
    if outcome == RUNNING:  # a stopped run's open step does not grow with the clock
        end = np.where(np.isnan(end), run.open_until(now), end)
    t0 = run.created if np.isfinite(run.created) else (start.min() if len(start) else 0.0)
    width = np.maximum(end - start, MIN_WIDTH)
    return Bars(start - t0, width, ex["lane"][mask].astype(np.float64) - BAR_HEIGHT / 2)


def kill_label(k: Kill) -> str:
    """What a kill marker says: how soon a new engine was up (lease taken) and how soon it had
    committed a step (the resume latency, which includes redoing the interrupted step)."""
    up = k.resumed_at - k.ts
    text = f"kill → engine up in {up:.2f} s" if up >= 0 else "kill"
    if k.latency is not None:
        text += f"\nstep committed in {k.latency:.2f} s"
    return text


def kill_marks(run: RunState) -> list[tuple[float, int, str]]:
    """Per kill: (x seconds since start, the lane it ended, its label)."""
    t0 = run.created if np.isfinite(run.created) else 0.0
    return [(k.ts - t0, k.killed_incarnation, kill_label(k)) for k in run.kills]


def describe(run: RunState, i: int, now: float) -> str:
    """The hover text for execution ``i``: name, phase, duration, tokens, outcome (plain text)."""
    ex = run.executions
    seq = int(ex["seq"][i])
    name, kind = run.step_names.get(seq, ("?", "?"))
    end = ex["end"][i]
    duration = (now if np.isnan(end) else end) - ex["start"][i]
    tokens = int(ex["tokens"][i])
    lines = [f"#{seq} {name}" if seq >= 0 else name, f"kind: {kind}", f"phase: {PHASES[int(ex['phase'][i])]}",
             f"duration: {duration * 1000:.0f} ms" if duration < 10 else f"duration: {duration:.1f} s",
             f"outcome: {OUTCOME_NAMES[int(ex['outcome'][i])]}", f"engine incarnation: {int(ex['lane'][i])}"]
    if tokens:
        lines.append(f"tokens: {tokens}" + (" (estimated)" if ex["estimated"][i] else ""))
    return "\n".join(lines)
