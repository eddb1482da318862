"""The verifier environments end to end: one JSONL mixing instruction_following,
structured_outputs and reasoning_gym rows (each with its own `agent_ref`), collected by
`gym-runner collect` on a real nats-server with the offline policy. Each row is verified by its
own environment; what the scripted policy scores there is not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import zip_longest
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES

AGENTS = {
    "instruction_following": "instruction_following_simple_agent",
    "structured_outputs": "structured_outputs_v4_simple_agent",
    "reasoning_gym": "reasoning_gym_simple_agent",
}


def mixed_rows() -> list[dict[str, Any]]:
    """The three environments' example rows, interleaved, plus two malformed rows."""
    files = [
        [json.loads(line) for line in (EXAMPLES / f"{env}.jsonl").read_text().splitlines()] for env in AGENTS
    ]
    rows = [row for group in zip_longest(*files) for row in group if row is not None]
    broken_if = {**files[0][0], "kwargs": [{"num_paragraphs": 4}]}  # one kwargs entry for two instructions
    broken_rg = {**files[2][0], "metadata": {}}  # no source_dataset
    return [*rows, broken_if, broken_rg]


def collect(rows: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "mixed.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    command = [
        sys.executable,
        "-m",
        "gymbus.runner",
        "collect",
        "-i",
        str(source),
        "-o",
        str(tmp_path / "out.jsonl"),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=110, env=clean, check=False)


def test_mixed_rows_are_rewarded_by_their_own_environments(tmp_path: Path) -> None:
    rows = mixed_rows()
    done = collect(rows, tmp_path)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(out) == len(rows) == 17
    by_index = {row["_ng_task_index"]: row for row in out}
    for index, row in enumerate(rows[:-2]):
        result = by_index[index]
        agent = result["agent_ref"]["name"]
        assert agent == row["agent_ref"]["name"]
        if agent == AGENTS["instruction_following"]:
            assert result["reward"] == float(result["follow_all_instructions"])
            listed = row.get("instruction_id_list") or row["verifier_metadata"]["instruction_id_list"]
            assert len(result["follow_instruction_list"]) == len(listed)
        elif agent == AGENTS["structured_outputs"]:
            [answer] = result["response"]["output"]  # the tool call is the answer: not executed
            assert answer["type"] == "function_call"
            assert (result["reward"] == 1.0) == (result["error_type"] is None)
        else:
            assert result["task_name"] == "knights_knaves" and result["score"] == result["reward"]
    broken_if, broken_rg = by_index[15], by_index[16]
    assert (broken_if["reward"], broken_if["error_type"]) == (0.0, "missing_field")
    assert (broken_rg["reward"], broken_rg["error_type"]) == (0.0, "missing_field")
    assert not (tmp_path / "out_failures.jsonl").exists() or not (tmp_path / "out_failures.jsonl").read_text()
