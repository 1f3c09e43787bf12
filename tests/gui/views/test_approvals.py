"""The approvals inbox (issue 32): every run of the log waiting for a signal, the longest waiting
first, what it waits for and what its last step shows; Approve / Reject sends the signal, once,
with the comment and who decided. Real engines wait; the real window (offscreen) decides."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog_gui.main_window import MainWindow


def wait_for_approval(engine: Engine, run_id: str, witness: Path) -> Any:
    args = ["run", f"{AGENTS}:approval", "--run-id", run_id, "--db", str(engine.db),
            "--param", "n=1", "--param", f"witness={witness}"]  # fmt: skip
    proc = engine.start(*args)
    return proc


def test_a_person_approves_one_run_and_rejects_another_from_the_inbox(
    qtbot: Any, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:
    inbox = window.approvals
    first = wait_for_approval(engine, "first", tmp_path / "a.json")
    qtbot.waitUntil(lambda: [w.run_id for w in inbox.waiting] == ["first"], timeout=30_000)
    second = wait_for_approval(engine, "second", tmp_path / "b.json")
    try:
        # Both listed, the longest waiting first, with what the wait follows.
        qtbot.waitUntil(
            lambda: [w.run_id for w in inbox.waiting] == ["first", "second"], timeout=30_000
        )
        assert [w.signal for w in inbox.waiting] == ["approve", "approve"]
        assert window._approvals_dock.windowTitle() == "Approvals (2)"
        inbox.table.selectRow(0)
        assert "its last step (apply 0) shows:" in inbox.shows_label.text()

        inbox.note.setText("looks right <b>ship it</b>")
        with qtbot.waitSignal(inbox.decided, timeout=10_000):
            inbox.approve_button.click()
        assert first.wait(timeout=60) == 0
        status = engine.status("first")
        assert status["result"] == {
            "approved": True,
            "sent": 2,
            "note": "looks right <b>ship it</b>",
        }

        qtbot.waitUntil(lambda: [w.run_id for w in inbox.waiting] == ["second"], timeout=30_000)
        inbox.table.selectRow(0)
        with qtbot.waitSignal(inbox.decided, timeout=10_000):
            inbox.reject_button.click()
        assert second.wait(timeout=60) == 0
        assert engine.status("second")["result"] == {"approved": False, "sent": 1}
        qtbot.waitUntil(lambda: not inbox.waiting and inbox.empty.isVisible(), timeout=30_000)
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
    # The decision is in the log: the signal's data names who decided; one signal per run.
    sent = engine.query("SELECT run_id, data FROM signal ORDER BY id")
    assert [r for r, _d in sent] == ["first", "second"]
    assert json.loads(sent[0][1])["by"] == getpass.getuser()
