"""Build the steplog desktop app for this OS: ``python packaging/build.py``.

A one-folder PyInstaller bundle in ``dist/steplog/`` (``dist/steplog.app`` on macOS) whose
executable is the monitor (no arguments), the ``steplog`` command line and every process the app
starts. Needs the app's dependencies and PyInstaller: ``pip install ".[package]"``.

``--install-desktop`` (Linux) then installs a ``.desktop`` file and the icon for the current
user, pointing at the built executable.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SVG = ROOT / "resources" / "steplog.svg"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def platform_icon(work: Path) -> Path | None:
    """The icon PyInstaller wants on this OS (Linux takes none: the desktop entry names one)."""
    sys.path.insert(0, str(HERE))
    import icons

    work.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":
        return icons.write_ico(SVG, work / "steplog.ico")
    if sys.platform == "darwin":
        return icons.write_icns(SVG, work / "steplog.icns")
    return None


def build(dist: Path, work: Path) -> Path:
    if importlib.util.find_spec("PyInstaller") is None:
        raise SystemExit('error: PyInstaller is not installed; run: pip install ".[package]"')
    icon = platform_icon(work)
    env = dict(os.environ)
    if icon is not None:
        env["STEPLOG_ICON"] = str(icon)
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--log-level",
            "WARN",
            "--distpath",
            str(dist),
            "--workpath",
            str(work),
            str(HERE / "steplog.spec"),
        ],
        check=True,
        env=env,
        cwd=ROOT,
    )
    bundle = dist / ("steplog.app" if sys.platform == "darwin" else "steplog")
    print(
        f"built {bundle} in {time.monotonic() - started:.0f} s, {folder_size(bundle) / 2**20:.0f} "
        "MiB"
    )
    return bundle


def install_desktop(bundle: Path) -> None:
    """``~/.local/share/applications/steplog.desktop`` and the scalable icon (XDG paths)."""
    if not sys.platform.startswith("linux"):
        raise SystemExit(
            "error: --install-desktop is for Linux; on macOS drag steplog.app to Applications"
        )
    executable = bundle / "steplog"
    if not executable.is_file():
        raise SystemExit(
            f"error: no built app at {executable}; run python packaging/build.py first"
        )
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    icon_dir = data / "icons" / "hicolor" / "scalable" / "apps"
    apps = data / "applications"
    icon_dir.mkdir(parents=True, exist_ok=True)
    apps.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SVG, icon_dir / "steplog.svg")
    entry = (ROOT / "resources" / "steplog.desktop").read_text()
    entry = entry.replace("Exec=steplog gui", f'Exec="{executable}" gui')
    (apps / "steplog.desktop").write_text(entry)
    print(f"installed {apps / 'steplog.desktop'} and {icon_dir / 'steplog.svg'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--dist", type=Path, default=ROOT / "dist", help="where the app goes (default: dist/)"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=ROOT / "build" / "pyinstaller",
        help="PyInstaller's scratch folder (default: build/pyinstaller/)",
    )
    parser.add_argument(
        "--install-desktop",
        action="store_true",
        help="Linux: then install the .desktop file and icon for the current user",
    )
    parser.add_argument("--no-build", action="store_true", help="use the app already in --dist")
    args = parser.parse_args()
    dist = args.dist.resolve()
    bundle = dist / "steplog" if args.no_build else build(dist, args.work.resolve())
    if args.install_desktop:
        install_desktop(bundle)


if __name__ == "__main__":
    main()
