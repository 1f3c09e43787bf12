"""The frozen app's way of starting its children, checked without building a bundle: the entry
script and ``steplog.control.procs`` run for real in a plain interpreter, and the icon files are
parsed."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from steplog.control import procs

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "packaging" / "steplog_app.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "engine"), str(ROOT / "gui")])
    return env


def test_python_argv_is_python_dash_m_unless_frozen_then_the_bundle_executable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert procs.python_argv("steplog", "run", "demo") == [
        sys.executable,
        "-P",
        "-m",
        "steplog",
        "run",
        "demo",
    ]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert procs.python_argv("steplog", "run", "demo") == [
        sys.executable,
        "__module__",
        "steplog",
        "run",
        "demo",
    ]


def test_the_entry_script_runs_a_module_as_main_with_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "show_main.py").write_text(
        "import sys\nprint(__name__, sys.argv[1:])\nsys.exit(7)\n"
    )
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(ENTRY), "__module__", "show_main", "run", "--x", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip() == "__main__ ['run', '--x', '1']"


def test_the_entry_script_is_the_steplog_command_line_and_passes_exit_codes_on() -> None:
    version = subprocess.run(
        [sys.executable, str(ENTRY), "--version"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert version.returncode == 0 and "version" in version.stdout, version.stderr
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "status", "no-such-run", "--db", os.devnull + "-missing.db"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_hidden_subcommand_without_a_module_is_a_one_line_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(ENTRY), "__module__"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "usage: steplog __module__ MODULE [ARGS...]"


def test_the_windows_and_macos_icons_hold_pngs_rendered_from_the_svg(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        import icons
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    svg = ROOT / "resources" / "steplog.svg"
    ico = icons.write_ico(svg, tmp_path / "steplog.ico").read_bytes()
    reserved, kind, n = struct.unpack_from("<HHH", ico)
    assert (reserved, kind, n) == (0, 1, len(icons.ICO_SIZES))
    for i, size in enumerate(icons.ICO_SIZES):
        width, _h, _c, _r, _p, _b, length, offset = struct.unpack_from("<BBBBHHII", ico, 6 + 16 * i)
        assert width == (0 if size == 256 else size)
        assert ico[offset : offset + 8] == b"\x89PNG\r\n\x1a\n" and offset + length <= len(ico)
    icns = icons.write_icns(svg, tmp_path / "steplog.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack_from(">I", icns, 4)[0] == len(icns)
    at, kinds = 8, []
    while at < len(icns):
        kinds.append(icns[at : at + 4])
        assert icns[at + 8 : at + 16] == b"\x89PNG\r\n\x1a\n"
        at += struct.unpack_from(">I", icns, at + 4)[0]
    assert kinds == list(icons.ICNS_TYPES)
