"""The test suite's own layout: it mirrors the packages' (``tests/engine/log`` tests
``steplog.log``, ``tests/gui/timeline`` tests ``steplog_gui.timeline``); what one test file needs
from another comes from the ``helpers`` package, never from a test module or a ``conftest.py``; a
``conftest.py`` holds fixtures and pytest hooks only, and fixtures live nowhere else but in the
test module that uses them; every test module's name is unique (pytest imports them by
basename)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from helpers.paths import ROOT, TESTS


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an ``import`` or ``from ... import`` names, at any
    depth (an import inside a function counts too)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
    return out


def is_test_module_or_conftest(dotted: str) -> bool:
    return any(part == "conftest" or part.startswith("test_") for part in dotted.split("."))


def is_fixture(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("pytest.fixture", "fixture"):
            return True
    return False


def test_no_file_imports_a_test_module_or_a_conftest() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}: imports {name}"
        for path in python_files()
        for line, name in imported_modules(ast.parse(path.read_text(), str(path)))
        if is_test_module_or_conftest(name)
    ]
    assert found == [], "shared helpers belong in tests/helpers:\n" + "\n".join(found)


def test_a_conftest_holds_fixtures_and_hooks_only() -> None:
    found = []
    for path in python_files():
        if path.name != "conftest.py":
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            name = getattr(node, "name", None)
            if isinstance(node, ast.ClassDef):
                found.append(f"{path.relative_to(TESTS)}: class {name}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if not (is_fixture(node) or node.name.startswith("pytest_")):  # type: ignore[arg-type]
                    found.append(f"{path.relative_to(TESTS)}: def {name}")
    assert found == [], "move these to tests/helpers:\n" + "\n".join(found)


def test_fixtures_are_defined_in_conftest_or_in_the_test_module_that_uses_them() -> None:
    """A fixture in a helper module must be imported by name to be used, which shadows it
    (ruff F811) and hides where it comes from; a ``conftest.py`` offers it to every test below."""
    found = [
        f"{path.relative_to(TESTS)}: {node.name}"
        for path in python_files()
        if path.name != "conftest.py" and not path.name.startswith("test_")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef) and is_fixture(node)
    ]
    assert found == [], "move these fixtures to a conftest.py:\n" + "\n".join(found)


def test_every_test_module_name_is_unique() -> None:
    """No ``__init__.py`` in the test folders: pytest imports each test module by its basename
    (``rootdir``/prepend import mode), so two of one name would collide."""
    names = Counter(p.name for p in python_files() if p.name.startswith("test_"))
    assert [n for n, count in names.items() if count > 1] == []


@pytest.mark.parametrize(
    ("tests", "package"),
    [("engine", ROOT / "engine" / "steplog"), ("gui", ROOT / "gui" / "steplog_gui")],
)
def test_the_suite_mirrors_the_packages_rooms(tests: str, package: Path) -> None:
    """Each folder of ``tests/engine`` and ``tests/gui`` is named for the room (subpackage) it
    tests; a test that spans rooms (architecture, end to end) sits in ``tests/engine`` or
    ``tests/gui`` itself."""
    rooms = {d.name for d in package.iterdir() if (d / "__init__.py").is_file()}
    folders = {d.name for d in (TESTS / tests).iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert folders - rooms == set(), f"tests/{tests} folders that name no room of {package.name}"
    assert folders, f"tests/{tests} is one flat floor"
