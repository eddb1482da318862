"""The getting-started page's local-model recipe, run as written (the install step aside) on
the tiny model: vLLM's CPU build started with the page's flags, and `collect` against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES, require_vllm
from tests.fake_openai import free_port
from tests.tiny_model import tiny_model_dir

REPO = EXAMPLES.parent
PAGE = REPO / "docs" / "getting-started.md"


def recipe() -> str:
    """The page's fenced block under "A local model"."""
    section = PAGE.read_text().split("## A local model")[1].split("\n## ")[0]
    return section.split("```bash\n")[1].split("```")[0]


def test_the_local_model_recipe_collects_against_vllm_as_written(tmp_path: Path) -> None:
    python = require_vllm()
    script = recipe()
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in script
    port = str(free_port())
    # Only where things are on this machine changes: the two environments, the port, the model.
    lines = [line for line in script.splitlines() if not line.startswith("sh scripts/install-vllm.sh")]
    script = (
        "\n".join(lines)
        .replace(".venv-vllm/bin/python", str(python))
        .replace(".venv/bin/gym-runner", f"{sys.executable} -m gymbus.runner")
        .replace(":8000", f":{port}")
        .replace("--port 8000", f"--port {port}")
    )
    (tmp_path / "examples").symlink_to(EXAMPLES)
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL", "POLICY_MODEL")}
    env.update(MODEL=str(tiny_model_dir()), HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    shell = subprocess.Popen(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        said, _ = shell.communicate(timeout=600)
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)  # the server and its engine, whatever happened
        except ProcessLookupError:
            pass
    log = (tmp_path / "vllm.log").read_text()[-3000:] if (tmp_path / "vllm.log").exists() else ""
    assert shell.returncode == 0, said[-3000:] + log
    rows = [json.loads(line) for line in (tmp_path / "results" / "local.jsonl").read_text().splitlines()]
    assert len(rows) == 5
    assert all(row["response"]["model"] == "local" for row in rows), rows[0]["response"]
