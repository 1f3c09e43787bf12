"""The built desktop app, smoke-tested through ``packaging/smoke.py`` (the bundle's own
executable runs the CLI, the kill test and the monitor).

Runs only where a bundle is built (``dist/steplog/``) or ``STEPLOG_BUILD_BUNDLE=1`` asks for a
build first (about 1-1.5 minutes on 2 cores, plus about a minute for the smoke test itself).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / "dist" / "steplog" / ("steplog.exe" if sys.platform == "win32" else "steplog")
BUILD = os.environ.get("STEPLOG_BUILD_BUNDLE") == "1"

pytestmark = [
    pytest.mark.bundle,
    pytest.mark.skipif(
        not (BUILD or EXE.is_file()),
        reason="no built app in dist/; python packaging/build.py, or STEPLOG_BUILD_BUNDLE=1",
    ),
]


@pytest.mark.timeout(1500)  # a build (~75 s) and the smoke test (~65 s) on a busy 2-core machine
def test_the_built_app_passes_its_smoke_test() -> None:
    if BUILD:
        built = subprocess.run(
            [sys.executable, str(ROOT / "packaging" / "build.py")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
        )
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "smoke.py"), str(EXE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "killtest: PASS" in done.stdout
        and "SIGTERM: the monitor exited 0, its engine and outbox with it" in done.stdout
    )
