"""steplog side by side with DBOS and LangGraph on SQLite: one command, one table.

    pip install -e ".[bench]" python tests/benchmarks/compare.py [--rounds 5] [--json results.json]
    [--figures steps,resume,length,postgres,monitor]

Every measurement runs in a fresh process (``peers.py`` for the peers and floors, the real
``steplog`` CLI for steplog's resumes), and peers take turns: A B C A B C ... for ``--rounds``
rounds, so a disk or CPU that is busier at one moment weighs on every peer alike. Each figure is
reported as the median and the min-max over the rounds; ratios compare steplog with each peer in
the same run. ``--json FILE`` writes every raw number.

Figures (issue 14):
- ``steps``: durable no-op steps/s (N = ``--n``) at synchronous FULL and NORMAL; the journal mode
  and synchronous each peer ran with, read back from its own connection; fsyncs per step (strace,
  when present; one traced run per peer and setting); bytes and rows per step in the file, the WAL
  folded back first (from the FULL runs).
- ``resume``: a 200-step run of 10 ms steps SIGKILLed (its process group) after ~1 s and started
  again at once: kill -> first new step committed, split into interpreter + imports / setup /
  recovery and first step; steps redone; result checked. Beside ``python -c pass`` and
  ``python -c "import steplog"``.
- ``length``: resume against log length: a run killed after L committed no-op steps, started
  again: imports done -> first new step committed (opening the log, loading and replaying the
  recorded steps, one new step), and the whole start -> first new step.
- ``postgres``: ``postgres_bench.py --figures steps,fleet`` on ``$STEPLOG_TEST_POSTGRES`` (the
  same rounds): steplog beside DBOS and the psycopg floor on one server, and the fleet 1 -> 4.
- ``monitor``: the monitor's own benchmarks (``test_gui_bench.py``: commit -> model latency,
  timeline frame time, opening a 100k-step run), run once, their printed lines kept as they are;
  then ``demo_startup.py --rounds 3`` (``steplog demo`` from a cold start: window, first step).

Table 0 puts every figure of issue 29 beside its target (``targets.py``): those measured here and
those the benchmarks it runs ``record()``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from peers import MARK_BEGIN, MARK_END, PEERS, RESUMABLE, as_installed, expected_result  # noqa: E402
from targets import FIGURES_ENV, print_targets, recorded  # noqa: E402

RESUME_STEPS = 200
RESUME_PAUSE = 0.01
RESUME_KILL_AFTER = 100  # bodies run (~1 s at 10 ms a step) before the kill


_ENV: dict[str, str] = {}


def env() -> dict[str, str]:
    """This checkout's steplog first, then the benchmark folder (the agents and workers), imported
    from bytecode as installed code is (compiled on the first call)."""
    if not _ENV:
        _ENV.update(as_installed(dict(os.environ), ROOT / "engine" / "steplog", HERE))
        _ENV["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "engine"), str(HERE), _ENV.get("PYTHONPATH", "")]
        )
        _ENV.pop("BENCH_KILL_AT", None)
    return dict(_ENV)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(s: dict[str, float] | None, scale: float = 1.0, digits: int = 0) -> str:
    if not s:
        return "-"
    f = f"{{:,.{digits}f}}"
    return (
        f"{f.format(s['median'] * scale)} "
        f"({f.format(s['min'] * scale)}-{f.format(s['max'] * scale)})"
    )


# -- figure 1: steps/s, pragmas, fsyncs, bytes and rows --------------------------------------


def run_worker(args: list[str], cwd: Path, prefix: Sequence[str] = ()) -> dict[str, Any]:
    done = subprocess.run(
        [*prefix, sys.executable, str(HERE / "peers.py"), *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"peers.py {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def fsyncs_per_step(peer: str, sync: str, n: int, tmp: Path) -> float | None:
    """fsync + fdatasync calls between the worker's two markers, per step (all threads)."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    trace = tmp / f"strace-{peer}-{sync}.txt"
    run_worker(
        [
            "steps",
            peer,
            "--db",
            str(tmp / f"strace-{peer}-{sync}.db"),
            "--n",
            str(n),
            "--sync",
            sync,
            "--markers",
        ],
        tmp,
        prefix=[
            strace,
            "-f",
            "-qq",
            "-o",
            str(trace),
            "-e",
            "trace=fsync,fdatasync,access,faccessat,faccessat2",
        ],
    )
    inside, count = False, 0
    for line in trace.read_text().splitlines():
        if MARK_BEGIN in line:
            inside = True
        elif MARK_END in line:
            inside = False
        elif inside and ("fsync(" in line or "fdatasync(" in line):
            count += 1
    return count / n


