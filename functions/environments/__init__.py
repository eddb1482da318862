"""Environments: every public module here defines one, `ENVIRONMENT`, named as its module is.

The registry knows them by entry point ("module:attribute", as Gymnasium's `EnvSpec`
stores one), listed here with the agents each declares, so listing names imports no
environment: a module is imported when one of its functions is first used, and a worker
imports only the environments it serves (code_gen's sandbox, the workplace's tables,
reasoning-gym's scorers are not every process's cost). tests/functions/test_registry.py
checks this table against the modules.
"""

from __future__ import annotations

__all__ = ["AGENT_ENTRY_POINTS", "ENVIRONMENT_ENTRY_POINTS"]

_DECLARED: dict[str, tuple[str, ...]] = {
    "code_gen": ("code_gen_simple_agent",),
    "equivalence_llm_judge": ("equivalence_llm_judge_simple_agent",),
    "example_multi_step": ("example_multi_step_simple_agent",),
    "example_multi_turn": ("example_multi_turn_agent",),
    "example_session_state_mgmt": ("example_session_state_mgmt_simple_agent",),
    "example_single_tool_call": ("example_single_tool_call_simple_agent",),
    "google_search": ("google_search_simple_agent",),
    "instruction_following": ("instruction_following_simple_agent",),
    "math_advanced_calculations": ("math_advanced_calculations_simple_agent",),
    "math_with_judge": ("math_with_judge_simple_agent",),
    "mcqa": ("mcqa_simple_agent",),
    "reasoning_gym": ("reasoning_gym_simple_agent",),
    "structured_outputs": (
        "structured_outputs_simple_agent",
        "structured_outputs_v3_simple_agent",
        "structured_outputs_v4_simple_agent",
        "structured_outputs_all_formats_simple_agent",
    ),
    "workplace_assistant": ("workplace_assistant_simple_agent",),
}
"""Each module here, by its environment's name: the agents that environment declares."""

ENVIRONMENT_ENTRY_POINTS: dict[str, str] = {name: f"{__name__}.{name}:ENVIRONMENT" for name in _DECLARED}
"""Every built-in environment, by name: where it is defined."""

AGENT_ENTRY_POINTS: dict[str, str] = {
    agent: ENVIRONMENT_ENTRY_POINTS[env] for env, agents in _DECLARED.items() for agent in agents
}
"""Every built-in agent, by name: the environment that declares it. An agent is made from
its environment's spec (the agent's kind and step limit are fields of it), so using one
imports that one environment's module."""
