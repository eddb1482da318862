"""The virtual environment a NeMo Gym server runs in: built once, then reused.

NeMo Gym pins its own `openai` and needs a newer Python than GymBus, so its servers cannot
share GymBus's environment. Each server (and each agent) gets one built from its
`requirements.txt` (or its `pyproject.toml` dependencies), where the line naming NeMo Gym
itself (`-e nemo-gym[dev] @ ../../`, a path to the Gym checkout) becomes the chosen release,
`nemo-gym==<version>` with the line's extras but `dev` (which only its own tests use), and
a `pyproject.toml`'s `[tool.uv.sources]` git sources become `name @ git+URL` requirements,
as uv would install them in NeMo Gym's checkout. A `requirements.txt` server's
`overrides.txt` forces its versions over what the requirements declare (`wmt_translation`'s
protobuf), as NeMo Gym's installer passes it to uv (`--override`). Servers whose
requirements are the same share one environment: most need nothing beyond NeMo Gym.

The release is `$GYMBUS_NEMO_GYM_VERSION`: 0.7.0 by default, or 0.4.0 (`RELEASES`).
Environments live under `$GYMBUS_NEMO_GYM_HOME` (default `~/.cache/gymbus/nemo-gym`), in
`venvs/<key>`, the key a hash of the Python version and the requirements (the release
among them), so both releases' environments live side by side. One is used only once its
build has finished (a marker written last), so a failed or interrupted build is rebuilt,
never reused; a file lock keeps two worker processes from building the same one at once.
The build's output goes to `venvs/<key>.log`. With `uv` installed (GymBus's `nemo-gym`
extra) a build takes seconds and shares files with uv's cache; without it, `python -m venv`
and pip take minutes.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymbus.schemas import DEFAULT_TIMEOUTS, BadRequest, UpstreamFailed

from ._python import Python, find_python

__all__ = [
    "HOME_VARIABLE",
    "NEMO_GYM_VERSION",
    "RELEASES",
    "VERSION_VARIABLE",
    "Release",
    "VirtualEnv",
    "home",
    "overrides_of",
    "release",
    "requirements_of",
    "tool_path",
    "virtual_env",
]


@dataclass(frozen=True)
class Release:
    """A NeMo Gym release the bridge is written and tested against (it starts servers
    through NeMo Gym's own interfaces, which change between releases)."""

    version: str
    python: tuple[int, int, int]
    """The Python its package declares it needs (`Requires-Python`)."""


RELEASES = {one.version: one for one in (Release("0.7.0", (3, 13, 14)), Release("0.4.0", (3, 12, 0)))}
NEMO_GYM_VERSION = "0.7.0"
"""The release used unless `$GYMBUS_NEMO_GYM_VERSION` names another of `RELEASES`."""
VERSION_VARIABLE = "GYMBUS_NEMO_GYM_VERSION"
HOME_VARIABLE = "GYMBUS_NEMO_GYM_HOME"
_MARKER = ".gymbus-complete"
_NEMO_GYM = re.compile(r"^nemo[-_]gym\s*(\[(?P<extras>[^\]]*)\])?", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def release() -> Release:
    """The release `$GYMBUS_NEMO_GYM_VERSION` names (0.7.0 if unset); `BadRequest` for
    one the bridge does not know."""
    named = os.environ.get(VERSION_VARIABLE, "").strip() or NEMO_GYM_VERSION
    if named not in RELEASES:
        raise BadRequest(
            f"${VERSION_VARIABLE}={named}: the NeMo Gym bridge runs releases {', '.join(RELEASES)}"
        )
    return RELEASES[named]


def home() -> Path:
    """Where NeMo Gym environments (and the package's servers) are kept."""
    named = os.environ.get(HOME_VARIABLE)
    if named:
        return Path(named)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "gymbus" / "nemo-gym"


def pinned(extras: frozenset[str] = frozenset()) -> str:
    """The requirement naming the chosen release, with `extras` (`sandbox`, say)."""
    wanted = ",".join(sorted(extras - {"dev"}))
    return f"nemo-gym{f'[{wanted}]' if wanted else ''}=={release().version}"


def requirements_of(server_dir: Path | None) -> list[str]:
    """What a server's environment needs: NeMo Gym, pinned, and its own requirements."""
    lines: list[str] = []
    sources: dict[str, str] = {}
    if server_dir is not None and (server_dir / "requirements.txt").exists():
        lines = _listed(server_dir / "requirements.txt")
    elif server_dir is not None and (server_dir / "pyproject.toml").exists():
        document = tomllib.loads((server_dir / "pyproject.toml").read_text())
        lines = list(document.get("project", {}).get("dependencies", []))
        sources = _git_sources(document)
    extras: set[str] = set()
    wanted: list[str] = []
    for line in lines:
        if _is_nemo_gym(line):
            extras |= _extras(line)
        else:
            wanted.append(sources.get(_name(line), line))
    return [pinned(frozenset(extras)), *wanted]


def _is_nemo_gym(line: str) -> bool:
    """Whether a requirement names NeMo Gym itself: by name (`nemo-gym[dev] @ ../../`), or
    as the Gym checkout two levels up (`-e ../../`), where NeMo Gym's servers sit."""
    spec = line.removeprefix("-e").strip()
    return bool(_NEMO_GYM.match(spec)) or spec.rstrip("/") == "../.."


def _extras(line: str) -> set[str]:
    found = _NEMO_GYM.match(line.removeprefix("-e").strip())
    extras = found["extras"] if found is not None and found["extras"] else ""
    return {extra.strip() for extra in extras.split(",") if extra.strip()}


def _name(requirement: str) -> str:
    found = _NAME.match(requirement.strip())
    return found[0].lower().replace("_", "-") if found else ""


def _git_sources(document: dict[str, Any]) -> dict[str, str]:
    """`[tool.uv.sources]` entries that name a git repository, as `name @ git+URL[@ref]`."""
    sources = document.get("tool", {}).get("uv", {}).get("sources", {})
    found = {}
    for name, source in sources.items():
        if isinstance(source, dict) and isinstance(source.get("git"), str):
            ref = source.get("rev") or source.get("tag") or source.get("branch")
            at = f"@{ref}" if ref else ""
            found[_name(name)] = f"{name} @ git+{source['git']}{at}"
    return found


def tool_path() -> str:
    """`PATH` for a server process: the caller's, with the directory of the `uv` that built
    the environments first (NeMo Gym runs its servers with uv at hand; some build
    environments of their own with it)."""
    current = os.environ.get("PATH", "")
    uv = _uv()
    return current if uv is None else os.pathsep.join([str(Path(uv).parent), current])


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


def overrides_of(server_dir: Path | None) -> list[str]:
    """The versions a server's `overrides.txt` forces over its requirements', as NeMo Gym's
    installer reads it: beside a `requirements.txt` only."""
    if server_dir is None or not (server_dir / "requirements.txt").exists():
        return []
    return _listed(server_dir / "overrides.txt") if (server_dir / "overrides.txt").exists() else []


def _listed(path: Path) -> list[str]:
    """The requirements a pip-style file lists: its lines without comments or blanks."""
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _key(python: str, requirements: list[str], overrides: list[str]) -> str:
    # Without overrides, the key the environments built before them have.
    spec = json.dumps([_version(python), sorted(requirements), *([sorted(overrides)] if overrides else [])])
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


def _build_commands(
    python: Python, venv: Path, requirements: Path, overrides: Path | None = None
) -> list[list[str]]:
    """The commands that build `venv`, with uv's `--override` of `overrides` if given. On an
    older patch release than the package declares (`Python.needs_override`) the installer
    resolves for the declared one: uv's `--python-version` is "the Python the requirements
    must support", pip's `--ignore-requires-python` skips the check (and takes minutes more)."""
    uv = _uv()
    target = str(venv / "bin" / "python")
    if uv is not None:
        override = ["--python-version", python.wanted_text] if python.needs_override else []
        forced = ["--override", str(overrides)] if overrides is not None else []
        return [
            [uv, "venv", "--quiet", "--python", python.path, str(venv)],
            [uv, "pip", "install", "--python", target, *override, *forced, "-r", str(requirements)],
        ]
    if overrides is not None:
        raise UpstreamFailed(
            f"{overrides} needs uv to override versions (GymBus's `nemo-gym` extra installs it)"
        )
    override = ["--ignore-requires-python"] if python.needs_override else []
    return [
        [python.path, "-m", "venv", str(venv)],
        [target, "-m", "pip", "install", "-q", *override, "-r", str(requirements)],
    ]


def virtual_env(requirements: list[str], what: str, cwd: Path | None = None) -> VirtualEnv:
    """The environment with `requirements`, built now if it is not yet (`what` names the
    server in errors), in `cwd`, the server's directory, whose `overrides_of` apply.
    `UpstreamFailed` naming the build log if the build fails."""
    python = find_python(release().python)
    venvs = home() / "venvs"
    venvs.mkdir(parents=True, exist_ok=True)
    overrides = overrides_of(cwd)
    env = VirtualEnv(venvs / _key(python.path, requirements, overrides))
    if env.ready:
        return env
    with open(env.path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        if not env.ready:
            _build(env, python, requirements, overrides, what, cwd)
    return env


def _build(
    env: VirtualEnv,
    python: Python,
    requirements: list[str],
    overrides: list[str],
    what: str,
    cwd: Path | None,
) -> None:
    shutil.rmtree(env.path, ignore_errors=True)  # what an interrupted build left
    listed = env.path.with_suffix(".txt")
    listed.write_text("\n".join(requirements) + "\n")
    # The server's own file, as NeMo Gym's installer passes it: uv's errors then name it.
    forced = cwd / "overrides.txt" if overrides and cwd is not None else None
    with open(env.log, "w") as log:
        log.write(f"building {env.path} for {what} with {python.path}\n{listed.read_text()}\n")
        if forced is not None:
            log.write(f"overriding with {forced}:\n" + "\n".join(overrides) + "\n\n")
        log.flush()
        for command in _build_commands(python, env.path, listed, forced):
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
