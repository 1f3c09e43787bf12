"""One measurement of ``test_stream_bench.py`` in a process of its own: one JSON object on stdout.

    python stream_driver.py noop N DB                  N no-op steps (whichever steplog is first
                                                       on PYTHONPATH: this tree's or main's)
    python stream_driver.py chat N DB BASE_URL on|off|per-chunk [--profile FILE]

``chat``: N model calls against the fake server at ``BASE_URL`` (its own process, so its CPU is
not counted), streamed (``on``), unstreamed (``off``), or streamed the way it was before pieces
were merged (``per-chunk``: each piece its own JSON-encoded entry, ``StepContext.emit``). The
process's CPU (every thread: the engine's, the stream writer's, the SDK's) and wall time of the
run are measured around ``execute``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import steplog

BUDGET = steplog.Budget(max_steps=10_000_000, max_retries=None, max_recoveries=None)


@steplog.agent(budget=BUDGET)
def noop(run: steplog.Run, n: int = 1000) -> int:
    for i in range(n):
        run.step("noop", int, i)
    return n


@steplog.agent(budget=BUDGET)
def asks(run: steplog.Run, n: int = 10, stream: bool = True) -> int:
    for i in range(n):
        run.chat(
            [{"role": "user", "content": f"Say something about item {i}."}],
            name="ask",
            max_tokens=4096,
            stream=stream,
        )
    return n


def main(argv: list[str]) -> dict[str, Any]:
    from steplog.runtime.engine import execute

    mode, n, db = argv[0], int(argv[1]), Path(argv[2])
    kwargs: dict[str, Any] = {}
    if mode == "noop":
        agent: Any = noop
        params: dict[str, Any] = {"n": n}
    else:
        agent, base_url, how = asks, argv[3], argv[4]
        params = {"n": n, "stream": how != "off"}
        kwargs = {"model": "gpt-4o-mini", "base_url": base_url}
        import steplog.llm.openai_compat  # noqa: F401  (the SDK's import is not the call's cost)

        if how == "per-chunk":
            from steplog.runtime.run import StepContext

            StepContext.emit_text = lambda self, text: self.emit(text, "tokens")  # type: ignore[method-assign]
    profile = argv[argv.index("--profile") + 1] if "--profile" in argv else None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t, cpu = time.perf_counter(), time.process_time()
    execute(agent, run_id="bench", db=db, params=params, **kwargs)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    if profile:
        profiler.disable()
        profiler.dump_stats(profile)
    return {"elapsed": elapsed, "cpu": cpu, "n": n}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
