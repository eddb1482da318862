"""Finding a Python that NeMo Gym runs on (3.12 or later; GymBus itself needs 3.11).

In order: `$GYMBUS_NEMO_GYM_PYTHON`; `python3.12` or `python3.13` on `PATH`, if it runs
(a pyenv shim of a version that is not selected does not); the newest 3.12 or 3.13 that
pyenv has installed; the Python running GymBus, if it is 3.12 or later.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gymbus.schemas import BadRequest

__all__ = ["PYTHON_VARIABLE", "find_python"]

PYTHON_VARIABLE = "GYMBUS_NEMO_GYM_PYTHON"
_WANTED = ((3, 12), (3, 13))
_HINT = (
    "NeMo Gym needs Python 3.12 or later: install one (`pyenv install 3.12`, `apt-get install python3.12`, "
    f"or `uv python install 3.12`) or name one with ${PYTHON_VARIABLE}=/path/to/python3.12"
)


def _version(python: str) -> tuple[int, int] | None:
    """`python`'s (major, minor), or `None` if it does not run."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        major, minor = out.stdout.split()
        return int(major), int(minor)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _from_pyenv() -> list[str]:
    """pyenv's installed 3.12 and 3.13 interpreters: 3.12 first (the version NeMo Gym is
    tested on), the newest patch release first."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    try:
        root = subprocess.run(
            [pyenv, "root"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    versions = Path(root, "versions")
    found = [
        path / "bin" / "python"
        for path in versions.glob("3.1[23].*")
        if path.name.replace(".", "").isdigit() and (path / "bin" / "python").exists()
    ]

    def preference(python: Path) -> tuple[int, int]:
        _, minor, patch = (int(n) for n in python.parent.parent.name.split("."))
        return (minor, -patch)

    return [str(path) for path in sorted(found, key=preference)]


@functools.cache
def find_python() -> str:
    """A Python 3.12+ to build NeMo Gym's environments with; `BadRequest` saying how to get
    one. Looked for once per process."""
    named = os.environ.get(PYTHON_VARIABLE)
    if named:
        version = _version(named)
        if version is None or version < _WANTED[0]:
            what = "does not run" if version is None else f"is Python {version[0]}.{version[1]}"
            raise BadRequest(f"${PYTHON_VARIABLE}={named} {what}. {_HINT}")
        return named
    candidates = [found for name in ("python3.12", "python3.13") if (found := shutil.which(name))]
    candidates += _from_pyenv()
    candidates.append(sys.executable)
    for python in candidates:
        version = _version(python)
        if version is not None and version >= _WANTED[0]:
            return python
    raise BadRequest(_HINT)
