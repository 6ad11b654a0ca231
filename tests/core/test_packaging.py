"""What a wheel installs: every package of the source tree is listed in
pyproject.toml (an editable install finds an unlisted one in the checkout, a
wheel leaves it out), and nothing else."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_in_tree() -> set[str]:
    """Dotted names of the folders holding an __init__.py under graphc/ and the
    folders pyproject's package-dir maps into it."""
    roots = {"graphc": ROOT / "graphc"} | {name: ROOT / folder for name, folder in _config()["package-dir"].items()}
    out = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            out.add(".".join((name, *rel)))
    return out


def test_every_package_is_listed_for_the_wheel():
    assert set(_config()["packages"]) == _packages_in_tree()


def test_the_wheel_has_one_top_level_package():
    assert {p.split(".")[0] for p in _config()["packages"]} == {"graphc"}
