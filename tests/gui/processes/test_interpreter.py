"""A person's own agent runs with the Python they choose, checked first and remembered.

Real interpreters: a virtual environment without steplog, and "their" Python (a launcher script
in front of this interpreter that notes every start, as a venv's ``bin/python`` would be a
different file); real engines started from the real New run dialog.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QDialog, QMessageBox

from helpers.engine import Engine
from helpers.gui import answer_next_modal
from helpers.paths import ROOT
from steplog_gui import jobs
from steplog_gui.main_window import MainWindow
from steplog_gui.processes import interpreter
from steplog_gui.settings import Settings
from steplog_gui.views.new_run_dialog import OWN_PYTHON, NewRunDialog


@pytest.fixture
def their_python(tmp_path: Path) -> tuple[Path, Path]:
    """(an interpreter that is not the monitor's executable, the file noting each of its starts)."""
    starts = tmp_path / "starts.txt"
    launcher = tmp_path / "their-env" / "bin" / "python"
    launcher.parent.mkdir(parents=True)
    path = os.pathsep.join([str(ROOT / "engine"), os.environ.get("PYTHONPATH", "")])
    launcher.write_text(
        f'#!/bin/sh\necho "$@" >> "{starts}"\nPYTHONPATH="{path}" exec "{sys.executable}" "$@"\n'
    )
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return launcher, starts


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment: Python, and no steplog."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def an_agent(folder: Path, body: str = "") -> str:
    source = folder / "my_agent.py"
    source.write_text(
        f"import steplog\n{body}\n\n@steplog.agent\ndef main(run):\n"
        "    return run.step('double', lambda: 21 * 2)\n"
    )
    return f"{source}:main"


def test_a_working_interpreter_and_agent_pass_the_check(
    their_python: tuple[Path, Path], tmp_path: Path
) -> None:
    found = interpreter.check(str(their_python[0]), an_agent(tmp_path))

    assert found.ok, found.message
    assert found.python_version == "{}.{}.{}".format(*sys.version_info[:3])
    assert "loads" in found.message


def test_a_python_without_steplog_is_told_how_to_install_it(
    bare_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    found = interpreter.check(str(bare_venv), None)

    assert not found.ok
    assert "has no steplog" in found.message
    assert f"{bare_venv} -m pip install steplog" in found.message


def test_an_agent_that_cannot_be_imported_there_is_named_with_the_reason(
    their_python: tuple[Path, Path], tmp_path: Path
) -> None:
    found = interpreter.check(
        str(their_python[0]), an_agent(tmp_path, "import package_only_elsewhere")
    )

    assert not found.ok
    assert (
        "the agent cannot be loaded" in found.message and "package_only_elsewhere" in found.message
    )


@pytest.mark.parametrize("what", ["missing", "folder", "not executable", "not python"])
def test_what_is_not_an_interpreter_is_refused_in_one_line(tmp_path: Path, what: str) -> None:
    target = tmp_path / "thing"
    if what == "folder":
        target.mkdir()
    elif what == "not executable":
        target.write_text("print('hi')\n")
    elif what == "not python":
        target.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
        target.chmod(0o700)
    found = interpreter.check(str(target))

    assert not found.ok and "\n" not in found.message and str(target) in found.message


def test_a_file_agent_is_remembered_under_the_spec_the_run_row_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert interpreter.canonical_agent("agents/a.py:main") == f"{tmp_path}/agents/a.py:main"
    assert interpreter.canonical_agent("pkg.mod:main") == "pkg.mod:main"
    assert interpreter.canonical_agent("demo") == "demo"


def test_the_dialog_refuses_an_interpreter_that_cannot_run_the_agent_and_stays_open(
    qtbot, settings: Settings, bare_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("PYTHONPATH", raising=False)
    dialog = NewRunDialog(settings=settings)
    qtbot.addWidget(dialog)
    dialog.agent.setEditText(an_agent(tmp_path))
    dialog.python.setEditText(str(bare_venv))
    warned: list[str] = []
    answer_next_modal(
        lambda box: (
            warned.append(box.text()),  # type: ignore[attr-defined, func-returns-value]
            box.button(QMessageBox.StandardButton.Ok).click(),
        )
    )  # type: ignore[attr-defined]

    dialog.accept()
    assert dialog.checking and not dialog._ok.isEnabled()  # noqa: SLF001 - checked off the GUI thread, OK waits
    qtbot.waitUntil(lambda: not dialog.checking and bool(warned), timeout=30_000)

    assert dialog.result() != QDialog.DialogCode.Accepted and dialog._ok.isEnabled()  # noqa: SLF001
    assert warned and "has no steplog" in warned[0]
    assert "has no steplog" in dialog.python_note.text()
    assert settings.interpreters == []  # nothing remembered from a refusal


def test_built_in_agents_always_run_on_the_monitors_own_python(qtbot, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    dialog = NewRunDialog(settings=settings)
    qtbot.addWidget(dialog)
    dialog.agent.setEditText("demo")

    assert not dialog.python.isEnabled()
    assert dialog.python.currentText() == OWN_PYTHON and dialog.chosen_python() is None


def test_an_own_agent_runs_with_the_chosen_python_which_is_remembered_and_used_again_to_resume(
    qtbot,
    window: MainWindow,
    settings: Settings,
    engine: Engine,  # type: ignore[no-untyped-def]
    their_python: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    launcher, starts = their_python
    spec = an_agent(tmp_path)
    dialog = NewRunDialog(window, settings=settings)
    qtbot.addWidget(dialog)
    dialog.agent.setEditText(spec)
    dialog.python.setEditText(str(launcher))
    dialog.run_id.setText("own-1")
    dialog.accept()
    qtbot.waitUntil(lambda: not dialog.checking, timeout=30_000)
    assert dialog.result() == QDialog.DialogCode.Accepted, dialog.python_note.text()

    window.start_spec(dialog.spec(engine.db))
    qtbot.waitUntil(
        lambda: (
            (window.monitor.run("own-1") or None) is not None
            and window.monitor.run("own-1").status == "succeeded"
        ),
        timeout=30_000,
    )  # type: ignore[union-attr]
    # Its end is in the log a moment before its process exits: until then the window refuses another
    # engine with a modal message, which would stop this test for good.
    qtbot.waitUntil(lambda: not window.engine.running, timeout=10_000)
    assert any(
        " -m steplog run " in line and "own-1" in line for line in starts.read_text().splitlines()
    )

    # Remembered: a new dialog for the same agent offers it, and resuming the run uses it.
    again = NewRunDialog(settings=settings)
    qtbot.addWidget(again)
    again.agent.setEditText(spec)
    assert again.chosen_python() == str(launcher)
    assert settings.interpreters == [str(launcher)]
    assert settings.interpreter_for(interpreter.canonical_agent(spec)) == str(launcher)
    window.launch_run("own-1", interpreter.canonical_agent(spec))
    assert window.engine.spec is not None and window.engine.spec.python == str(launcher)


def test_from_the_desktop_app_another_python_gets_the_library_path_the_person_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyInstaller's bootloader puts the bundle's libraries first on LD_LIBRARY_PATH; a person's
    Python must load its own libssl and libsqlite3, not the bundle's."""
    from steplog.control.procs import outside_env

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    bundle = {
        "LD_LIBRARY_PATH": "/opt/steplog/_internal:/usr/local/lib",
        "LD_LIBRARY_PATH_ORIG": "/usr/local/lib",
        "HOME": "/h",
    }
    assert outside_env(bundle) == {"LD_LIBRARY_PATH": "/usr/local/lib", "HOME": "/h"}
    assert outside_env({"LD_LIBRARY_PATH": "/opt/steplog/_internal", "HOME": "/h"}) == {
        "HOME": "/h"
    }
    monkeypatch.setattr(sys, "frozen", False)
    assert outside_env(bundle) == bundle  # not frozen: nothing of the person's is touched


def test_a_check_that_hangs_leaves_the_window_drawing_and_cancel_closes_the_dialog(
    qtbot, settings: Settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An agent whose import hangs: the check runs off the GUI thread, so the event loop keeps
    going; Cancel closes the dialog at once and the late answer changes nothing."""
    hangs = tmp_path / "hangs.py"
    hangs.write_text(
        "import time\n"
        "time.sleep(3)\n"
        "import steplog\n"
        "\n"
        "@steplog.agent\n"
        "def agent(run):\n"
        "    return 1\n"
    )
    dialog = NewRunDialog(settings=settings)
    qtbot.addWidget(dialog)
    dialog.agent.setEditText(f"{hangs}:agent")
    dialog.python.setEditText(sys.executable)
    dialog.accept()
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    qtbot.wait(500)
    assert dialog.checking and len(ticks) >= 10  # the loop ran while the check waited on the import
    dialog.reject()
    assert not dialog.checking and dialog.result() == QDialog.DialogCode.Rejected
    qtbot.waitUntil(lambda: jobs.wait_idle(100), timeout=10_000)
    timer.stop()
    assert dialog.result() == QDialog.DialogCode.Rejected and settings.interpreters == []
