"""Timeline geometry from a ``RunState``: numpy arrays of bars per outcome and kill markers;
Qt-free."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from steplog_gui.model.run_state import OUTCOME_NAMES, PHASES, RUNNING, Kill, RunState

BAR_HEIGHT = 0.7
MIN_WIDTH = 0.02
"""Seconds: a step that took microseconds still gets a visible sliver."""

F = npt.NDArray[np.float64]
T = TypeVar("T")


@dataclass(frozen=True)
class Bars:
    x0: F
    width: F
    y0: F
    height: F | float = BAR_HEIGHT


STEP_WIDTH = 0.9
"""Bar width on the step-number axis (one unit per step)."""


def origin(run: RunState) -> float:
    """The time x = 0 stands for: the run's creation."""
    ex = run.executions
    return (
        run.created if np.isfinite(run.created) else (float(ex["start"].min()) if len(ex) else 0.0)
    )


_KEPT: dict[tuple[int, str], tuple[weakref.ref[RunState], tuple[Any, ...], Any]] = {}


def _kept(run: RunState, what: str, key: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, kept for ``run`` while ``key`` holds (it names the run's ``changes``): one
    redraw asks for every outcome's bars, the selection and the overview, and each asked for
    the same passes over every execution again (44 per redraw, over a second of a 1M-step
    run's first paint). ``math.nan`` in a key is one object, equal to itself."""
    slot = (id(run), what)
    hit = _KEPT.get(slot)
    if hit is not None and hit[0]() is run and hit[1] == key:
        return hit[2]  # type: ignore[no-any-return]
    value = make()
    if len(_KEPT) > 256:
        _KEPT.clear()
    _KEPT[slot] = (weakref.ref(run), key, value)
    return value


def _version(run: RunState) -> tuple[int, int]:
    ex = run.executions
    return run.changes, len(ex)


def spans(run: RunState, now: float, *, by_step: bool = False) -> tuple[F, F]:
    """(x0, x1) of every execution: seconds since the run started, or step numbers."""
    ex = run.executions
    version = _version(run)
    if by_step:

        def by_number() -> tuple[F, F]:
            seq = ex["seq"].astype(np.float64)
            return seq - STEP_WIDTH / 2, seq + STEP_WIDTH / 2

        return _kept(run, "by_step", version, by_number)
    still_open = _kept(run, "open", version, lambda: int(np.count_nonzero(np.isnan(ex["end"]))))
    until = run.open_until(now) if still_open else math.nan  # a stopped run's open step stops
    t0 = origin(run)

    def by_time() -> tuple[F, F]:
        ends = ex["end"]
        end = np.where(np.isnan(ends), until, ends) if still_open else ends
        return ex["start"] - t0, end - t0

    return _kept(run, "by_time", (*version, until, t0), by_time)


def lanes_of(run: RunState) -> F:
    """Each execution's lane as a float (the bars' y)."""
    return _kept(run, "lanes", _version(run), lambda: run.executions["lane"].astype(np.float64))


def sublanes(run: RunState, now: float) -> tuple[F, F]:
    """(offset from the lane's bar bottom, height) of every execution: steps that overlap in
    time within one engine's lane (parallel steps) share its height in sub-lanes, each in the
    first sub-lane free when it started. Sequential runs: offset 0, full height (cheap check)."""
    return _kept(run, "sublanes", _version(run), lambda: _sublanes(run))


def _sublanes(run: RunState) -> tuple[F, F]:
    ex = run.executions
    n = len(ex)
    ends = ex["end"]
    # Read-only views of one value: a sequential run's 1M bars cost no 16 MB for them.
    offset, height = np.broadcast_to(0.0, n), np.broadcast_to(BAR_HEIGHT, n)
    if n > 1:
        start = ex["start"]
        end = np.where(np.isnan(ends), np.inf, ends)
        lanes = ex["lane"]
        in_order = bool(np.all(lanes[1:] >= lanes[:-1])) and bool(np.all(start[1:] >= start[:-1]))
        order = np.arange(n) if in_order else np.lexsort((start, lanes))  # a sequential run: sorted
        same_lane = ex["lane"][order][1:] == ex["lane"][order][:-1]
        running_end = np.maximum.accumulate(
            end[order]
        )  # (per lane is enough: lanes are far apart in time)
        if np.any(same_lane & (start[order][1:] < running_end[:-1] - 1e-9)):
            slot = np.zeros(n, dtype=np.int64)
            free_at: dict[int, list[float]] = {}
            for i in order.tolist():
                slots = free_at.setdefault(int(ex["lane"][i]), [])
                k = next((k for k, t in enumerate(slots) if t <= start[i] + 1e-9), len(slots))
                if k == len(slots):
                    slots.append(end[i])
                else:
                    slots[k] = end[i]
                slot[i] = k
            depth = {lane: len(slots) for lane, slots in free_at.items()}
            per_lane = np.array([depth[int(lane)] for lane in ex["lane"]], dtype=np.float64)
            height = BAR_HEIGHT / per_lane
            offset = slot * height
    return offset, height


def bars(
    run: RunState,
    outcome: int,
    now: float,
    *,
    by_step: bool = False,
    visible: tuple[float, float] | None = None,
    pixels: int = 0,
    keep: npt.NDArray[np.bool_] | None = None,
) -> Bars:
    """Bars (x from ``spans``, y = engine incarnation) for one outcome.

    Level of detail: given the ``visible`` x range and its width in ``pixels``, bars narrower than
    a pixel are not drawn one by one (100k of them in one pixel column paint as one solid block
    and cost the frame); every pixel column a lane has such bars in becomes one bar, and runs of
    adjacent columns merge. So the structure (gaps, redone steps, kills) shows at any zoom, and
    the number of rectangles is bounded by lanes × pixels. ``keep``: a mask of executions to
    draw at all (the step-name filter).
    """
    ex = run.executions
    x0, x1 = spans(run, now, by_step=by_step)
    mask = ex["outcome"] == outcome
    if keep is not None:
        mask &= keep
    lane = lanes_of(run)
    sub, tall = (
        sublanes(run, now) if not by_step else (np.zeros(len(ex)), np.full(len(ex), BAR_HEIGHT))
    )
    if visible is None or pixels <= 0:
        start, stop = x0[mask], x1[mask]
        width = np.maximum(stop - start, 0.0 if by_step else MIN_WIDTH)
        return Bars(start, width, lane[mask] - BAR_HEIGHT / 2 + sub[mask], tall[mask])
    lo, hi = visible
    per_px = max((hi - lo) / pixels, 1e-12)
    mask &= (x1 >= lo) & (x0 <= hi)
    start, stop, lanes, subs, talls = x0[mask], x1[mask], lane[mask], sub[mask], tall[mask]
    wide = (stop - start) >= per_px
    out_x, out_w = [start[wide]], [stop[wide] - start[wide]]
    out_y, out_h = [lanes[wide] - BAR_HEIGHT / 2 + subs[wide]], [talls[wide]]
    narrow = ~wide
    if narrow.any():
        col = np.clip(((start[narrow] - lo) / per_px).astype(np.int64), -1, pixels + 1)
        key = lanes[narrow].astype(np.int64) * (pixels + 4) + (col + 1)
        if len(key) and bool(np.all(key[1:] >= key[:-1])):  # a sequential run: in order already
            key = key[np.append(True, key[1:] != key[:-1])]
        else:
            key = np.unique(key)
        lanes_n, cols = np.divmod(key, pixels + 4)
        # Merge runs of adjacent columns in one lane into one bar.
        breaks = np.flatnonzero((np.diff(cols) != 1) | (np.diff(lanes_n) != 0)) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks - 1, [len(cols) - 1]))
        out_x.append(lo + (cols[first] - 1) * per_px)
        out_w.append((cols[last] - cols[first] + 1) * per_px)
        out_y.append(lanes_n[first].astype(np.float64) - BAR_HEIGHT / 2)
        out_h.append(np.full(len(first), BAR_HEIGHT))  # an aggregate stands for the whole lane
    return Bars(
        np.concatenate(out_x), np.concatenate(out_w), np.concatenate(out_y), np.concatenate(out_h)
    )


MODEL_CALL = "chat"
"""The step kind of a model call (``run.chat``)."""


def writing_bars(
    run: RunState,
    writing: Mapping[tuple[int, int], tuple[int, float, float]],
    now: float,
    *,
    by_step: bool = False,
) -> tuple[Bars, Bars]:
    """(veil, fill) over the bars of model calls still waiting for their answer: the veil pales
    the whole bar, the fill covers it again from the first streamed piece to the latest. So a
    call shows how long the model thought (pale, left), wrote (solid) and has been silent since
    (pale, right), and its bar fills as tokens come. ``writing``: ``step_output.Writing``.

    A step in progress counts when it is a model call whose answer is not recorded yet, or when
    its attempt has streamed anything (a step body's ``emit``); once the answer is recorded the
    bar is plain again."""
    ex = run.executions
    empty = Bars(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    if not len(ex):
        return empty, empty
    running = np.flatnonzero((ex["outcome"] == RUNNING) & (ex["phase"] == 0))
    if not len(running):
        return empty, empty
    x0, x1 = spans(run, now, by_step=by_step)
    t_end = run.open_until(now)
    sub, tall = (
        sublanes(run, now) if not by_step else (np.zeros(len(ex)), np.full(len(ex), BAR_HEIGHT))
    )
    veil: list[tuple[float, float, float, float]] = []
    fill: list[tuple[float, float, float, float]] = []
    for i in running.tolist():
        seq, lane, start = int(ex["seq"][i]), int(ex["lane"][i]), float(ex["start"][i])
        mark = writing.get((seq, lane))
        if mark is not None and mark[2] < start - 1e-3:
            mark = None  # an earlier attempt's entries: this one has written nothing yet
        if mark is None and run.step_names.get(seq, ("", ""))[1] != MODEL_CALL:
            continue
        y, h = lane - BAR_HEIGHT / 2 + float(sub[i]), float(tall[i])
        left, right = float(x0[i]), float(x1[i])
        veil.append((left, right - left, y, h))
        if mark is None:
            continue
        # Times to x along the bar: on the time axis its own times, on the step axis its share.
        span = max(t_end - start, 1e-9)
        a = left + (max(mark[1], start) - start) / span * (right - left)
        b = left + (min(mark[2], t_end) - start) / span * (right - left)
        fill.append((a, max(b - a, 0.0), y, h))

    def as_bars(rows: list[tuple[float, float, float, float]]) -> Bars:
        if not rows:
            return empty
        x, w, y, h = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
        return Bars(x, w, y, h)

    return as_bars(veil), as_bars(fill)


def nearest(
    run: RunState,
    x: float,
    lane: int,
    now: float,
    *,
    by_step: bool = False,
    within: float = np.inf,
    keep: npt.NDArray[np.bool_] | None = None,
) -> int | None:
    """The execution in ``lane`` closest to ``x`` (0 inside it), if closer than ``within``."""
    ex = run.executions
    if not len(ex):
        return None
    x0, x1 = spans(run, now, by_step=by_step)
    distance = np.where(x < x0, x0 - x, np.where(x > x1, x - x1, 0.0))
    candidates = ex["lane"] == lane
    if keep is not None:
        candidates &= keep
    distance = np.where(candidates, distance, np.inf)
    i = int(np.argmin(distance))
    return i if distance[i] <= within else None


def name_filter(run: RunState, text: str) -> npt.NDArray[np.bool_] | None:
    """Executions whose step name contains ``text`` (case-insensitive); ``None`` for no filter."""
    text = text.strip().lower()
    if not text:
        return None
    return np.isin(run.executions["seq"], run.step_names.matching(text))


def kill_label(k: Kill) -> str:
    """What a kill marker says: how soon a new engine was up (lease taken) and how soon it was
    back at work (the resume latency): a step committed, which includes redoing the interrupted
    step, or the wait for a person taken up again (their answer is not the engine's latency)."""
    up = k.resumed_at - k.ts
    text = f"kill → engine up in {up:.2f} s" if up >= 0 else "kill"
    if k.latency is not None:
        text += f"\n{'waiting again' if k.back_waiting else 'step committed'} in {k.latency:.2f} s"
    return text


def kill_marks(run: RunState, *, by_step: bool = False) -> list[tuple[float, int, str]]:
    """Per kill: (x, the lane it ended, its label); x in seconds since the start, or (by step)
    just after the last step the killed engine started."""
    if by_step:
        ex = run.executions
        out = []
        for k in run.kills:
            started = ex["seq"][(ex["lane"] == k.killed_incarnation) & (ex["seq"] >= 0)]
            out.append(
                (
                    float(started.max()) + 0.5 if len(started) else 0.5,
                    k.killed_incarnation,
                    kill_label(k),
                )
            )
        return out
    t0 = origin(run)
    return [(k.ts - t0, k.killed_incarnation, kill_label(k)) for k in run.kills]


def hover_lines(
    run: RunState, i: int, now: float, *, title: str, outcome: str, lane: str, phase: bool
) -> str:
    """The hover text for execution ``i`` (plain text): ``title`` ("#SEQ NAME" made of it),
    kind, phase if asked, duration, ``outcome``, ``lane`` ("engine incarnation: N"), tokens."""
    ex = run.executions
    seq = int(ex["seq"][i])
    name, kind = run.step_names.get(seq, ("?", "?"))
    end = ex["end"][i]
    duration = (now if np.isnan(end) else end) - ex["start"][i]
    tokens = int(ex["tokens"][i])
    lines = [
        title.format(seq=seq, name=name),
        f"kind: {kind}",
        *([f"phase: {PHASES[int(ex['phase'][i])]}"] if phase else []),
        f"duration: {duration * 1000:.0f} ms" if duration < 10 else f"duration: {duration:.1f} s",
        f"outcome: {outcome}",
        f"{lane}: {int(ex['lane'][i])}",
    ]
    if tokens:
        lines.append(f"tokens: {tokens}" + (" (estimated)" if ex["estimated"][i] else ""))
    if seq in run.wakes:
        lines.append(f"wakes at {wake_label(run.wakes[seq])}")
    return "\n".join(lines)


def wake_label(at: float) -> str:
    """A sleep's wake-up time as the timeline says it (local time, to the second)."""
    import time

    return time.strftime("%H:%M:%S", time.localtime(at))


def wake_mark(run: RunState, *, by_step: bool = False) -> tuple[float, str] | None:
    """Where the timeline marks the wake-up of the sleep the run is in, and its label; ``None``
    when it is not asleep. On the time axis at the wake-up time; by step, just after the sleep."""
    until = run.sleeping_until
    if until is None:
        return None
    seq = run.waiting_step or 0
    x = seq + 0.5 if by_step else until - origin(run)
    return x, f"wakes at {wake_label(until)}"


def describe(run: RunState, i: int, now: float) -> str:
    """The hover text for execution ``i``: name, phase, duration, tokens, outcome (plain text)."""
    seq = int(run.executions["seq"][i])
    return hover_lines(
        run,
        i,
        now,
        title="#{seq} {name}" if seq >= 0 else "{name}",
        outcome=OUTCOME_NAMES[int(run.executions["outcome"][i])],
        lane="engine incarnation",
        phase=True,
    )