def figure_steps(
    peers: Sequence[str], rounds: int, n: int, tmp: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {p: [] for p in peers} for s in ("FULL", "NORMAL")
    }
    for r in range(rounds):
        for sync in ("FULL", "NORMAL"):
            for peer in peers:
                db = tmp / f"steps-{peer}-{sync}-{r}.db"
                raw[sync][peer].append(
                    run_worker(["steps", peer, "--db", str(db), "--n", str(n), "--sync", sync], tmp)
                )
        log(f"steps: round {r + 1}/{rounds} done")
    fsyncs = {
        s: {p: fsyncs_per_step(p, s, min(n, 200), tmp) for p in peers} for s in ("FULL", "NORMAL")
    }
    return {"n": n, "raw": raw, "fsyncs_per_step": fsyncs, "peers": summarise_steps(raw, n)}


def summarise_steps(raw: dict[str, dict[str, list[dict[str, Any]]]], n: int) -> dict[str, Any]:
    """Per peer: steps/s and CPU per step at each setting, what it ran with, bytes and rows."""
    out: dict[str, Any] = {}
    for peer, full in raw["FULL"].items():
        out[peer] = {
            **{
                f"steps_per_s_{s}": summary([n / x["elapsed"] for x in raw[s][peer]])
                for s in ("FULL", "NORMAL")
            },
            **{
                f"cpu_us_per_step_{s}": summary([x.get("cpu", 0.0) / n * 1e6 for x in raw[s][peer]])
                for s in ("FULL", "NORMAL")
            },
            **{
                f"ran_with_{s}": sorted(
                    {f"{x['journal_mode']}/{x['synchronous']}" for x in raw[s][peer]}
                )
                for s in ("FULL", "NORMAL")
            },
            "bytes_per_step": summary([(x["after"][0] - x["before"][0]) / n for x in full]),
            "rows_per_step": summary([(x["after"][1] - x["before"][1]) / n for x in full]),
        }
    return out


# -- figure 2: kill -> first new step --------------------------------------------------------


