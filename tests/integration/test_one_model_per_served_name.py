"""`gym-runner serve` serves one model per served name: two models under `policy` would
answer one rollout's calls in turn, mixing them, so the command refuses, naming both,
before anything serves."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from gymbus import bus
from gymbus.bus import Connection

POLICIES = """
from gymbus.functions import Model


def _make(options):
    async def generate(params):
        raise NotImplementedError

    return generate


CAREFUL = Model(name="careful", make=_make)
HASTY = Model(name="hasty", make=_make)
"""


async def _served_adapters(nc: Connection, served_as: str) -> set[str]:
    infos = await bus.service_infos(nc, served_as, window=0.5)
    return {info.metadata.get("adapter", "") for info in infos}


async def test_two_models_of_a_file_under_one_served_name_are_refused_naming_both(
    nats_url: str, nc: Connection, tmp_path: Path
) -> None:
    policies = tmp_path / "policies.py"
    policies.write_text(POLICIES)
    command = [sys.executable, "-m", "gymbus.runner", "serve", str(policies), "--served-model", "policy"]
    env = {**os.environ, "NATS_URL": nats_url}
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert f"careful (file {policies})" in done.stderr and f"hasty (file {policies})" in done.stderr
    assert "2 models would answer as policy" in done.stderr
    assert {"careful", "hasty"} & await _served_adapters(nc, "policy") == set()
