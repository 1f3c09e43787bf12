"""What streaming costs (issue 30), measured, not asserted:

- durable no-op steps/s (and CPU per step) of this tree with nothing streamed, beside main's code
  in the same run (``git archive main engine``): streams must cost a run that does not stream
  nothing;
- CPU per model call against the fake OpenAI-compatible server (its own process, so its CPU is not
  counted), streamed vs the same call unstreamed (target: <= 5 % more), for a short answer
  (~20 chunks) and a long one (~210 chunks); for the long one also streamed the way it was
  before pieces were merged into one entry per batch (``per-chunk``).

Every figure is a fresh process (``stream_driver.py``); the variants take turns within each round;
medians (min-max) over ``ROUNDS``, ratios paired within a round. Run:

    python -m pytest tests/benchmarks/test_stream_bench.py -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from peers import as_installed
from targets import record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ROUNDS = int(os.environ.get("STEPLOG_BENCH_ROUNDS", "5"))
NOOP_STEPS = 1000
ANSWERS = {"short": ("ok+words:10", 60), "long": ("ok+words:200", 20)}
"""Answer length: the fake's behaviour (chunks = ~10 + words) and the calls per run."""


def tree_env(engine: Path) -> dict[str, str]:
    env = as_installed(dict(os.environ), engine / "steplog")
    env["PYTHONPATH"] = os.pathsep.join([str(engine), str(ROOT / "tests"), str(HERE)])
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(OPENAI_API_KEY="sk-bench-0000000000000000")
    return {k: v for k, v in env.items() if not k.startswith("STEPLOG_") or k == "STEPLOG_BENCH"}


def drive(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE / "stream_driver.py"), *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def fakes() -> Iterator[dict[str, str]]:
    """One fake server process per answer length; their base URLs."""
    procs, urls = [], {}
    env = tree_env(ROOT / "engine")
    for name, (behaviour, _n) in ANSWERS.items():
        proc = subprocess.Popen(
            [sys.executable, "-m", "helpers.openai_server", behaviour],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        urls[name] = proc.stdout.readline().strip()
    yield urls
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.fixture
def main_engine(tmp_path: Path) -> Path:
    """main's ``engine/`` folder, as committed (the baseline of the no-op figure)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "main", "engine"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path / "main", filter="data")
    return tmp_path / "main" / "engine"


def med(values: list[float]) -> str:
    return f"{statistics.median(values):,.2f} ({min(values):,.2f}-{max(values):,.2f})"


@pytest.mark.timeout(3600)
def test_what_streaming_costs(tmp_path: Path, fakes: dict[str, str], main_engine: Path) -> None:
    here, main = tree_env(ROOT / "engine"), tree_env(main_engine)
    steps: dict[str, list[float]] = {"main": [], "branch": []}
    cpu_step: dict[str, list[float]] = {"main": [], "branch": []}
    cpu_call: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    for r in range(ROUNDS):
        for name, env in (("main", main), ("branch", here)):
            got = drive(env, "noop", str(NOOP_STEPS), str(tmp_path / f"noop-{name}-{r}.db"))
            steps[name].append(NOOP_STEPS / got["elapsed"])
            cpu_step[name].append(got["cpu"] / NOOP_STEPS * 1e6)
        for answer, (_behaviour, n) in ANSWERS.items():
            hows = ("off", "on", "per-chunk") if answer == "long" else ("off", "on")
            per: dict[str, float] = {}
            for how in hows:
                db = tmp_path / f"chat-{answer}-{how}-{r}.db"
                got = drive(here, "chat", str(n), str(db), fakes[answer], how)
                per[how] = got["cpu"] / n * 1e3
                cpu_call.setdefault(f"{answer} {how}", []).append(per[how])
            for how in hows[1:]:
                ratios.setdefault(f"{answer} {how}", []).append(per[how] / per["off"])
    ratio_steps = [b / m for b, m in zip(steps["branch"], steps["main"], strict=True)]
    lines = [
        f"\nstreaming's cost, {ROUNDS} rounds, median (min-max); load {os.getloadavg()[0]:.1f}",
        f"no-op steps/s (FULL), nothing streamed:   main {med(steps['main'])}   "
        f"branch {med(steps['branch'])}   branch/main {med(ratio_steps)}",
        f"CPU us per no-op step:                    main {med(cpu_step['main'])}   "
        f"branch {med(cpu_step['branch'])}",
    ]
    for key, values in cpu_call.items():
        ratio = f"   / unstreamed {med(ratios[key])}" if key in ratios else ""
        lines.append(f"CPU ms per model call, {key:<16} {med(values)}{ratio}")
    print("\n".join(lines))
    record("stream_steps_vs_main", statistics.median(ratio_steps))
    record("stream_short_cpu_vs_unstreamed", statistics.median(ratios["short on"]))
    record("stream_long_cpu_vs_unstreamed", statistics.median(ratios["long on"]))