def launch(
    peer: str,
    db: Path,
    n: int,
    pause: float,
    bodylog: Path,
    marks: Path | None,
    *,
    kill_at: int = -1,
    sync: str = "FULL",
) -> subprocess.Popen[bytes]:
    e = env()
    if peer == "steplog":
        e.update(
            BENCH_BODYLOG=str(bodylog), BENCH_MARKS=str(marks or ""), BENCH_KILL_AT=str(kill_at)
        )
        argv = [
            sys.executable,
            "-m",
            "steplog",
            "run",
            f"{HERE / 'bench_agents.py'}:resumable",
            "--run-id",
            "r",
            "--db",
            str(db),
            "--param",
            f"n={n}",
            "--param",
            f"pause={pause}",
            "--sync",
            sync.lower(),
        ]
    else:
        argv = [
            sys.executable,
            str(HERE / "peers.py"),
            "run",
            peer,
            "--db",
            str(db),
            "--n",
            str(n),
            "--pause",
            str(pause),
            "--bodylog",
            str(bodylog),
            "--marks",
            str(marks or ""),
            "--kill-at",
            str(kill_at),
            "--sync",
            sync,
        ]
    return subprocess.Popen(
        argv,
        cwd=db.parent,
        env=e,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def lines(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def finish(proc: subprocess.Popen[bytes], what: str) -> None:
    _, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}: {err.decode()[-2000:]}")


def one_resume(peer: str, tmp: Path) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"resume-{peer}-", dir=tmp))
    db, bodylog, marks = d / "log.db", d / "bodies.txt", d / "marks.json"
    first = launch(peer, db, RESUME_STEPS, RESUME_PAUSE, bodylog, marks)
    deadline = time.monotonic() + 120
    while len(lines(bodylog)) < RESUME_KILL_AFTER:
        if first.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"{peer}: the first process ended or stalled before the kill: "
                f"{first.stderr.read()!r}"
            )  # type: ignore[union-attr]
        time.sleep(0.002)
    os.killpg(first.pid, signal.SIGKILL)
    t_kill = time.time()
    first.wait()
    second = launch(peer, db, RESUME_STEPS, RESUME_PAUSE, bodylog, marks)
    finish(second, f"{peer} resume")
    m = json.loads(marks.read_text())
    bodies = lines(bodylog)
    return {
        "imports": m["imports"] - t_kill,
        "setup": m["setup"] - m["imports"],
        "recovery": m["first"] - m["setup"],
        "total": m["first"] - t_kill,
        "redone": len(bodies) - RESUME_STEPS,
        "correct": m["result"] == expected_result(RESUME_STEPS)
        and sorted(set(bodies)) == list(range(RESUME_STEPS)),
    }


def floor(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env(), check=True)
    return time.perf_counter() - t


def figure_resume(
    peers: Sequence[str], rounds: int, tmp: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    names = ["python -c pass", "python -c 'import steplog'", *[p for p in peers if p in RESUMABLE]]
    raw: dict[str, list[Any]] = {k: [] for k in names}
    for r in range(rounds):
        raw["python -c pass"].append(floor("pass"))
        raw["python -c 'import steplog'"].append(floor("import steplog"))
        for peer in names[2:]:
            raw[peer].append(one_resume(peer, tmp))
        log(f"resume: round {r + 1}/{rounds} done")
    out: dict[str, Any] = {"raw": raw, "peers": {}}
    for name in names:
        if name.startswith("python"):
            out["peers"][name] = {"total": summary(raw[name])}
        else:
            rs = raw[name]
            out["peers"][name] = {
                k: summary([x[k] for x in rs])
                for k in ("imports", "setup", "recovery", "total", "redone")
            }
            out["peers"][name]["correct"] = all(x["correct"] for x in rs)
    return out


# -- figure 3: resume against log length -----------------------------------------------------


def prepare(peer: str, length: int, d: Path) -> Path:
    """A log holding ``length`` committed no-op steps of a run whose process was then killed."""
    db = d / f"prep-{peer}-{length}.db"
    proc = launch(
        peer,
        db,
        length + 1,
        0.0,
        Path(os.devnull),
        None,
        kill_at=length,
        sync="NORMAL" if peer == "steplog" else "OFF",
    )
    proc.communicate(timeout=3600)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"preparing {peer} at {length} steps: exit {proc.returncode}")
    return db


def copy_log(src: Path, dst: Path) -> None:
    for suffix in ("", "-wal", "-journal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")


def one_length(peer: str, prepared: Path, length: int, tmp: Path) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"length-{peer}-{length}-", dir=tmp))
    db, marks = d / "log.db", d / "marks.json"
    copy_log(prepared, db)
    t0 = time.time()
    proc = launch(peer, db, length + 1, 0.0, Path(os.devnull), marks)
    finish(proc, f"{peer} resume at {length}")
    m = json.loads(marks.read_text())
    return {
        "imports": m["imports"] - t0,
        "setup": m["setup"] - m["imports"],
        "recovery": m["first"] - m["setup"],
        "resume": m["first"] - m["imports"],
        "total": m["first"] - t0,
    }


