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
    "integration/test_tool_learning.py": ("vllm", "trl"),
    "functions/test_nemo_gym_config.py": ("nemo_gym",),
    "integration/test_bench_nemo_gym_front.py": ("nemo_gym",),
    "integration/test_cluster.py": ("cluster",),
    "integration/test_faults.py": ("cluster",),
    "integration/test_front_nemo_gym_models.py": ("nemo_gym",),
    "integration/test_interrupt.py": ("cluster",),
    "integration/test_locked_bus.py": ("cluster",),
    "integration/test_nemo_gym.py": ("nemo_gym", "cluster"),
    "integration/test_nemo_gym_agents.py": ("nemo_gym", "vllm", "cluster"),
    "integration/test_nemo_gym_census.py": ("nemo_gym",),
    "integration/test_nemo_gym_front.py": ("nemo_gym", "vllm", "trl"),
    "integration/test_porting.py": ("nemo_gym",),
    "integration/test_local_model_recipe.py": ("vllm",),
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

SLOW = {
    # Measured with `pytest -m "not slow" --durations=80`: each file (or test, after `::`)
    # took seconds on a busy 2-core machine. Commands run end to end: worker processes,
    # an embedded server, a sandbox, a wheel, mypy.
    "test_types.py",
    "test_packaging.py",
    "test_import_cost.py",
    "integration/test_bounded_results.py",
    "integration/test_busy_workers.py",
    "integration/test_front_runs.py",
    "integration/test_check.py",
    "integration/test_code_gen.py",
    "integration/test_collect.py",
    "integration/test_demos.py",
    "integration/test_front_recipes.py",
    "integration/test_search_and_multi_turn.py",
    "integration/test_one_wording.py",
    "integration/test_own_environment.py",
    "integration/test_serve.py",
    "integration/test_started_front.py",
    "integration/test_stopping_without_a_bus.py",
    "integration/test_text_verifier_environments.py",
    "integration/test_tool_environments.py",
    "integration/test_verifier_environments.py",
    "integration/test_verify.py",
    "functions/test_code_sandbox.py",
    "functions/test_code_sandbox_escapes.py",
    "functions/test_reasoning_gym.py::test_the_script_reports_an_unknown_task",
    "functions/test_reasoning_gym.py::test_the_script_writes_nemo_gym_rows",
    "runner/test_disk_full.py",
    "runner/test_workers.py",
    "runner/test_scaffold.py",
    "runner/test_prepare.py::test_an_unreachable_hub_is_a_clear_error",
    "runner/viewer/test_view_app.py::test_no_other_command_loads_the_viewer_or_a_web_server",
}
"""Files (or single tests) that need none of the above but take long."""


def markers_of(path: str, test: str = "") -> tuple[str, ...]:
    """The markers of test `test` (its function's name) in the file at `path` (relative to
    tests/, with forward slashes)."""
    needs = NEEDS.get(path, ())
    slow = needs or path in SLOW or f"{path}::{test}" in SLOW
    return (*needs, "slow") if slow else ()
