"""The output pane (issue 30): what a step streamed, as it comes, with the attempt a kill cut
short kept beside the one that was recorded. Real engines write the logs; the real window shows
them (offscreen)."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QTextCursor

from helpers.engine import Engine, kill_group
from helpers.gui import shown
from helpers.paths import AGENTS
from steplog.log.reader import LogRepository
from steplog_gui.main_window import MainWindow
from steplog_gui.model.step_output import CUT, LIVE, RECORDED

AGENT = f"{AGENTS}:streamer"


def test_the_pane_shows_the_step_writing_now_then_its_cut_attempt_struck_through_above_the_redo(
    qtbot: Any, window: MainWindow, engine: Engine
) -> None:
    args = ["run", AGENT, "--run-id", "o", "--db", str(engine.db), "--param", "n=1",
            "--param", "chunks=300", "--param", "pause=0.02"]  # fmt: skip
    proc = engine.start(*args)
    try:
        shown(qtbot, window, "o")
        pane = window.output
        # Live: the running step's text appears while it is written, marked as being written.
        qtbot.waitUntil(
            lambda: (
                bool(pane.attempts)
                and pane.attempts[-1].state == LIVE
                and "0.5 " in pane.attempts[-1].text
            ),
            timeout=20_000,
        )
        assert "writing now" in pane.header.text()
        seen = pane.attempts[-1].text
        kill_group(proc)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    # Killed: what the attempt wrote stays; it is known cut once the run goes on. (The pane
    # follows whichever step writes last; a click on step 2's bar keeps it there.)
    window.timeline.step_selected.emit("o", 2)
    again = engine.start(*args)
    try:
        qtbot.waitUntil(lambda: [a.state for a in pane.attempts[:1]] == [CUT], timeout=30_000)
        assert pane.attempts[0].text.startswith(seen)
        qtbot.waitUntil(
            lambda: len(pane.attempts) == 2 and pane.attempts[1].state == RECORDED, timeout=60_000
        )
    finally:
        if again.poll() is None:
            again.wait(timeout=60)
    whole = "".join(f"0.{c} " for c in range(300))
    assert pane.attempts[1].text == whole, "the redone attempt, whole, recorded"
    text = pane.text.toPlainText()
    assert "attempt 1: cut short, not the recorded answer" in text
    assert "attempt 2: recorded" in text
    # The cut attempt's text is struck through; the recorded one's is not.
    doc = pane.text.document()
    cursor = QTextCursor(doc)
    cursor.setPosition(text.index("0.0 ") + 1)
    assert cursor.charFormat().fontStrikeOut()
    cursor.setPosition(text.index("attempt 2: recorded") + len("attempt 2: recorded") + 3)
    assert not cursor.charFormat().fontStrikeOut()


def test_markup_in_a_stream_is_shown_as_text(
    qtbot: Any, window: MainWindow, engine: Engine, tmp_path: Any
) -> None:
    agent = tmp_path / "markup.py"
    agent.write_text(
        "import steplog\n\n"
        "def body(run):\n"
        "    run.emit('<b>bold?</b> <a href=\"x\">link</a>', stream='tokens')\n"
        "    return 1\n\n"
        "@steplog.agent\n"
        "def markup(run):\n"
        "    return run.step('say', body, run)\n"
    )
    done = engine.run("run", f"{agent}:markup", "--run-id", "m", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    shown(qtbot, window, "m")
    qtbot.waitUntil(lambda: bool(window.output.attempts), timeout=10_000)
    assert '<b>bold?</b> <a href="x">link</a>' in window.output.text.toPlainText()


TALKER = """\
import time
import steplog

def talk(run, chunks, pause):
    for c in range(chunks):
        run.emit(f"{run.id}:{c} ", stream="tokens")
        time.sleep(pause)
    return chunks

@steplog.agent
def talker(run, chunks: int = 400, pause: float = 0.02):
    return run.step("talk", talk, run, chunks, pause)
"""


def test_two_runs_streaming_in_one_log_each_shows_only_its_own_text_when_switched(
    qtbot: Any, window: MainWindow, engine: Engine, tmp_path: Any
) -> None:
    agent = tmp_path / "talker.py"
    agent.write_text(TALKER)
    procs = [
        engine.start("run", f"{agent}:talker", "--run-id", rid, "--db", str(engine.db))
        for rid in ("left", "right")
    ]
    pane = window.output

    def writing(rid: str) -> bool:
        text = pane.attempts[-1].text if pane.attempts else ""
        return pane.attempts[-1].state == LIVE and f"{rid}:30 " in text if pane.attempts else False

    try:
        for rid, other in (("left", "right"), ("right", "left"), ("left", "right")):
            shown(qtbot, window, rid)
            qtbot.waitUntil(lambda rid=rid: writing(rid), timeout=20_000)  # type: ignore[misc]
            before = len(pane.attempts[-1].text)
            qtbot.waitUntil(lambda b=before: len(pane.attempts[-1].text) > b, timeout=10_000)
            text = pane.text.toPlainText()
            assert f"{other}:" not in text, f"{other}'s text in {rid}'s pane"
            # The timeline fills this run's bar from this run's entries (the switch dropped
            # the other's): the first piece's time is the one this run's log holds.
            repo = LogRepository(engine.db)
            try:
                _last, progress = repo.stream_progress(rid)
            finally:
                repo.close()
            first = {(p.seq, p.incarnation): p.first for p in progress}
            qtbot.waitUntil(lambda: bool(window.timeline._writing), timeout=5_000)
            assert {k: v[1] for k, v in window.timeline._writing.items()} == first
    finally:
        for proc in procs:
            proc.wait(timeout=60)
    assert [p.returncode for p in procs] == [0, 0]
    # Both over: each pane shows its run's whole recorded text, nothing of the other's.
    for rid, other in (("right", "left"), ("left", "right")):
        shown(qtbot, window, rid)
        whole = "".join(f"{rid}:{c} " for c in range(400))
        qtbot.waitUntil(
            lambda w=whole: [(a.state, a.text) for a in pane.attempts] == [(RECORDED, w)],
            timeout=10_000,
        )
        assert f"{other}:" not in pane.text.toPlainText()
