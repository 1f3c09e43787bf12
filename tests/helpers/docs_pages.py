"""The documentation as a reader meets it: ``README.md`` and ``docs/*.md``, their fenced blocks and
their links, and :class:`Reader`, a person who types a page's blocks into a terminal in order.

Conventions the pages follow, so that every block can be run as printed:

- A shell block (a fence with no language) is typed line by line in one ``bash``, in the page's
  folder, with ``steplog`` on ``PATH`` (this checkout's). A line ending in ``&`` runs in the
  background (after ``steplog outbox ... &`` the reader waits until it listens, as a person reads
  its "listening on" line). Every other line must exit 0, unless its comment starts with
  ``exit N``. Port 8000 is replaced by a free port, a ``postgresql://`` URL by a fresh database.
- A ``python`` block is an agent file (it defines ``@steplog.agent`` and has no ``__main__``),
  saved under the name the prose after it gives ("Save it as `NAME`"), a pytest file (it defines
  ``test_`` functions), run with pytest, or else a script run with ``python``. A top-level
  ``print(...)`` whose line ends in a comment prints that comment.
- A ``json`` block is the output of the last command of the shell block before it: its keys
  must be keys of the real output (nested objects too; a list by its first item).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(.*)$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """Every page of the documentation: the README first, then ``docs/`` by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    """The page as the repository names it (``docs/effects.md``)."""
    return page.relative_to(ROOT).as_posix() if ROOT in page.parents else page.name


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int
    """The line of its opening fence (1-based)."""
    info: str
    """The fence's language: ``python``, ``json`` or empty (a shell block)."""
    text: str
    after: str
    """The prose between this block and the next one: what the page says of it."""

    @property
    def where(self) -> str:
        return f"{page_name(self.page)}:{self.line}"

    @property
    def kind(self) -> str:
        """``shell``, ``json``, ``agent`` (a file to save), ``pytest`` (a test file), ``script``."""
        if self.info == "python":
            if re.search(r"^def test_", self.text, re.MULTILINE):
                return "pytest"
            if "@steplog.agent" in self.text and "__main__" not in self.text:
                return "agent"
            return "script"
        return self.info or "shell"

    def saved_as(self) -> str | None:
        """The file name the page tells the reader to save this block as, if it does."""
        found = re.search(r"Save it as `([^`]+)`", self.after)
        return found.group(1) if found else None


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order."""
    lines = page.read_text().splitlines()
    spans: list[tuple[int, str, str, int]] = []  # opening line, info, text, closing index
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened:
            start, body = i, []
            i += 1
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"{page_name(page)}:{start + 1}: a fence that is never closed"
            spans.append((start + 1, opened.group(1).strip(), "\n".join(body) + "\n", i))
        i += 1
    found = []
    for n, (line, info, text, end) in enumerate(spans):
        following = spans[n + 1][0] - 1 if n + 1 < len(spans) else len(lines)
        found.append(Block(page, line, info, text, "\n".join(lines[end + 1 : following])))
    return found


def block_containing(page: Path, text: str) -> Block:
    """The one block of ``page`` that contains ``text``."""
    found = [b for b in blocks(page) if text in b.text]
    assert len(found) == 1, f"{page_name(page)}: {len(found)} blocks contain {text!r}"
    return found[0]


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of every line outside fenced blocks, inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"`[^`]*`", "", line)))
    return out


def links(page: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every Markdown link and image outside code."""
    return [(n, m.group(1)) for n, text in prose_lines(page) for m in LINK.finditer(text)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page`` (a repeated heading gets ``-1``, ``-2``... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


@dataclass(frozen=True)
class Command:
    """One line of a shell block."""

    text: str
    """What bash runs: the line without its comment and without a trailing ``&``."""
    comment: str
    background: bool
    expected: int | None
    """The exit code the page promises (``# exit N``, else 0); ``None`` in the background."""


def split_comment(line: str) -> tuple[str, str]:
    """``(command, comment)``: a ``#`` after a space and outside quotes starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def commands(block: Block) -> list[Command]:
    out = []
    for raw in block.text.splitlines():
        if not raw.strip():
            continue
        text, comment = split_comment(raw)
        assert not text.endswith("\\"), f"{block.where}: one command per line, please"
        background = text.endswith("&") and not text.endswith("&&")
        if background:
            text = text[:-1].rstrip()
        promised = re.match(r"exit (\d+)\b", comment)
        expected = None if background else int(promised.group(1)) if promised else 0
        out.append(Command(text, comment, background, expected))
    return out


def printed(block: Block) -> list[str]:
    """What the block's ``print(...)`` calls say they print: the comment ending each call."""
    comments = {
        tok.start[0]: tok.string[1:].strip()
        for tok in tokenize.generate_tokens(io.StringIO(block.text).readline)
        if tok.type == tokenize.COMMENT
    }
    calls = [
        node
        for node in ast.walk(ast.parse(block.text))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "print"
    ]
    ends = sorted(c.end_lineno for c in calls if c.end_lineno is not None)
    return [comments[n] for n in ends if n in comments]


def missing_keys(documented: Any, real: Any, path: str = "$") -> list[str]:
    """The keys of ``documented`` (JSON) that ``real`` lacks, as paths; a list by its first item."""
    if isinstance(documented, dict):
        if not isinstance(real, dict):
            return [f"{path} is {type(real).__name__}, not an object"]
        out = [f"{path}.{k}" for k in documented if k not in real]
        for k in documented:
            if k in real:
                out += missing_keys(documented[k], real[k], f"{path}.{k}")
        return out
    if isinstance(documented, list) and documented:
        if not isinstance(real, list):
            return [f"{path} is {type(real).__name__}, not a list"]
        return missing_keys(documented[0], real[0], f"{path}[0]") if real else []
    return []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Line:
    """What one command of a shell block did (``returncode`` is ``None`` in the background)."""

    command: str
    returncode: int | None
    stdout: str
    stderr: str
    expected: int | None


class Reader:
    """A person following a page in a terminal: one folder, one log (``$STEPLOG_DB``), one user
    data directory, ``steplog`` on ``PATH`` (this checkout's, through a shim)."""

    def __init__(
        self, folder: Path, env: Mapping[str, str], db: Path | str, *, postgres: str | None = None
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        shim = folder / ".bin" / "steplog"
        shim.parent.mkdir(exist_ok=True)
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m steplog "$@"\n')
        shim.chmod(0o755)
        self.env = {
            **env,
            "STEPLOG_DB": str(db),
            "XDG_DATA_HOME": str(folder / ".xdg"),
            "PATH": f"{shim.parent}{os.pathsep}{env.get('PATH', os.environ.get('PATH', ''))}",
        }
        self.port = free_port()
        self.postgres = postgres
        self.last: Line | None = None
        """The last foreground command of the last shell block: what a ``json`` block shows."""

    def adapt(self, text: str) -> str:
        """The command as typed here: port 8000 a free port, a PostgreSQL URL a fresh database."""
        text = re.sub(r"(?<=127\.0\.0\.1:)8000\b|(?<=--port )8000\b", str(self.port), text)
        if self.postgres is not None:
            text = re.sub(r"postgresql://[^\s'\"]+", self.postgres, text)
        return text

    def save(self, block: Block, name: str | None = None) -> Path:
        path = self.folder / (name or block.saved_as() or f"block_{block.line}.py")
        path.write_text(block.text)
        return path

    def python(self, block: Block, *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a script block with ``python``, or a pytest block with ``python -m pytest``."""
        path = self.save(block, None if block.kind != "pytest" else f"test_block_{block.line}.py")
        argv = [sys.executable, str(path)]
        if block.kind == "pytest":
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path.name]
        return subprocess.run(
            argv,
            check=False,
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )

    def shell(self, block: Block, *, timeout: float = 900) -> list[Line]:
        """Type the block's lines into one ``bash``; what each did. Whatever it left running in
        the background (an outbox) is ended with its process group afterwards."""
        cmds = commands(block)
        work = self.folder / ".shell" / str(block.line)
        work.mkdir(parents=True, exist_ok=True)
        codes = work / "codes"
        script = [f"exec 3>{shlex.quote(str(codes))}"]
        for n, c in enumerate(cmds):
            out, err = (shlex.quote(str(work / f"{n}.{s}")) for s in ("out", "err"))
            text = self.adapt(c.text)
            if c.background:
                script.append(f"{text} >{out} 2>{err} &")
                if re.match(r"steplog outbox\b", c.text):
                    script.append(
                        f"for _ in $(seq 1 300); do (exec 9<>/dev/tcp/127.0.0.1/{self.port})"
                        " 2>/dev/null && break; sleep 0.05; done"
                    )
            else:
                script.append(f'{{ {text}\n}} >{out} 2>{err}\necho "{n} $?" >&3')
        shell = subprocess.Popen(
            ["bash", "-c", "\n".join(script)],
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            shell.wait(timeout=timeout)
        finally:
            end_group(shell.pid)
        returned = dict(ln.split() for ln in codes.read_text().splitlines())
        lines = []
        for n, c in enumerate(cmds):
            code = returned.get(str(n))
            lines.append(
                Line(
                    c.text,
                    None if code is None else int(code),
                    read(work / f"{n}.out"),
                    read(work / f"{n}.err"),
                    c.expected,
                )
            )
        foreground = [ln for ln in lines if ln.expected is not None]
        self.last = foreground[-1] if foreground else None
        return lines


def read(path: Path) -> str:
    """A command's output file; empty if it never opened it (killed before its redirection)."""
    return path.read_text() if path.exists() else ""


def end_group(pgid: int, grace: float = 10) -> None:
    """SIGTERM the process group, wait for it to go, SIGKILL what is left after ``grace`` s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def json_output(line: Line) -> Any:
    """The command's standard output as JSON (what a ``json`` block documents)."""
    return json.loads(line.stdout)
