"""The documentation runs as printed: every code block of README.md and docs/*.md is run by a
reader (``helpers.docs_pages``) or listed in ``ILLUSTRATIVE`` with the reason; every relative
link leads to a file and heading that exist; the pages name only public Python names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import steplog
from helpers.docs_pages import (
    DOCS,
    README,
    ROOT,
    Block,
    Reader,
    anchors,
    block_containing,
    blocks,
    links,
    missing_keys,
    page_name,
    pages,
    printed,
)
from helpers.engine import Engine

ILLUSTRATIVE: dict[tuple[str, str], str] = {
    (
        "docs/versions.md",
        "steplog: step 2: recorded",
    ): "the line the refused run above prints on stderr; tests/engine/runtime/test_versions.py "
    "checks such a line word for word",
    (
        "docs/versions.md",
        "blocked: blocked for the code of worker",
    ): "the runs list during a deploy; tests/engine/control/test_worker_versions.py runs two "
    "fleets on two versions",
    (
        "docs/versions.md",
        "steplog killtest refund_v1.py:refund --upgrade",
    ): "a synopsis (this agent waits for a person); tests/engine/killtest/"
    "test_killtest_upgrade.py runs the upgrade test",
    (
        "docs/streams.md",
        "def summarise(run, text):",
    ): "an agent to read, not a run: tests/engine/runtime/test_streams.py runs its like",
    (
        "docs/streams.md",
        "steplog stream RUN_ID [--name",
    ): "a synopsis of the command, not a command",
    (
        "docs/streams.md",
        'steplog.read_stream("r1"',
    ): "reads a run named r1 that the page never made; test_streams.py reads real runs so",
    (
        "README.md",
        "pip install -e . && steplog demo",
    ): "installs the package and opens a desktop window; tests/gui run the demo in the monitor",
    (
        "README.md",
        'pip install -e ".[test]" && python -m pytest',
    ): "the test command itself: .ci/run runs it as written (tests/packaging/test_ci_workflow.py)",
    (
        "docs/kill-test.md",
        "my_pkg.agent:main",
    ): "the README's three lines with a placeholder agent; the README's own lines are run",
    ("docs/effects.md", "steplog outbox [--host"): "a synopsis of the command, not a command",
    (
        "docs/run-control.md",
        "steplog cancel run-17 run-18",
    ): "runs the page never made; tests/engine/control/test_bulk_actions.py acts on many real runs",
    (
        "docs/monitor.md",
        "steplog demo --compare --approve",
    ): "opens desktop windows; tests/gui drive the monitor and compare mode offscreen",
    (
        "docs/run-control.md",
        "steplog killtest AGENT --workers",
    ): "a synopsis of every command, not commands",
    (
        "docs/postgres-and-workers.md",
        'pip install -e ".[postgres]"',
    ): "an install and a server elsewhere (db.example); the first block of the page runs the "
    "same commands on the test server",
    (
        "docs/packaging.md",
        'pip install ".[package]"',
    ): "builds the desktop app (61-95 s, 238 MiB): STEPLOG_BUILD_BUNDLE=1 python -m pytest "
    "tests/packaging builds and smoke-tests it",
    (
        "docs/architecture.md",
        "steplog (the engine, no Qt)",
    ): "a picture of the layers; tests/engine/test_the_house.py holds it to the contracts",
    (
        "docs/anthropic.md",
        'pip install "steplog[anthropic]"',
    ): "needs a real Anthropic key and spends money; tests/engine/llm/test_anthropic.py runs "
    "the same command against a fake Messages API",
    (
        "docs/benchmarks.md",
        "python tests/benchmarks/compare.py",
    ): "benchmarks take minutes and install the peers; never part of the test run, by design",
}
"""Blocks no test runs, and why: (page, text that only that block of the page contains)."""

SLOW_PAGES = {"README.md": "three kill tests, one with a sweep of every crash point: ~2 minutes"}

NOT_MODULES = {
    "db": "the log's file name, steplog.db",
    "app": "the macOS bundle, dist/steplog.app",
    "desktop": "the Linux menu entry, steplog.desktop",
    "svg": "the icon, resources/steplog.svg",
    "takeover": "a span attribute",
    "previous_pid": "a span attribute",
    "killed_at": "a span attribute",
}
"""Words after ``steplog.`` in the pages that are not Python names, and what they are."""


def why_illustrative(block: Block) -> str | None:
    for (page, text), why in ILLUSTRATIVE.items():
        if page == page_name(block.page) and text in block.text:
            return why
    return None


def runnable_pages() -> list[object]:
    out: list[object] = []
    for page in pages():
        if not any(why_illustrative(b) is None for b in blocks(page)):
            continue
        name = page_name(page)
        marks = [pytest.mark.slow, pytest.mark.timeout(900)] if name in SLOW_PAGES else []
        out.append(pytest.param(page, id=name, marks=marks))
    return out


def test_every_block_is_run_or_said_to_be_illustrative() -> None:
    for (name, text), why in ILLUSTRATIVE.items():
        matching = [b for b in blocks(ROOT / name) if text in b.text]
        assert len(matching) == 1, (
            f"ILLUSTRATIVE {name} {text!r} ({why}) matches {len(matching)} blocks"
        )
    for page in pages():
        runnable = [b for b in blocks(page) if why_illustrative(b) is None]
        for n, b in enumerate(runnable):
            assert b.kind in ("shell", "json", "agent", "script", "pytest"), f"{b.where}: {b.info}?"
            if b.kind == "agent":
                saved = b.saved_as()
                assert saved, f"{b.where}: an agent file; say 'Save it as `NAME.py`' after it"
                users = [o for o in runnable if o is not b and saved in o.text]
                assert users, f"{b.where}: no block of the page runs {saved}"
            if b.kind == "json":
                earlier = [o for o in runnable[:n] if o.kind != "json"]
                assert earlier and earlier[-1].kind == "shell", (
                    f"{b.where}: a JSON block shows the output of the shell block before it"
                )


@pytest.mark.parametrize("page", runnable_pages())
def test_the_page_runs_as_printed(
    page: Path, engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A reader types the page's blocks in order, in one folder with one log: every command
    exits as the page says, every script prints what it says, every JSON block's keys are real."""
    todo = [b for b in blocks(page) if why_illustrative(b) is None]
    postgres = None
    if any("postgresql://" in b.text for b in todo if b.kind == "shell"):
        postgres = str(request.getfixturevalue("postgres_db"))
    reader = Reader(tmp_path / "reader", engine.env, engine.db, postgres=postgres)
    for b in todo:
        if b.kind == "agent":
            reader.save(b)
        elif b.kind == "shell":
            for line in reader.shell(b):
                if line.expected is not None:
                    assert line.returncode == line.expected, (
                        f"{b.where}: `{line.command}` exited {line.returncode}, the page says "
                        f"{line.expected}\n{line.stdout}\n{line.stderr}"
                    )
        elif b.kind in ("script", "pytest"):
            done = reader.python(b)
            assert done.returncode == 0, f"{b.where}:\n{done.stdout}\n{done.stderr}"
            said = printed(b)
            if b.kind == "script" and said:
                assert done.stdout.splitlines() == said, f"{b.where}: prints\n{done.stdout}"
        elif b.kind == "json":
            assert reader.last is not None
            real = json.loads(reader.last.stdout)
            missing = missing_keys(json.loads(b.text), real)
            assert not missing, f"{b.where}: `{reader.last.command}` has no {missing}"


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    for page in pages():
        for line, target in links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            where = f"{page_name(page)}:{line}"
            goal = (page.parent / path).resolve() if path else page
            assert goal.exists(), f"{where}: {target} leads nowhere"
            assert ROOT in goal.parents, f"{where}: {target} leaves the repository"
            if anchor:
                assert goal.suffix == ".md", f"{where}: an anchor into {goal.name}"
                assert anchor in anchors(goal), f"{where}: {goal.name} has no heading #{anchor}"