def figure_length(
    peers: Sequence[str], rounds: int, lengths: Sequence[int], tmp: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    resumable = [p for p in peers if p in RESUMABLE]
    prep_dir = tmp / "prepared"
    prep_dir.mkdir(exist_ok=True)
    prepared, prep_seconds = {}, {}
    for length in lengths:
        for peer in resumable:
            t = time.perf_counter()
            prepared[(peer, length)] = prepare(peer, length, prep_dir)
            prep_seconds[f"{peer}@{length}"] = time.perf_counter() - t
            log(
                f"length: prepared {peer} at {length} steps in "
                f"{prep_seconds[f'{peer}@{length}']:.1f} s"
            )
    raw: dict[str, dict[str, list[Any]]] = {str(L): {p: [] for p in resumable} for L in lengths}
    for r in range(rounds):
        for length in lengths:
            for peer in resumable:
                raw[str(length)][peer].append(
                    one_length(peer, prepared[(peer, length)], length, tmp)
                )
        log(f"length: round {r + 1}/{rounds} done")
    table = {
        str(L): {
            p: {
                k: summary([x[k] for x in raw[str(L)][p]])
                for k in ("setup", "recovery", "resume", "total")
            }
            for p in resumable
        }
        for L in lengths
    }
    return {"raw": raw, "prepare_seconds": prep_seconds, "table": table}


# -- figure 6: the monitor ------------------------------------------------------------------


def figure_monitor(log: Callable[[str], None], tmp: Path) -> dict[str, Any]:
    """The monitor's own benchmarks (``test_gui_bench.py``), run once as they are, their printed
    figures kept verbatim and the ones with a target of issue 29 recorded (``targets.record``)."""
    log("monitor: running tests/benchmarks/test_gui_bench.py")
    figures_file = tmp / "monitor-figures.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            str(HERE / "test_gui_bench.py"),
        ],
        cwd=ROOT,
        env={**env(), "QT_QPA_PLATFORM": "offscreen", FIGURES_ENV: str(figures_file)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    figures = [
        line.strip(". ")
        for line in done.stdout.splitlines()
        if any(w in line for w in (" ms", " s ", " s,", " fps", "MB", "%"))
        and not line.startswith(("=", "FAILED", "ERROR"))
    ]
    log("monitor: running tests/benchmarks/demo_startup.py (steplog demo from a cold start)")
    demo = subprocess.run(
        [sys.executable, str(HERE / "demo_startup.py"), "--rounds", "3"],
        cwd=ROOT,
        env={**env(), FIGURES_ENV: str(figures_file)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    figures += [
        line.strip()
        for line in demo.stdout.splitlines()
        if line.startswith("  ") and ("window_painted" in line or "first_step_drawn" in line)
    ]
    return {
        "returncode": done.returncode,
        "demo_returncode": demo.returncode,
        "figures": figures,
        "tail": done.stdout.splitlines()[-3:],
        "recorded": recorded(figures_file),
    }


# -- figure 4: PostgreSQL ----------------------------------------------------------------------


def figure_postgres(rounds: int, n: int, tmp: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """``postgres_bench.py`` (steps and fleet) as it is, its raw numbers and printed table kept."""
    log("postgres: running tests/benchmarks/postgres_bench.py --figures steps,fleet")
    out = tmp / "postgres.json"
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "postgres_bench.py"),
            "--figures",
            "steps,fleet",
            "--rounds",
            str(rounds),
            "--n",
            str(n),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return {"results": json.loads(out.read_text()), "printed": done.stdout.rstrip().splitlines()}


# -- the table -------------------------------------------------------------------------------


def ratio(a: dict[str, float] | None, b: dict[str, float] | None) -> str:
    return f"{a['median'] / b['median']:.2f}x" if a and b and b["median"] else "-"


def cpu(p: dict[str, Any]) -> str:
    """CPU (user + system, all threads) per step, FULL/NORMAL: steadier than steps/s when other
    work on the machine makes fsync latency swing."""
    if "cpu_us_per_step_FULL" not in p:
        return "-"
    return f"{p['cpu_us_per_step_FULL']['median']:.0f}/{p['cpu_us_per_step_NORMAL']['median']:.0f}"


def print_tables(res: dict[str, Any], out: Callable[[str], None]) -> None:
    if "steps" in res:
        s = res["steps"]
        ps = s["peers"]
        out(
            f"\n1. Durable no-op steps/s, N = {s['n']}, median (min-max) of {res['rounds']} rounds;"
            " ratio = steplog / peer at the same setting"
        )
        out(
            f"{'peer':<16} {'FULL steps/s':>22} {'ratio':>7} {'NORMAL steps/s':>24} {'ratio':>7} "
            f"{'CPU us/step F/N':>16} {'ran with (FULL run)':>20} {'fsync/step F/N':>15} "
            f"{'bytes/step':>11} {'rows/step':>9}"
        )
        me = ps.get("steplog")
        for peer, p in ps.items():
            fs = s["fsyncs_per_step"]
            f_full, f_norm = fs["FULL"].get(peer), fs["NORMAL"].get(peer)
            fsync = "-" if f_full is None else f"{f_full:.2f}/{f_norm:.2f}"
            out(
                f"{peer:<16} {fmt(p['steps_per_s_FULL']):>22} "
                f"{ratio(me and me['steps_per_s_FULL'], p['steps_per_s_FULL']):>7} "
                f"{fmt(p['steps_per_s_NORMAL']):>24} "
                f"{ratio(me and me['steps_per_s_NORMAL'], p['steps_per_s_NORMAL']):>7} "
                f"{cpu(p):>16} {','.join(p['ran_with_FULL']):>20} {fsync:>15} "
                f"{p['bytes_per_step']['median']:>11,.0f} {p['rows_per_step']['median']:>9.2f}"
            )
    if "resume" in res:
        ps = res["resume"]["peers"]
        out(
            "\n"
            f"2. Resume: {RESUME_STEPS} steps of {RESUME_PAUSE * 1000:.0f} ms, SIGKILL after ~1 s, "
            "started again at once;"
            " ms, median (min-max); the first new step includes its 10 ms body"
        )
        out(
            f"{'':<28} {'interp.+imports':>18} {'setup':>14} {'recovery+1st step':>20} "
            f"{'kill->1st new step':>20} {'redone':>7} {'result':>7}"
        )
        for name, p in ps.items():
            if "imports" not in p:
                out(f"{name:<28} {'':>18} {'':>14} {'':>20} {fmt(p['total'], 1000):>20}")
                continue
            out(
                f"{name:<28} {fmt(p['imports'], 1000):>18} {fmt(p['setup'], 1000):>14} "
                f"{fmt(p['recovery'], 1000):>20} {fmt(p['total'], 1000):>20} "
                f"{p['redone']['median']:>7.0f} {'ok' if p['correct'] else 'WRONG':>7}"
            )
    if "length" in res:
        t = res["length"]["table"]
        peers = list(next(iter(t.values())).keys())
        out(
            "\n"
            "3. Resume against log length: imports done -> first new step committed (open, load, "
            "replay, one no-op step), ms; [whole start -> first new step]"
        )
        out(f"{'steps in log':>12} " + " ".join(f"{p:>30}" for p in peers))
        for length, row in t.items():
            out(
                f"{int(length):>12,} "
                + " ".join(
                    "{:>30}".format(
                        f"{fmt(row[p]['resume'], 1000)} [{row[p]['total']['median'] * 1000:,.0f}]"
                    )
                    for p in peers
                )
            )


def print_monitor(res: dict[str, Any], out: Callable[[str], None]) -> None:
    if "monitor" in res:
        m = res["monitor"]
        out(
            "\n6. The monitor (tests/benchmarks/test_gui_bench.py as it prints them"
            + (
                ""
                if m["returncode"] == 0
                else f"; pytest exit {m['returncode']}: {' / '.join(m['tail'])}"
            )
            + ")"
        )
        for line in m["figures"]:
            out(f"   {line}")


def machine() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for dist in ("dbos", "langgraph", "langgraph-checkpoint-sqlite", "sqlmodel", "SQLAlchemy"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="steplog beside DBOS and LangGraph; see the module docstring"
    )
    p.add_argument(
        "--rounds", type=int, default=5, help="rounds; each peer runs once per round (default 5)"
    )
    p.add_argument("--n", type=int, default=1000, help="steps per throughput run (default 1000)")
    p.add_argument("--lengths", default="100,1000,10000,100000", help="log lengths for figure 3")
    p.add_argument(
        "--figures",
        default="steps,resume,length,postgres,monitor",
        help="any of steps,resume,length,postgres,monitor",
    )
    p.add_argument("--peers", default=",".join(PEERS), help=f"any of {','.join(PEERS)}")
    p.add_argument("--json", type=Path, help="write every raw number to this file")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder of logs")
    p.add_argument(
        "--print",
        dest="print_file",
        type=Path,
        help="print the tables of an earlier --json file; run nothing",
    )
    a = p.parse_args(argv)
    if a.print_file is not None:
        return print_results(json.loads(a.print_file.read_text()))
    peers = [x for x in a.peers.split(",") if x]
    unknown = set(peers) - set(PEERS)
    figures = set(a.figures.split(","))
    known = {"steps", "resume", "length", "postgres", "monitor"}
    if unknown or not figures <= known or a.rounds < 1:
        print(
            f"compare.py: unknown peer(s) {sorted(unknown)} or figure(s) "
            f"{sorted(figures - known)}, or --rounds < 1; peers are {','.join(PEERS)}, figures "
            f"{','.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="steplog-bench-"))

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    res: dict[str, Any] = {"machine": machine(), "rounds": a.rounds}
    try:
        if "steps" in figures:
            res["steps"] = figure_steps(peers, a.rounds, a.n, tmp, log)
        if "resume" in figures:
            res["resume"] = figure_resume(peers, a.rounds, tmp, log)
        if "length" in figures:
            res["length"] = figure_length(
                peers, a.rounds, [int(x) for x in a.lengths.split(",")], tmp, log
            )
        if "postgres" in figures:
            res["postgres"] = figure_postgres(a.rounds, a.n, tmp, log)
        if "monitor" in figures:
            res["monitor"] = figure_monitor(log, tmp)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print_results(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
        print(f"\nraw numbers: {a.json}")
    return 0


def print_results(res: dict[str, Any]) -> int:
    if "steps" in res:  # summarised again: a file from an earlier version prints like a new one
        res["steps"]["peers"] = summarise_steps(res["steps"]["raw"], res["steps"]["n"])
    m = res["machine"]
    print(
        "\n"
        f"steplog vs peers — Python {m['python']}, SQLite {m['sqlite']}, {m['cpus']} CPUs, "
        f"{m['platform']}, {m['when']}; {', '.join(f'{k} {v}' for k, v in m['versions'].items())}"
    )
    measured, why = issue_29_figures(res)
    print_targets(measured, why, print)
    print_tables(res, print)
    if "postgres" in res:
        pg = res["postgres"]
        print("\n4. PostgreSQL (postgres_bench.py --figures steps,fleet as it prints them)")
        for line in pg.get("printed", [f"   failed: {pg.get('error')}"]):
            print(f"   {line}")
    print_monitor(res, print)
    return 0


def issue_29_figures(res: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """Issue 29's figures from this run's results (ratios within one run), and why any is not."""
    got: dict[str, float | None] = {}
    why: dict[str, str] = {}

    def median(d: dict[str, Any] | None, key: str) -> float | None:
        return d[key]["median"] if d and key in d and d[key]["median"] else None

    if "steps" in res:
        ps = res["steps"]["peers"]
        me = median(ps.get("steplog"), "steps_per_s_FULL")
        peers = [
            v
            for p, d in ps.items()
            if p not in ("steplog", "sqlite3", "sqlmodel")
            and (v := median(d, "steps_per_s_FULL")) is not None
        ]
        floor_ = median(ps.get("sqlite3"), "steps_per_s_FULL")
        if me and peers:
            got["steps_full_vs_fastest_peer"] = me / max(peers)
        if me and floor_:
            got["steps_full_vs_raw_floor"] = me / floor_
        mine, dbos = (
            median(ps.get("steplog"), "bytes_per_step"),
            median(ps.get("dbos"), "bytes_per_step"),
        )
        if mine and dbos:
            got["bytes_vs_dbos"] = mine / dbos
        for k in ("steps_full_vs_fastest_peer", "steps_full_vs_raw_floor", "bytes_vs_dbos"):
            why.setdefault(k, "needs steplog and the peers (--peers) in figure steps")
    if "resume" in res:
        ps = res["resume"]["peers"]
        me, imp = (
            median(ps.get("steplog"), "total"),
            median(ps.get("python -c 'import steplog'"), "total"),
        )
        if me and imp:
            got["relaunch_vs_import"] = me / imp
    if "postgres" in res:
        pg = res["postgres"].get("results")
        if pg is None:
            for k in ("pg_steps_vs_dbos", "pg_steps_vs_floor", "pg_fleet_4_vs_1"):
                why[k] = f"postgres_bench.py failed: {res['postgres'].get('error')}"
        else:
            table = pg.get("steps", {}).get("peers", {})

            def full(peer: str) -> float | None:
                runs = table.get(peer, {}).get("FULL", {}).get("steps_per_s")
                return statistics.median(runs) if runs else None

            me, dbos, floor_ = full("steplog-pg"), full("dbos-pg"), full("psycopg")
            if me and dbos:
                got["pg_steps_vs_dbos"] = me / dbos
            else:
                why["pg_steps_vs_dbos"] = "DBOS not installed (pip install -e '.[bench]')"
            if me and floor_:
                got["pg_steps_vs_floor"] = me / floor_
            fleet = pg.get("fleet", {}).get("table", {}).get("postgres", {})
            if "1" in fleet and "4" in fleet:
                got["pg_fleet_4_vs_1"] = (
                    fleet["4"]["FULL"]["steps_per_s"]["median"]
                    / fleet["1"]["FULL"]["steps_per_s"]["median"]
                )
    if "monitor" in res:
        got.update(res["monitor"].get("recorded", {}))
        for k in ("monitor_commit_to_pixel_p95_ms", "open_100k_s", "open_1m_s", "open_1m_mb"):
            why[k] = (
                f"test_gui_bench.py did not record it (pytest exit {res['monitor']['returncode']})"
            )
    for k in (
        "monitor_commit_to_pixel_p95_ms",
        "open_100k_s",
        "open_1m_s",
        "open_1m_mb",
        "resume_1m_s",
    ):
        why.setdefault(k, "in figure monitor (test_gui_bench.py)")
    if "monitor" in res:
        for k in ("demo_window_s", "demo_first_step_s"):
            why[k] = (
                f"demo_startup.py did not record it (exit {res['monitor'].get('demo_returncode')})"
            )
    for k in ("demo_window_s", "demo_first_step_s"):
        why.setdefault(k, "in figure monitor (demo_startup.py)")
    return got, why


if __name__ == "__main__":
    raise SystemExit(main())
