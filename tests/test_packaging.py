"""GymBus installs under one name, `gymbus`: nothing else's `schemas` or `functions`
collides with it, and the wheel holds every package of the repository's folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_under_gymbus() -> None:
    folders = {folder: f"gymbus.{folder}" for folder in ("schemas", "functions", "bus", "runner")}
    assert PROJECT["package-dir"] == {name: folder for folder, name in folders.items()}
    found = {
        folders[init.relative_to(ROOT).parts[0]]
        + "".join(f".{part}" for part in init.parent.relative_to(ROOT).parts[1:])
        for folder in folders
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert sorted(PROJECT["packages"]) == sorted(found)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes its build/ folder beside the sources.
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("schemas", "functions", "bus", "runner"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(out.glob("gymbus-*.whl"))


def test_the_wheel_holds_every_module_and_data_file_under_gymbus(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("schemas", "functions", "bus", "runner"):
        for path in (ROOT / folder).rglob("*"):
            ignored = {"__pycache__", "node_modules"} & set(path.parts)  # node_modules: installed by npm
            if path.is_file() and not ignored and path.suffix != ".pyc":
                assert f"gymbus/{path.relative_to(ROOT)}" in names, path
    assert not any(name.split("/")[0] in {"schemas", "functions", "bus", "runner"} for name in names)


@pytest.mark.timeout(600)
def test_gymbus_installs_beside_pypis_schemas_and_functions(wheel: Path, tmp_path: Path) -> None:
    """PyPI's `schemas` (a top-level `schemas/` package) depends on PyPI's `functions` (a
    `functions.py`): both install next to GymBus, whole, and `import schemas` / `import
    functions` still find theirs. (Both are Python 2 code, which no Python 3 can run, so
    that their import finds their files is all there is to check of them.)"""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # GymBus's own dependencies come from this test environment, by a path file.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "schemas==0.7.1", "functions==0.7.0", str(wheel)],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    if install.returncode != 0 and not os.environ.get("CI") and "No matching distribution" in install.stderr:
        pytest.skip(f"PyPI is not reachable: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-2000:]
    code = (
        "import importlib.util as u, gymbus.schemas, gymbus.functions, gymbus.runner.cli;"
        "print(u.find_spec('schemas').origin); print(u.find_spec('functions').origin);"
        "print(gymbus.schemas.__file__); print(gymbus.functions.__file__)"
    )
    done = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs_schemas, theirs_functions, ours_schemas, ours_functions = done.stdout.split()
    assert theirs_schemas == f"{site}/schemas/__init__.py"
    assert theirs_functions == f"{site}/functions.py"
    assert (ours_schemas, ours_functions) == (
        f"{site}/gymbus/schemas/__init__.py",
        f"{site}/gymbus/functions/__init__.py",
    )
    assert "Schema violation" in Path(theirs_schemas).read_text()  # theirs, not overwritten