def test_the_readme_is_the_front_door() -> None:
    """A page a newcomer reads in five minutes: the screenshot at the top, the two set-up
    commands, and a link to every page of docs/ (which docs/README.md lists too)."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "](resources/monitor-compare.png)" in text[:2000]
    assert re.search(r"^pip install -e \. && steplog demo$", text, re.MULTILINE)
    assert re.search(r'^pip install -e "\.\[test\]" && python -m pytest$', text, re.MULTILINE)
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "README.md":
            assert f"](docs/{page.name})" in text, f"the README does not link {page.name}"
            assert f"]({page.name})" in (DOCS / "README.md").read_text(), page.name
    assert "](docs/README.md)" in text


def test_the_pages_name_only_public_python_names() -> None:
    """A reader can use what the pages name: ``steplog.X`` is in ``steplog.__all__`` (or the
    built-in agents' package), never a private module, and no file path inside the package."""
    public = set(steplog.__all__) | {"agents"}
    for page in pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for name in re.findall(r"\bsteplog\.([A-Za-z_]\w*)", line):
                assert name in public or name in NOT_MODULES, (
                    f"{page_name(page)}:{n}: steplog.{name} is not a public name"
                )
            assert not re.search(r"steplog(_gui)?/[a-z_/]+\.py", line), (
                f"{page_name(page)}:{n}: a module's path; name what it does instead"
            )


# The pages' commands, checked more closely than "exits as the page says".


def test_the_run_control_commands_do_what_the_page_says(engine: Engine, tmp_path: Path) -> None:
    block = block_containing(DOCS / "run-control.md", "steplog signal ask approve")
    lines = Reader(tmp_path, engine.env, engine.db).shell(block)
    first, sent, carried_on, forked, cancelled = [ln for ln in lines if ln.expected is not None]
    assert first.returncode == 6 and "waiting for signal 'approve'" in first.stdout, first.stderr
    assert sent.returncode == 0 and "signal 'approve' sent to run ask" in sent.stdout, sent.stderr
    assert carried_on.returncode == 0 and '"digest": "approved"' in carried_on.stdout, (
        carried_on.stderr
    )
    assert forked.returncode == 6 and forked.stdout.startswith("ask-2\n"), forked.stderr
    assert "5 step(s) copied" in forked.stderr
    assert (
        cancelled.returncode == 0
        and "run ask-2 cancelled (one digest is enough)" in cancelled.stdout
    )
    fork = engine.status("ask-2")
    assert fork["forked_from"] == {"run_id": "ask", "at_step": 6} and fork["status"] == "cancelled"
    # The fork sent T-1002's reply as its own (a new key), and no digest: it was cancelled waiting.
    sent_keys = engine.query("SELECT key FROM effect WHERE run_id = 'ask-2' AND kind = 'http_post'")
    assert sent_keys == [("ask-2:8",)]


def test_the_async_example_runs_as_written(engine: Engine, tmp_path: Path) -> None:
    page = DOCS / "writing-agents.md"
    reader = Reader(tmp_path, engine.env, engine.db)
    reader.save(block_containing(page, "async def weather"))
    (line,) = reader.shell(block_containing(page, "steplog run weather.py:weather"))
    assert line.returncode == 0, line.stderr
    assert 'succeeded: {"hottest": "Pune"}' in line.stdout
    workdir = Path(engine.status("w1")["workdir"])
    assert sorted(p.name for p in (workdir / "notes").iterdir()) == [
        "Lima.md",
        "Oslo.md",
        "Pune.md",
    ]


def test_a_reader_types_lines_as_printed_and_is_held_to_the_exit_codes_promised(
    engine: Engine, tmp_path: Path
) -> None:
    """The reader itself: a comment ``exit N`` is a promise, ``&`` runs in the background, and a
    line sees what the lines before it left (the shell's ``$!``, files)."""
    page = tmp_path / "page.md"
    page.write_text(
        "```\nsleep 30 &\nkill -9 $! && echo killed > note.txt\n"
        "steplog status nobody   # exit 2: no such run\ncat note.txt\n```\n"
    )
    (b,) = blocks(page)
    lines = Reader(tmp_path / "r", engine.env, engine.db).shell(b)
    assert [(ln.returncode, ln.expected) for ln in lines] == [(None, None), (0, 0), (2, 2), (0, 0)]
    assert lines[3].stdout == "killed\n"
    assert "does not exist" in lines[2].stderr
