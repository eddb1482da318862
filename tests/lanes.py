"""What each test needs beyond this repository and a nats-server, as pytest markers, so
`pytest -m "not slow"` is a fast lane for contributors. CI (`.ci/run`) runs everything.
The markers are registered in pyproject.toml.

A marker is given to a whole test file here, in one table, rather than by a line in each
file: what a file needs is read at a glance, and a new heavy file is one line to add.
Every test that needs vLLM, TRL, Chromium, Node, NeMo Gym's environments or a cluster is
also `slow`; so is every other file measured at more than a few seconds.
"""

from __future__ import annotations

NEEDS: dict[str, tuple[str, ...]] = {
    "functions/test_vllm_rollouts.py": ("vllm",),
    "runner/training/test_async_groups.py": ("trl",),
    "runner/training/test_trainer_advantages.py": ("trl",),
    "runner/training/test_trainer_sampling.py": ("trl",),
    "integration/test_adapter_delivery.py": ("vllm", "trl", "cluster"),
    "integration/test_async_trainer.py": ("vllm", "trl"),
    "integration/test_async_two_servers.py": ("vllm", "trl"),
    "integration/test_cluster.py": ("cluster",),
    "integration/test_faults.py": ("cluster",),
    "integration/test_interrupt.py": ("cluster",),
    "integration/test_locked_bus.py": ("cluster",),
    "integration/test_nemo_gym.py": ("nemo_gym", "cluster"),
    "integration/test_nemo_gym_agents.py": ("nemo_gym", "vllm", "cluster"),
    "integration/test_nemo_gym_census.py": ("nemo_gym",),
    "integration/test_nemo_gym_locked.py": ("nemo_gym", "cluster"),
    "integration/test_node_producer.py": ("node", "cluster"),
    "integration/test_operator_mode.py": ("node", "cluster"),
    "integration/test_policy_versions.py": ("vllm",),
    "integration/test_resume.py": ("cluster",),
    "integration/test_stolen_keys.py": ("cluster",),
    "integration/test_trainer.py": ("vllm", "trl"),
    "integration/test_trainer_sampling.py": ("vllm", "trl"),
    "integration/test_viewer_browser.py": ("browser",),
    "test_docs.py": ("vllm", "node"),
}

SLOW: set[str] = set()
"""Files that need none of the above but take long (measured with `--durations`)."""


def markers_of(path: str) -> tuple[str, ...]:
    """The markers of the test file at `path` (relative to tests/, with forward slashes)."""
    needs = NEEDS.get(path, ())
    return (*needs, "slow") if needs or path in SLOW else ()
