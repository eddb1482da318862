"""The layers import only downwards: schemas <- functions <- bus <- runner.

`functions` knows nothing of NATS, so its unit tests just call its functions; `schemas`
is the contract every other package (and other languages) reads; `runner` reaches the
bus only through `bus` (the run protocol's one client lives there). Everything is
imported by its one name, `gymbus.<package>`: a bare `import schemas` would load a second
copy of a package (or a user's own `schemas.py`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ("schemas", "functions", "bus", "runner")
FORBIDDEN = {
    "schemas": {"nats", "bus", "functions", "runner"},
    "functions": {"nats", "bus", "runner"},
    "bus": {"runner"},
    "runner": {"nats"},
}


def imported_top_levels(path: Path) -> set[str]:
    """The top-level modules `path` imports, at any depth of its code (absolute imports);
    one of ours as its package's name (`gymbus.bus.x` is `bus`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "gymbus" else [f"gymbus.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            found.add(parts[1] if parts[0] == "gymbus" and len(parts) > 1 else parts[0])
    return found


def bare_imports(path: Path) -> set[str]:
    """Our packages `path` imports by a bare name (`import bus`) instead of `gymbus.bus`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_it(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_top_levels(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from gymbus.bus import request\n    import nats.js\n    from gymbus import runner\n")
    assert imported_top_levels(module) == {"bus", "nats", "runner"}


def test_everything_of_ours_is_imported_by_its_one_name() -> None:
    folders = [*PACKAGES, "tests", "bench", "examples", "scripts"]
    offenders = {
        str(path.relative_to(ROOT)): sorted(bare_imports(path))
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "node_modules" not in path.parts
    }
    assert {path: names for path, names in offenders.items() if names} == {}
