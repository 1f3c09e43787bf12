"""Architecture rules that a tool enforces: the engine stays headless and typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_never_imports_qt_or_the_gui() -> None:
    """import-linter contract in pyproject.toml: steplog may not import steplog_gui, PySide6, pyqtgraph."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT / "gui")])}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken" in done.stdout  # headless, and no import cycles


def test_importing_steplog_loads_no_qt() -> None:
    code = "import sys, steplog, steplog.cli, steplog.engine; print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'steplog_gui', 'shiboken6')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_engine_and_the_monitor_are_mypy_strict_clean() -> None:
    """mypy strict over both packages (pyproject: packages = steplog, steplog_gui)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
