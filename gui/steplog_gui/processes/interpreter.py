"""Which Python runs a person's own agent, and whether it can.

Built-in agents run on the monitor's own engine: this interpreter, or in the desktop app the
bundle's executable. A person's own agent imports *their* packages, which live in their
environment, so the monitor runs it with the interpreter they choose (remembered per agent, see
``Settings.interpreter_for``). That interpreter needs steplog installed (the agent's own
``import steplog`` needs it too); ``check`` finds out before a run starts, and whether the agent
imports there, and says what is wrong in one line with the fix.

The chosen interpreter gets the environment as it is: none of the monitor's own paths are added,
so its packages are never mixed with the monitor's (or the bundle's) compiled ones.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from steplog.control.procs import outside_env

PROBE_TIMEOUT_S = 30.0

# Runs in the chosen interpreter: any Python 3, so that an old one is told so, not a SyntaxError.
_PROBE = r"""
import json, sys
# As the engine runs (python -P): the working folder is not a package root.
sys.path[:] = [p for p in sys.path if p]
out = {"python": "%d.%d.%d" % sys.version_info[:3]}
if sys.version_info < (3, 11):
    out["problem"] = "old_python"
else:
    try:
        import steplog
    except Exception as exc:
        out["problem"], out["detail"] = "no_steplog", "%s: %s" % (type(exc).__name__, exc)
    else:
        try:
            from importlib.metadata import version
            out["steplog"] = version("steplog")
        except Exception:
            out["steplog"] = "unknown"
        if len(sys.argv) > 1 and sys.argv[1]:
            try:
                try:
                    from steplog.runtime.agent import resolve
                except ImportError:  # a steplog from before the engine's rooms
                    from steplog.agent import resolve
                resolve(sys.argv[1])
            except BaseException as exc:
                out["problem"], out["detail"] = "agent", str(exc)
print("STEPLOG-PROBE " + json.dumps(out))
"""


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str
    """One line: what was found (``ok``) or what is wrong and how to fix it."""
    python_version: str | None = None
    steplog_version: str | None = None


def canonical_agent(spec: str) -> str:
    """The spec as the engine records it in the run row (a file spec with its absolute path), so
    an interpreter remembered for a new run is found again when that run is resumed."""
    spec = spec.strip()
    where, sep, attr = spec.rpartition(":")
    if sep and (where.endswith(".py") or "/" in where or "\\" in where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def check(python: str, agent: str | None = None, *, timeout: float = PROBE_TIMEOUT_S) -> Check:
    """Can ``python`` run steplog, and ``agent`` (a spec) under it? Runs the interpreter once."""
    exe = Path(python).expanduser()
    if not exe.is_file():
        return Check(
            False, f"{python} does not exist; choose a Python interpreter (e.g. .venv/bin/python)"
        )
    if not os.access(exe, os.X_OK):
        return Check(
            False,
            f"{python} is not executable; choose a Python interpreter, not a script or folder",
        )
    try:
        done = subprocess.run(
            [str(exe), "-c", _PROBE, agent or ""],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=outside_env(),
        )
    except subprocess.TimeoutExpired:
        return Check(
            False, f"{python} did not answer within {timeout:.0f} s (importing the agent hung?)"
        )
    except OSError as exc:
        return Check(
            False, f"{python} could not be started ({exc.strerror}); choose a Python interpreter"
        )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("STEPLOG-PROBE ")), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(False, f"{python} is not a Python interpreter steplog can use ({last})")
    found = json.loads(line.removeprefix("STEPLOG-PROBE "))
    version, steplog_version = found.get("python"), found.get("steplog")
    problem, detail = found.get("problem"), found.get("detail", "")
    if problem == "old_python":
        return Check(False, f"{python} is Python {version}; steplog needs 3.11 or newer", version)
    if problem == "no_steplog":
        return Check(
            False,
            f"{python} (Python {version}) has no steplog ({detail}); install it there: "
            f"{python} -m pip install steplog",
            version,
        )
    if problem == "agent":
        return Check(
            False, f"the agent cannot be loaded with {python}: {detail}", version, steplog_version
        )
    what = f" and loads {agent}" if agent else ""
    return Check(
        True, f"Python {version} with steplog {steplog_version}{what}", version, steplog_version
    )
