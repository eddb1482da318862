"""The virtual environment a NeMo Gym server runs in: built once, then reused.

NeMo Gym pins `openai<=2.7.2` and needs Python 3.12+, so its servers cannot share
GymBus's environment. Each server gets one built from its `requirements.txt` (or its
`pyproject.toml` dependencies), where the line naming NeMo Gym itself (`-e nemo-gym[dev] @
../../`, a path to the Gym checkout) becomes the pinned release, `nemo-gym==NEMO_GYM_VERSION`
(without its `dev` extra, which only its own tests use). Servers whose requirements are
the same share one environment: most need nothing beyond NeMo Gym.

Environments live under `$GYMBUS_NEMO_GYM_HOME` (default `~/.cache/gymbus/nemo-gym`), in
`venvs/<key>`, the key a hash of the Python version, the NeMo Gym version and the
requirements. One is used only once its build has finished (a marker written last), so
a failed or interrupted build is rebuilt, never reused; a file lock keeps two worker
processes from building the same one at once. The build's output goes to
`venvs/<key>.log`. With `uv` installed (GymBus's `nemo-gym` extra) a build takes seconds
and shares files with uv's cache; without it, `python -m venv` and pip take minutes.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from gymbus.schemas import DEFAULT_TIMEOUTS, UpstreamFailed

from ._python import find_python

__all__ = ["HOME_VARIABLE", "NEMO_GYM_VERSION", "VirtualEnv", "home", "requirements_of", "virtual_env"]

NEMO_GYM_VERSION = "0.4.0"
"""The NeMo Gym release the bridge is written and tested against (it uses NeMo Gym's
internal interfaces to start a server without its head server)."""
HOME_VARIABLE = "GYMBUS_NEMO_GYM_HOME"
_MARKER = ".gymbus-complete"
_NEMO_GYM = re.compile(r"^nemo[-_]gym\b", re.IGNORECASE)


def home() -> Path:
    """Where NeMo Gym environments (and the package's servers) are kept."""
    named = os.environ.get(HOME_VARIABLE)
    if named:
        return Path(named)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "gymbus" / "nemo-gym"


def pinned() -> str:
    return f"nemo-gym=={NEMO_GYM_VERSION}"


def requirements_of(server_dir: Path | None) -> list[str]:
    """What a server's environment needs: NeMo Gym, pinned, and its own requirements."""
    lines: list[str] = []
    if server_dir is not None and (server_dir / "requirements.txt").exists():
        text = (server_dir / "requirements.txt").read_text()
        lines = [line.split(" #")[0].strip() for line in text.splitlines()]
    elif server_dir is not None and (server_dir / "pyproject.toml").exists():
        project = tomllib.loads((server_dir / "pyproject.toml").read_text()).get("project", {})
        lines = list(project.get("dependencies", []))
    wanted = [pinned()]
    for line in lines:
        if not line or line.startswith("#"):
            continue
        if not _is_nemo_gym(line):
            wanted.append(line)
    return wanted


def _is_nemo_gym(line: str) -> bool:
    """Whether a requirement names NeMo Gym itself: by name (`nemo-gym[dev] @ ../../`), or
    as the Gym checkout two levels up (`-e ../../`), where NeMo Gym's servers sit."""
    spec = line.removeprefix("-e").strip()
    return bool(_NEMO_GYM.match(spec)) or spec.rstrip("/") == "../.."


class VirtualEnv:
    """A built environment: `python` runs servers; `log` is where its build wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = path / "bin" / "python"
        self.log = path.with_suffix(".log")

    @property
    def ready(self) -> bool:
        return (self.path / _MARKER).exists() and self.python.exists()

    def site_packages(self) -> Path:
        """Where the environment's packages are (NeMo Gym's own servers among them)."""
        found = sorted(self.path.glob("lib/python3.*/site-packages"))
        if not found:
            raise UpstreamFailed(f"{self.path} has no site-packages: delete it to rebuild it")
        return found[0]


@functools.cache
def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _key(python: str, requirements: list[str]) -> str:
    spec = json.dumps([_version(python), sorted(requirements)])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def _uv() -> str | None:
    """The `uv` binary, if installed (on PATH, or as the `uv` Python package)."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return None


def _build_commands(python: str, venv: Path, requirements: Path) -> list[list[str]]:
    uv = _uv()
    if uv is not None:
        return [
            [uv, "venv", "--quiet", "--python", python, str(venv)],
            [uv, "pip", "install", "--python", str(venv / "bin" / "python"), "-r", str(requirements)],
        ]
    return [
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(requirements)],
    ]


def virtual_env(requirements: list[str], what: str, cwd: Path | None = None) -> VirtualEnv:
    """The environment with `requirements`, built now if it is not yet (`what` names the
    server in errors). `UpstreamFailed` naming the build log if the build fails."""
    python = find_python()
    venvs = home() / "venvs"
    venvs.mkdir(parents=True, exist_ok=True)
    env = VirtualEnv(venvs / _key(python, requirements))
    if env.ready:
        return env
    with open(env.path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        if not env.ready:
            _build(env, python, requirements, what, cwd)
    return env


def _build(env: VirtualEnv, python: str, requirements: list[str], what: str, cwd: Path | None) -> None:
    shutil.rmtree(env.path, ignore_errors=True)  # what an interrupted build left
    listed = env.path.with_suffix(".txt")
    listed.write_text("\n".join(requirements) + "\n")
    with open(env.log, "w") as log:
        log.write(f"building {env.path} for {what} with {python}\n{listed.read_text()}\n")
        log.flush()
        for command in _build_commands(python, env.path, listed):
            try:
                done = subprocess.run(
                    command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, check=False,
                    timeout=DEFAULT_TIMEOUTS.nemo_gym_install,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise UpstreamFailed(
                    f"installing NeMo Gym server {what} took over {DEFAULT_TIMEOUTS.nemo_gym_install:.0f} s; "
                    f"see {env.log}"
                ) from None
            if done.returncode != 0:
                log.flush()
                tail = "\n".join(env.log.read_text(errors="replace").splitlines()[-15:])
                raise UpstreamFailed(f"could not install NeMo Gym server {what}; see {env.log}:\n{tail}")
    (env.path / _MARKER).write_text("\n".join(requirements) + "\n")
