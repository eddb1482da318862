"""The layers import only downwards: schemas <- functions <- bus <- runner.

`functions` knows nothing of NATS, so its unit tests just call its functions; `schemas`
is the contract every other package (and other languages) reads; `runner` reaches the
bus only through `bus` (the run protocol's one client lives there). Everything is
imported by its one name, `gymbus.<package>`: a bare `import schemas` would load a second
copy of a package (or a user's own `schemas.py`).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gymbus import bus

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
    module.write_text(
        "def f():\n    from gymbus.bus import request\n    import nats.js\n    from gymbus import runner\n"
    )
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


def _parameters(path: Path) -> list[tuple[str, str, str]]:
    """Each parameter of each function in `path`: (function, name, annotation)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                found.append((node.name, arg.arg, annotation))
    return found


def test_the_runner_holds_no_nats_objects() -> None:
    # runner/ imports no nats, and no function of it takes nats-py's client either: what it
    # needs of a connection is a method of `bus.Bus` or of a bus object that takes one.
    offenders = [
        f"{path.relative_to(ROOT)}: {function}({name}: {annotation})"
        for path in sorted((ROOT / "runner").rglob("*.py"))
        for function, name, annotation in _parameters(path)
        if name == "nc" or re.search(r"\b(Connection|Client)\b", annotation)
    ]
    assert offenders == []


def _private_imports(path: Path, package: str) -> set[str]:
    """The private modules of another package (or, in bus/, of another room) that `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 0:
                parts = node.module.split(".")
                if parts[0] == "gymbus" and len(parts) > 2 and parts[1] != package:
                    if any(part.startswith("_") for part in parts[2:]):
                        found.add(node.module)
            elif (
                package == "bus"
                and node.level >= 2
                and any(part.startswith("_") for part in node.module.split("."))
            ):
                found.add("." * node.level + node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "gymbus" and len(parts) > 2 and parts[1] != package:
                    if any(part.startswith("_") for part in parts[2:]):
                        found.add(alias.name)
    return found


def test_no_package_imports_another_packages_private_module() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_private_imports(path, package))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_rooms_of_bus_are_its_packages() -> None:
    packages = {path.parent.name for path in (ROOT / "bus").glob("*/__init__.py")}
    assert sorted(bus.ROOMS) == sorted(packages)


def test_the_docs_list_the_rooms_of_bus_from_the_bottom_up() -> None:
    docstring = re.findall(r"^    ([a-z]+)  ", bus.__doc__ or "", re.MULTILINE)
    layout = re.findall(r"^\| `bus/([a-z]+)/` \|", (ROOT / "docs" / "layout.md").read_text(), re.MULTILINE)
    assert docstring == layout == list(bus.ROOMS)


def test_the_rooms_of_bus_import_only_the_rooms_below_them() -> None:
    offenders = {}
    for floor, room in enumerate(bus.ROOMS):
        for path in sorted((ROOT / "bus" / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
                    other = node.module.split(".")[0]
                    if other not in bus.ROOMS[:floor]:
                        offenders.setdefault(str(path.relative_to(ROOT)), []).append(other)
    assert offenders == {}


def test_what_the_runner_s_commands_share_imports_no_command_s_room() -> None:
    rooms = {path.name for path in (ROOT / "runner").iterdir() if (path / "__init__.py").exists()}
    offenders = {}
    for path in sorted((ROOT / "runner").glob("_[a-z]*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                if node.module.split(".")[0] in rooms:
                    offenders.setdefault(path.name, []).append(node.module)
    assert offenders == {}


def test_a_worker_process_imports_no_viewer_preparation_or_security_module() -> None:
    # What `python -m gymbus.runner serve ...` (the worker command) loads before it serves.
    script = (
        "import runpy, sys\n"
        "sys.argv = ['gym-runner', 'serve', '--help']\n"
        "try:\n"
        "    runpy.run_module('gymbus.runner', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert "gymbus.runner.serving._serve" in loaded  # the check sees the worker's own modules
    rooms = ("gymbus.runner.viewer", "gymbus.runner.preparation", "gymbus.runner.security")
    assert [name for name in loaded if name.startswith(rooms)] == []
