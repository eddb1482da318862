"""Reading the input: a pipe is copied to a file to be read twice, and a misspelt agent name
gets the nearest ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gymbus.runner._input import nearest, spooled

AGENTS = ["mcqa_simple_agent", "math_with_judge_simple_agent", "example_single_tool_call_simple_agent"]


def test_a_misspelt_name_gets_the_nearest_and_an_environments_name_its_agents() -> None:
    assert nearest("mcqa_simpel_agent", AGENTS) == " (did you mean mcqa_simple_agent?)"
    assert nearest("mcqa", AGENTS) == " (did you mean mcqa_simple_agent?)"
    assert nearest("zzz", AGENTS) == ""


def test_a_regular_file_is_read_in_place(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    with spooled(rows, tmp_path / "out") as source:
        assert (source.path, source.name) == (rows, str(rows))
    assert not (tmp_path / "out").exists()


def test_a_pipe_is_copied_beside_the_output_and_the_copy_removed(tmp_path: Path) -> None:
    read, write = os.pipe()
    writer = subprocess.Popen(["printf", '{"a": 1}\\n{"a": 2}\\n'], stdout=write)
    os.close(write)
    try:
        with spooled(Path(f"/dev/fd/{read}"), tmp_path) as source:
            assert source.name == f"/dev/fd/{read}" and source.path.parent == tmp_path
            assert source.path.read_text() == '{"a": 1}\n{"a": 2}\n' == source.path.read_text()  # twice
    finally:
        os.close(read)
        writer.wait(timeout=10)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="input file not found: "),
        spooled(tmp_path / "nope.jsonl", tmp_path),
    ):
        pass
