"""The layout shows the architecture: a folder is a layer, few modules on each top floor, and
docs/architecture.md draws the same layers that import-linter holds."""

from __future__ import annotations

import re
import tomllib

import pytest

from helpers.paths import ROOT

PACKAGES = {"steplog": ROOT / "engine" / "steplog", "steplog_gui": ROOT / "gui" / "steplog_gui"}
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_contracts() -> dict[str, list[list[str]]]:
    """Each package's layers contract, top first, each layer a list of its sibling names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    out: dict[str, list[list[str]]] = {}
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            layers = [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]
            out[layers[0][0].split(".")[0]] = layers
    return out


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_each_top_floor_holds_at_most_ten_modules(package: str) -> None:
    modules = sorted(p.name for p in PACKAGES[package].glob("*.py"))
    assert len(modules) <= 10, modules


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_room_is_a_layer_of_the_contract(package: str) -> None:
    """A new folder of code must be placed in the layers contract, or nothing holds it."""
    rooms = {
        f"{package}.{p.name}"
        for p in PACKAGES[package].iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    layered = {m for layer in layer_contracts()[package] for m in layer}
    assert rooms - layered == set(), "rooms outside the layers contract"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_architecture_page_draws_the_layers_in_the_contract_order(package: str) -> None:
    """Read down the picture's column for this package: the rooms appear in the order of the
    contract's layers, top first, so the page cannot fall behind a move."""
    picture = re.search(r"```\n(.*?)```", ARCHITECTURE.read_text(), re.S)
    assert picture is not None
    column = 0 if package == "steplog" else 1
    drawn: list[str] = []
    for line in picture.group(1).splitlines()[1:]:
        halves = [line[:47], line[47:]]
        names = re.findall(r"(?<![\w.])([a-z_]+)(?=\s|$)", halves[column].strip().split("  ")[0])
        drawn += [n for n in names if n not in drawn]
    order = [m.split(".", 1)[1] for layer in layer_contracts()[package] for m in layer]
    assert [n for n in drawn if n in order] == order


def test_the_architecture_page_names_every_module_it_places() -> None:
    """Every ``room/module.py`` the page names exists, so its sentences point at real code."""
    text = ARCHITECTURE.read_text()
    named = set(re.findall(r"`([a-z_]+/[a-z_]+\.py)`", text))
    missing = {n for n in named if not any((base / n).exists() for base in PACKAGES.values())}
    assert named and missing == set()
