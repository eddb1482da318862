"""`gym-runner new-environment NAME`: a new environment package, ready to `pip install -e`.

The package is a working example to change, not an empty skeleton: an environment with
two tools, per-session state and a verify (`template/environment.py.tmpl`), five example
rows, tests that call its functions and run `gym-runner check` on it, a README, and a
pyproject whose entry point tells GymBus its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gymbus.functions.registry import REGISTRY

__all__ = ["NAME_PATTERN", "Scaffold", "write_package"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
"""An environment's name: a Python package name and a subject token (lowercase)."""

_TEMPLATE = Path(__file__).parent / "template"

_FILES = {
    "pyproject.toml": "pyproject.toml.tmpl",
    "README.md": "README.md.tmpl",
    "{name}/__init__.py": "init.py.tmpl",
    "{name}/environment.py": "environment.py.tmpl",
    "data/example.jsonl": "example.jsonl.tmpl",
    "tests/test_environment.py": "test_environment.py.tmpl",
}
"""Where each template goes in the new package."""


@dataclass(frozen=True)
class Scaffold:
    """What `write_package` wrote: the package's folder and its files."""

    root: Path
    files: list[Path]


def _check_name(name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{name!r} cannot name an environment: use lowercase letters, digits and underscores, "
            "starting with a letter (it is a Python package name and a subject on the bus)"
        )
    for taken in (name, f"{name}_simple_agent"):
        if REGISTRY.get(taken) is not None:
            source = REGISTRY.source(taken)
            raise ValueError(f"a function named {taken!r} exists already, from {source}: choose another name")


def write_package(name: str, parent: Path) -> Scaffold:
    """Write the package `parent/name`; `ValueError` for a bad or taken name,
    `FileExistsError` if the folder exists."""
    _check_name(name)
    root = parent / name
    if root.exists():
        raise FileExistsError(f"{root} already exists: choose another name or folder")
    written = []
    for target, template in _FILES.items():
        path = root / target.format(name=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (_TEMPLATE / template).read_text()
        path.write_text(text.replace("{{NAME}}", name).replace("{{PROJECT}}", name.replace("_", "-")))
        written.append(path)
    return Scaffold(root, written)
