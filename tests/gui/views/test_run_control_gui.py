"""Run control from the window: a waiting run's banner and its answers, Cancel run, Fork from this
step, Retry. Real engines, real subprocess commands, the real window (offscreen)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QDialog, QMessageBox

from helpers.engine import Engine
from helpers.gui import answer_next_modal
from helpers.paths import AGENTS
from steplog_gui.main_window import MainWindow
from steplog_gui.model.run_state import COPIED

APPROVAL = f"{AGENTS}:approval"


def waiting_run(engine: Engine, tmp_path: Path, run_id: str) -> None:
    done = engine.run(
        "run",
        APPROVAL,
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--exit-when-waiting",
    )
    assert done.returncode == 6, done.stderr


def shown(qtbot, window: MainWindow, run_id: str) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: window.runs_model.row_of(run_id) >= 0, timeout=10_000)
    window.select_run(run_id)
    qtbot.waitUntil(lambda: window._run_id == run_id, timeout=5_000)


def test_a_waiting_run_shows_a_banner_and_approve_sends_one_signal_that_resume_consumes(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    waiting_run(engine, tmp_path, "ask")
    shown(qtbot, window, "ask")
    banner = window.control.banner
    qtbot.waitUntil(banner.isVisible, timeout=5_000)
    assert "ask waits for “approve” since" in banner.text.text()
    assert window.runs_model.data(window.runs_model.index(0, 1)) == "waiting"

    banner.approve.click()
    banner.approve.click()  # a double click is one answer
    qtbot.waitUntil(lambda: engine.events("signal_sent") == 1, timeout=20_000)
    qtbot.wait(500)
    assert engine.query("SELECT name, data FROM signal") == [("approve", '{"approved":true}')]

    window.resume_selected()  # no engine held it: resuming consumes the signal and finishes
    qtbot.waitUntil(lambda: window.monitor.run("ask").status == "succeeded", timeout=30_000)  # type: ignore[union-attr]
    assert not banner.isVisible()
    assert engine.status("ask")["result"]["approved"] is True


def test_cancel_run_from_the_menu_ends_a_waiting_engine(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    waiting_run(engine, tmp_path, "c")
    shown(qtbot, window, "c")
    window.resume_selected()  # an engine now waits with it
    qtbot.waitUntil(lambda: window.engine.running, timeout=10_000)
    answer_next_modal(lambda box: box.button(QMessageBox.StandardButton.Yes).click())  # type: ignore[attr-defined]
    window.control.act_cancel.trigger()
    qtbot.waitUntil(lambda: window.monitor.run("c").status == "cancelled", timeout=30_000)  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: not window.engine.running, timeout=10_000)
    assert engine.status("c")["reason"] == "cancelled from the monitor"
    assert not window.control.act_cancel.isEnabled()
    qtbot.waitUntil(lambda: window.engine.last_exit is not None, timeout=5_000)
    code, said = window.engine.last_exit  # type: ignore[misc]
    assert code == 5
    assert said == "engine exit 5: cancelled — run c was cancelled: cancelled from the monitor"
    assert window.statusBar().currentMessage() == said


def test_fork_from_the_selected_step_creates_the_fork_runs_it_and_draws_its_copied_prefix(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    waiting_run(engine, tmp_path, "parent")
    shown(qtbot, window, "parent")
    window.control.set_step("parent", 5)  # as a click on step 5's bar does
    captured: dict[str, str] = {}

    def fill(dialog: QDialog) -> None:
        dialog.run_id.setText("child")  # type: ignore[attr-defined]
        dialog.extra.setText("timeout=0")  # type: ignore[attr-defined]
        captured["step"] = str(dialog.at_step.value())  # type: ignore[attr-defined]
        dialog.accept()

    answer_next_modal(fill)
    window.control.act_fork.trigger()  # the dialog opens once the step's row is read
    qtbot.waitUntil(lambda: "step" in captured, timeout=10_000)
    assert captured["step"] == "5"
    qtbot.waitUntil(
        lambda: (r := window.monitor.run("child")) is not None and r.status == "succeeded",
        timeout=30_000,
    )
    child = window.monitor.run("child")
    assert child is not None and child.forked_from == ("parent", 5)
    ex = child.executions
    assert sorted(ex["seq"][ex["outcome"] == COPIED].tolist()) == [1, 2, 3, 4]
    assert window._run_id == "child", "the new run is shown"
    assert window.timeline._fork_label.isVisible()
    assert "forked from parent at step 5" in window.timeline._fork_label.textItem.toPlainText()
    assert "↳ child" in [
        window.runs_model.data(window.runs_model.index(r, 0))
        for r in range(window.runs_model.rowCount())
    ]
    assert engine.status("child")["result"] == {"approved": None, "sent": 3}


def test_retry_a_failed_run_from_the_menu(
    qtbot, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    fixed = tmp_path / "fixed"
    args = (
        "run",
        f"{AGENTS}:fixable",
        "--run-id",
        "f",
        "--db",
        str(engine.db),
        "--param",
        f"witness={tmp_path / 'w.db'}",
        "--param",
        f"fixed_when={fixed}",
    )
    assert engine.run(*args).returncode == 4
    shown(qtbot, window, "f")
    qtbot.waitUntil(window.control.act_retry.isEnabled, timeout=5_000)
    fixed.touch()
    window.control.act_retry.trigger()
    qtbot.waitUntil(lambda: window.monitor.run("f").status == "succeeded", timeout=30_000)  # type: ignore[union-attr]
    conn = sqlite3.connect(tmp_path / "w.db")
    assert conn.execute("SELECT count(*) FROM applied").fetchone() == (6,)
    conn.close()


def test_a_kill_while_waiting_keeps_the_waits_start_and_the_persons_time_is_no_resume_latency(
    qtbot: Any, window: MainWindow, engine: Engine, tmp_path: Path
) -> None:
    """Kill now while the run waits for approval: the relaunched engine waits again at once.
    The banner's "since" is when the wait began (the log's first ``waiting`` for it), not when
    the new engine took it up; and the kill's resume latency ends when the new engine is back
    waiting, not when a person, seconds later, approves."""
    import time

    from steplog_gui.model.timeline_data import kill_label
    from steplog_gui.processes.engine_process import LaunchSpec

    window.start_run(
        LaunchSpec(
            agent=APPROVAL, run_id="k", db=engine.db, params={"witness": str(tmp_path / "w.db")}
        )
    )
    shown(qtbot, window, "k")
    banner = window.control.banner
    qtbot.waitUntil(lambda: banner.isVisible() and engine.events("waiting") == 1, timeout=20_000)
    since = "SELECT json_extract(data, '$.since') FROM event WHERE kind = 'waiting'"
    [(began,)] = engine.query(since)
    said = banner.text.text()
    assert time.strftime("%H:%M:%S", time.localtime(began)) in said
    qtbot.wait(1100)  # so that a wait taken up again would read a later second

    window.kill_now()
    qtbot.waitUntil(lambda: engine.events("waiting") == 2, timeout=20_000)  # the new engine's
    assert engine.query(since) == [(began,)] * 2
    assert engine.status("k")["waiting_since"] == began
    run = window.monitor.run("k")
    assert run is not None
    qtbot.waitUntil(lambda: run.incarnation == 2 and run.waiting_since is not None, timeout=5_000)
    assert run.waiting_since == began
    banner._update_text()
    assert time.strftime("%H:%M:%S", time.localtime(began)) in banner.text.text()

    qtbot.wait(2500)  # a person reads the question, then answers
    answered_at = time.time()
    banner.approve.click()
    qtbot.waitUntil(lambda: run.status == "succeeded", timeout=30_000)
    [kill] = run.kills
    [(again,)] = engine.query("SELECT max(ts) FROM event WHERE kind = 'waiting'")
    assert kill.latency is not None and abs(kill.latency - (again - kill.ts)) < 1e-6
    # Resumed once the new engine waits again, before the person answered: their time is not in it.
    assert kill.ts + kill.latency < answered_at, "the resume latency counted the person's time"
    assert kill_label(kill).endswith(f"waiting again in {kill.latency:.2f} s")


def test_fork_with_an_edited_result_records_it_and_runs_on_from_the_next_step(
    qtbot, window: MainWindow, engine: Engine
) -> None:  # type: ignore[no-untyped-def]
    done = engine.run("run", f"{AGENTS}:relay", "--run-id", "p", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    shown(qtbot, window, "p")
    window.control.set_step("p", 2)  # as a click on step 2's bar does
    seen: dict[str, object] = {}

    def edit(dialog: QDialog) -> None:
        d: Any = dialog
        seen["shown"] = d.result_edit.toPlainText()
        d.run_id.setText("p-edited")
        d.edit.setChecked(True)
        d.result_edit.setPlainText("{oops")
        seen["refused"] = (d.ok.isEnabled(), d.result_problem.text())
        d.result_edit.setPlainText("100")
        seen["accepted"] = d.ok.isEnabled()
        dialog.accept()

    answer_next_modal(edit)
    window.control.act_fork.trigger()
    qtbot.waitUntil(lambda: "accepted" in seen, timeout=10_000)
    assert seen["shown"] == "3"  # step 2's recorded result, to edit
    assert seen["refused"][0] is False and "not JSON" in seen["refused"][1]  # type: ignore[index]
    assert seen["accepted"] is True
    qtbot.waitUntil(
        lambda: (r := window.monitor.run("p-edited")) is not None and r.status == "succeeded",
        timeout=30_000,
    )
    assert engine.status("p-edited")["result"] == 102  # 100, then steps 3 and 4
