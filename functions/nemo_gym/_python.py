"""Finding a Python that the chosen NeMo Gym release runs on (GymBus itself needs 3.11).

NeMo Gym 0.4.0 needs Python 3.12 or later; 0.7.0 declares `Requires-Python >=3.13.14`,
and any 3.13 runs it (nothing in it checks the patch level): where the interpreter is an
older 3.13, the environment's installer is told to resolve for the declared version
(`Python.needs_override`, see `_venv`).

In order: `$GYMBUS_NEMO_GYM_PYTHON`; `python3.13` or `python3.12` on `PATH`, if it runs
(a pyenv shim of a version that is not selected does not); pyenv's installed versions;
the Python running GymBus. Among those that fit, the first found on `PATH` wins, then the
release's own minor version before a later one, the newest patch first.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gymbus.schemas import BadRequest

__all__ = ["PYTHON_VARIABLE", "Python", "find_python"]

PYTHON_VARIABLE = "GYMBUS_NEMO_GYM_PYTHON"

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Python:
    """An interpreter, its version, and the version the release declares it needs."""

    path: str
    version: Version
    wanted: Version

    @property
    def needs_override(self) -> bool:
        """An older patch release of the right minor version: the installer must be told
        to resolve for `wanted` (uv's `--python-version`, pip's `--ignore-requires-python`)."""
        return self.version < self.wanted

    @property
    def wanted_text(self) -> str:
        return ".".join(map(str, self.wanted))


def _hint(wanted: Version) -> str:
    minor = f"{wanted[0]}.{wanted[1]}"
    return (
        f"this NeMo Gym release needs Python {minor} or later: install one (`pyenv install {minor}`, "
        f"`apt-get install python{minor}`, or `uv python install {minor}`) or name one with "
        f"${PYTHON_VARIABLE}=/path/to/python{minor}"
    )


def _version(python: str) -> Version | None:
    """`python`'s (major, minor, micro), or `None` if it does not run."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        major, minor, micro = out.stdout.split()
        return int(major), int(minor), int(micro)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _from_pyenv() -> list[str]:
    """pyenv's installed CPython 3.12 and 3.13 interpreters."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    try:
        root = subprocess.run(
            [pyenv, "root"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    return [
        str(path / "bin" / "python")
        for path in Path(root, "versions").glob("3.1[23].*")
        if path.name.replace(".", "").isdigit() and (path / "bin" / "python").exists()
    ]


def _fits(version: Version | None, wanted: Version) -> bool:
    """Whether an interpreter runs the release: its minor version, any patch (see module)."""
    return version is not None and version[:2] >= wanted[:2]


@functools.cache
def find_python(wanted: Version) -> Python:
    """A Python to build environments of a release that declares `wanted`; `BadRequest`
    saying how to get one. Looked for once per process."""
    named = os.environ.get(PYTHON_VARIABLE)
    if named:
        version = _version(named)
        if not _fits(version, wanted):
            what = "does not run" if version is None else f"is Python {'.'.join(map(str, version))}"
            raise BadRequest(f"${PYTHON_VARIABLE}={named} {what}; {_hint(wanted)}")
        assert version is not None
        return Python(named, version, wanted)
    on_path = [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    others = [*_from_pyenv(), sys.executable]
    fitting = []
    for python in [*on_path, *others]:
        version = _version(python)
        if version is not None and _fits(version, wanted):
            fitting.append(Python(python, version, wanted))
    if not fitting:
        raise BadRequest(_hint(wanted))

    def preference(found: Python) -> tuple[bool, int, int]:
        minor, patch = found.version[1], found.version[2]
        return (found.path not in on_path, minor - wanted[1], -patch)

    return min(fitting, key=preference)
