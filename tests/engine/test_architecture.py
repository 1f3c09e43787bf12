"""Architecture rules that a tool enforces: the engine stays headless and typed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.paths import ROOT


def test_the_engine_never_imports_qt_or_the_gui() -> None:
    """import-linter contract in pyproject.toml: steplog may not import steplog_gui, PySide6,
    pyqtgraph."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT / "gui")])}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 broken." in done.stdout  # headless, layered, no import cycles


def test_importing_steplog_loads_no_qt() -> None:
    code = (
        "import sys, steplog, steplog.cli, steplog.runtime.engine; print(sorted(m for m in "
        "sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'steplog_gui', 'shiboken6')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


PLATFORMS = ("linux", "win32", "darwin")


@pytest.fixture(scope="module")
def mypy_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The three mypy runs, started together (each with a cache of its own): they take turns on
    the cores instead of one after another."""
    caches = tmp_path_factory.mktemp("mypy")
    runs = {
        p: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--platform",
                p,
                "--cache-dir",
                str(caches / p),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        for p in PLATFORMS
    }
    yield runs
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_engine_and_the_monitor_are_mypy_strict_clean_on_every_os(
    platform: str, mypy_runs: dict[str, subprocess.Popen[str]]
) -> None:
    """mypy strict over both packages (pyproject: packages = steplog, steplog_gui), as on Linux,
    Windows and macOS: a POSIX-only call (``os.killpg``, ``SIGKILL``) in shared code fails here."""
    output, _ = mypy_runs[platform].communicate(timeout=600)
    assert mypy_runs[platform].returncode == 0, output


def test_the_exception_tree_in_errors_docstring_names_every_error_class_and_only_those() -> None:
    """One documented tree (STYLE 7): every error class steplog defines is drawn in
    ``steplog.errors``' docstring under its real parent, and nothing drawn is missing."""
    import importlib
    import pkgutil
    import re

    import steplog
    from steplog import errors

    roots = (errors.SteplogError, errors.TransientError, errors.PermanentError)
    defined: dict[str, type] = {}
    for info in pkgutil.walk_packages(steplog.__path__, "steplog."):
        if info.name.endswith("__main__") or info.name == "steplog.pytest_plugin":
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, roots) and obj.__module__ == info.name:
                defined[obj.__name__] = obj
    drawn: dict[str, str | None] = {}  # name -> parent as drawn
    for block in re.findall(r"```\n(.*?)```", errors.__doc__ or "", re.S):
        stack: list[tuple[int, str]] = []
        for line in block.splitlines():
            m = re.match(r"^([│ ├└─]*)(\w+)", line)
            if not m or not m.group(2)[0].isupper():
                continue
            depth = len(m.group(1))
            while stack and stack[-1][0] >= depth:
                stack.pop()
            drawn[m.group(2)] = stack[-1][1] if stack else None
            stack.append((depth, m.group(2)))
    assert set(drawn) == set(defined), set(drawn) ^ set(defined)
    for name, parent in drawn.items():
        if parent is not None:
            assert issubclass(defined[name], defined[parent]), f"{name} is drawn under {parent}"
