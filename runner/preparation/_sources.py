"""The datasets `gym-runner prepare` reads, and the pass that validates them.

A source is a local JSONL file or a Hugging Face dataset (`hf:REPO[:SPLIT]`), either
with `=AGENT` for the agent its rows without `agent_ref` go to. A Hugging Face dataset is
read with the `datasets` library (the user's cached login or `HF_TOKEN` gives access) and
written to a temporary JSONL file first, so both kinds are read the same way after that.

Validating streams the file: each row is checked as `collect` checks it
(`runner._input.check_row`, `check_agent`), every bad row is handed to `on_bad` as it is
found, and only the byte offset and length of each good line are kept, so a big file is
never held in memory and its rows can be read back in any order.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gymbus.bus import subjects
from gymbus.schemas import InputError

from .._input import check_agent, check_row

__all__ = ["HF_PREFIX", "Scanned", "Source", "download_hf", "parse_source", "read_line", "scan"]

HF_PREFIX = "hf:"


@dataclass(frozen=True)
class Source:
    """One dataset: `name` is how reports call it (the path, or `hf:REPO:SPLIT`), `path`
    the JSONL file read, `agent` the agent for its rows without `agent_ref`."""

    name: str
    path: Path
    agent: str | None = None
    hf_repo: str | None = None
    hf_split: str = "train"


def parse_source(spec: str, default_agent: str | None) -> Source:
    """`PATH[=AGENT]` or `hf:REPO[:SPLIT][=AGENT]` (split `train` when not given)."""
    agent = default_agent
    head, sep, tail = spec.rpartition("=")
    if sep and subjects.is_name(tail) and not Path(spec).exists():
        spec, agent = head, tail
    if spec.startswith(HF_PREFIX):
        repo, _, split = spec.removeprefix(HF_PREFIX).partition(":")
        if not repo:
            raise ValueError(f"{spec!r}: name a dataset, as hf:REPO or hf:REPO:SPLIT")
        split = split or "train"
        return Source(f"{HF_PREFIX}{repo}:{split}", Path(), agent, hf_repo=repo, hf_split=split)
    return Source(spec, Path(spec), agent)


@dataclass
class Scanned:
    """The good lines of a source (byte offset and length of each) and how many were bad."""

    source: Source
    offsets: array[int] = field(default_factory=lambda: array("q"))
    lengths: array[int] = field(default_factory=lambda: array("q"))
    bad: int = 0

    @property
    def good(self) -> int:
        return len(self.offsets)


def scan(source: Source, on_bad: Callable[[InputError], None]) -> Scanned:
    """Validate every line of `source`; `on_bad(error)` for each bad row, in line order."""
    scanned = Scanned(source)
    offset = 0
    with open(source.path, "rb") as file:
        for number, raw in enumerate(file, 1):
            start, offset = offset, offset + len(raw)
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                row = check_row(line, source.name, number)
                check_agent(row.agent, source.agent, source.name, number)
            except InputError as exc:
                scanned.bad += 1
                on_bad(exc)
                continue
            scanned.offsets.append(start)
            scanned.lengths.append(len(line))
    return scanned


def read_line(fd: int, scanned: Scanned, index: int) -> bytes:
    """The `index`-th good line of a scanned source, read from its open file `fd`."""
    return os.pread(fd, scanned.lengths[index], scanned.offsets[index])


def download_hf(source: Source, directory: Path) -> Source:
    """`source` (a Hugging Face dataset) written as JSONL into `directory`.

    Arrow gives every row of a table the same columns and nested fields, filling those a
    row lacks with null; nulls are dropped from objects, so rows come back as written.
    `ValueError` with the reason when the `datasets` library is missing or the dataset
    cannot be read (no access, no network, no such dataset or split).
    """
    assert source.hf_repo is not None
    try:
        import datasets  # heavy, and only needed here: imported on use
    except ImportError:
        raise ValueError(
            f"{source.name}: reading Hugging Face datasets needs the `datasets` library: "
            "pip install 'gymbus[train]' (or pip install datasets)"
        ) from None
    try:
        table = datasets.load_dataset(source.hf_repo, split=source.hf_split)
    except Exception as exc:  # noqa: BLE001 - the hub, the network and each loader raise their own kinds
        raise ValueError(
            f"{source.name}: cannot read the Hugging Face dataset ({type(exc).__name__}: {exc}); "
            "check the name and split, your access (`huggingface-cli login` or HF_TOKEN) and the network"
        ) from None
    path = directory / f"hf-{len(list(directory.iterdir()))}.jsonl"
    with open(path, "wb") as out:
        out.writelines(msgspec.json.encode(_without_nulls(row), enc_hook=str) + b"\n" for row in table)
    return Source(source.name, path, source.agent, source.hf_repo, source.hf_split)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value
