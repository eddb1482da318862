"""Reading the input JSONL: streamed in chunks, validated row by row, never loaded whole.

Errors name the file, the line and the field (`data.jsonl:7: field
`responses_create_params.input`: Expected `array | str`, got `int``). A row nested deeper
than `Limits.max_depth` is refused before it is decoded, like any other bad row.

Commands read their input twice (validate and count, then run), which a pipe cannot give:
`spooled` copies a pipe (`-i -`, `/dev/stdin`, `<(...)`) to a file first.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from signal import SIGINT

import aiofiles
import msgspec

from gymbus.bus import nested_deeper, subjects
from gymbus.schemas import (
    AGENT_REF,
    DEFAULT_LIMITS,
    RESPONSES_CREATE_PARAMS,
    AgentRef,
    InputError,
    TaskRow,
    row_fields,
)

from ._console import ExitCode, fail

__all__ = [
    "STDIN",
    "CheckedRow",
    "InputFile",
    "NothingPiped",
    "UnknownAgent",
    "check_agent",
    "check_row",
    "nearest",
    "open_input",
    "read_lines",
    "spooled",
]

STDIN = Path("-")
"""`-i -`: the rows come on standard input."""

_CHUNK = 1 << 20
_PATH_IN_MESSAGE = re.compile(r" - at `\$\.?([^`]*)`$")
_MISSING_FIELD = re.compile(r"^Object missing required field `([^`]*)`")

_task_decoder = msgspec.json.Decoder(TaskRow)


async def read_lines(path: Path, limit: int | None = None) -> AsyncIterator[tuple[int, bytes]]:
    """`(line number, line)` for each non-blank line, 1-based, at most `limit` lines."""
    count = 0
    number = 0
    rest = b""
    async with aiofiles.open(path, "rb") as f:
        while True:
            chunk = await f.read(_CHUNK)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop() if chunk else b""
            for line in lines:
                number += 1
                if not line.strip():
                    continue
                if limit is not None and count >= limit:
                    return
                count += 1
                yield number, line.rstrip(b"\r")
            if not chunk:
                return


@dataclass(frozen=True)
class InputFile:
    """An input to read (`path`, a regular file) and the name messages give it (`name`:
    what the user typed, `<stdin>` for `-`)."""

    path: Path
    name: str


class NothingPiped(ValueError):
    """`-i -` (or `/dev/stdin`) is a terminal: the command was given no rows, a usage error."""


@contextmanager
def spooled(path: Path, beside: Path) -> Iterator[InputFile]:
    """`path` as a regular file: itself, or (`-`, a pipe, `/dev/stdin`, a process
    substitution) a copy of everything it gives, in a hidden file in `beside` that is
    removed afterwards. `ValueError` if it is missing, `NothingPiped` if it is a terminal
    (nothing to read)."""
    if path != STDIN and not path.exists():
        raise ValueError(f"input file not found: {path}")
    if path != STDIN and stat.S_ISREG(path.stat().st_mode):
        yield InputFile(path, str(path))
        return
    name = "<stdin>" if path == STDIN else str(path)
    with open(sys.stdin.fileno() if path == STDIN else path, "rb", closefd=path != STDIN) as source:
        if os.isatty(source.fileno()):
            raise NothingPiped(
                f"{name} is a terminal, not rows: pipe them in (`jq -c . rows.jsonl | gym-runner ... -i -`) "
                "or give a file"
            )
        beside.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=beside, prefix=".stdin-", suffix=".jsonl", delete=False) as copy:
            try:
                shutil.copyfileobj(source, copy, _CHUNK)
            except BaseException:
                os.unlink(copy.name)
                raise
    try:
        yield InputFile(Path(copy.name), name)
    finally:
        os.unlink(copy.name)


def open_input(stack: ExitStack, path: Path, beside: Path) -> InputFile:
    """`spooled(path, beside)` held open by `stack`; a command's clear error (exit 1) if it
    cannot be read, bad usage (exit 2) if it is a terminal, and exit 130 if Ctrl-C stops the
    reading of a pipe."""
    try:
        return stack.enter_context(spooled(path, beside))
    except NothingPiped as exc:
        fail(str(exc), ExitCode.USAGE)
    except ValueError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(
            f"interrupted while reading {'<stdin>' if path == STDIN else path}: nothing was run", 128 + SIGINT
        )


def nearest(name: str, known: Collection[str]) -> str:
    """` (did you mean a or b?)` for the known names closest to a misspelt `name` (or, for
    an environment's name, its agents), else ``."""
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.8)
    close = close or sorted(one for one in known if one.startswith(f"{name}_"))[:2]  # an environment's agent
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class UnknownAgent(Exception):
    """A command was asked to run an agent that nothing can serve; `usage` when the name
    came from `--agent` (a bad value), not from the rows."""

    def __init__(self, message: str, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class CheckedRow:
    """A valid row's top-level fields (still encoded) and the agent it names, if any."""

    fields: dict[str, msgspec.Raw]
    agent: str | None


def check_row(line: bytes, path: str, number: int, max_depth: int = DEFAULT_LIMITS.max_depth) -> CheckedRow:
    """Validate one input line as a task row; `InputError` says where it is wrong."""
    if nested_deeper(line, max_depth):
        raise InputError(f"nested deeper than {max_depth} levels", path=path, line=number)
    try:
        fields = row_fields(line)
    except msgspec.DecodeError as exc:
        raise InputError(f"not a JSON object ({exc})", path=path, line=number) from None
    if RESPONSES_CREATE_PARAMS not in fields:
        raise InputError(
            "missing (every row needs it)", path=path, line=number, field=RESPONSES_CREATE_PARAMS
        )
    try:
        task = _task_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise _located(exc, path, number) from None
    ref = task.agent_ref
    return CheckedRow(fields=fields, agent=ref.name if isinstance(ref, AgentRef) else None)


def check_agent(named: str | None, default: str | None, path: str, number: int) -> str:
    """The agent that runs a row: its `agent_ref` name, else `default` (`--agent`);
    `InputError` if there is none or it cannot be a subject token."""
    agent = named or default
    if agent is None:
        raise InputError("missing, and no --agent was given", path=path, line=number, field=AGENT_REF)
    if not subjects.is_name(agent):
        raise InputError(f"{agent!r} is not a valid agent name", path=path, line=number, field=AGENT_REF)
    return agent


def _located(exc: msgspec.ValidationError, path: str, number: int) -> InputError:
    message = str(exc)
    where = _PATH_IN_MESSAGE.search(message)
    missing = _MISSING_FIELD.match(message)
    field = where.group(1) if where else None
    if missing:
        field = f"{field}.{missing.group(1)}" if field else missing.group(1)
    text = _PATH_IN_MESSAGE.sub("", message)
    return InputError(text, path=path, line=number, field=field or None)
