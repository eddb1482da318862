"""P13 of `python -m bench`, small: NeMo Gym's own `ng_collect_rollouts` collects weather
rollouts through GymBus's front and through NeMo Gym's own servers (`ng_run`), and the
row's figures come from what both really did.

Real NeMo Gym 0.7.0 in its Python 3.13 environments (`sh scripts/install-nemo-gym.sh`),
a real nats-server, a real `gym-runner serve` worker and `gym-runner front`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import nemo_gym_front

pytestmark = pytest.mark.timeout(900)

ROLLOUTS = 12


def rewards(path: Path) -> dict[tuple[int, int], float]:
    """Each rollout's reward by its task and rollout index (NeMo Gym makes repeated rows
    repeats of one task)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(row["_ng_task_index"], row["_ng_rollout_index"]): row["reward"] for row in rows}


def test_both_sides_collect_every_rollout_and_are_measured(nemo_gym_python: Path, tmp_path: Path) -> None:
    runs = nemo_gym_front.p13_front_rollouts(ROLLOUTS, 1, tmp_path)

    assert [run.side for run in runs] == list(nemo_gym_front.SIDES)
    for run in runs:
        assert run.rollouts == ROLLOUTS
        assert run.seconds > 0 and run.rate > 0
        assert run.side_cpu > 0 and run.client_cpu > 0
    ours, theirs = (tmp_path / f"{side}-0.jsonl" for side in nemo_gym_front.SIDES)
    assert rewards(ours) == rewards(theirs) and len(rewards(ours)) == ROLLOUTS
    first = json.loads(ours.read_text().splitlines()[0])
    assert first["_gymbus"]["delivery"] >= 1  # run by a GymBus agent worker, through the front
    assert "_gymbus" not in json.loads(theirs.read_text().splitlines()[0])
