"""A model call in progress on the timeline (issue 30): its bar is pale while the model thinks and
fills as its tokens come; once the answer is recorded the bar is plain. A real engine streams
the offline model's answer over a few seconds; the real window (offscreen) draws it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from helpers.engine import Engine
from helpers.gui import shown
from steplog_gui.main_window import MainWindow

AGENT = """\
import steplog

@steplog.agent
def thinker(run):
    prompt = "Please summarise this " + " ".join(f"word{i}" for i in range(40))
    return run.chat([{"role": "user", "content": prompt}], name="think").text
"""


def bars_of(item: Any) -> tuple[np.ndarray, np.ndarray]:
    opts = item.opts
    x0 = np.asarray(opts.get("x0"), dtype=float)
    return x0, x0 + np.asarray(opts.get("width"), dtype=float)


def test_a_model_calls_bar_fills_as_its_tokens_come_and_is_plain_once_answered(
    qtbot: Any, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "thinker.py"
    agent.write_text(AGENT)
    proc = engine.start(
        "run", f"{agent}:thinker", "--run-id", "w", "--db", str(engine.db), "--pace", "6"
    )
    try:
        shown(qtbot, window, "w")
        timeline = window.timeline
        veil, fill = timeline._veil, timeline._fill
        # Pieces are coming: the call's bar is veiled, and the stretch they came in is solid.
        qtbot.waitUntil(lambda: len(bars_of(fill)[0]) == 1, timeout=20_000)
        v0, v1 = bars_of(veil)
        f0, f1 = bars_of(fill)
        assert len(v0) == 1
        assert v0[0] < f0[0], "the model thought before its first piece: pale, left"
        assert f1[0] <= v1[0] + 1e-6, "the fill never runs past the bar"
        # ...and it fills on as more come, from the same first piece.
        width = f1[0] - f0[0]
        qtbot.waitUntil(lambda: bars_of(fill)[1][0] - bars_of(fill)[0][0] > width + 0.5,
                        timeout=10_000)  # fmt: skip
        assert abs(bars_of(fill)[0][0] - f0[0]) < 1e-6
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == 0
    # Answered and recorded: no veil, no fill; the bar is a committed step's.
    qtbot.waitUntil(lambda: (r := window.monitor.run("w")) is not None and r.terminal,
                    timeout=10_000)  # fmt: skip
    qtbot.waitUntil(lambda: len(bars_of(veil)[0]) == 0 and len(bars_of(fill)[0]) == 0,
                    timeout=5_000)  # fmt: skip
