"""NeMo Gym's own verifier test cases give NeMo Gym's rewards here (see `nemo_gym_cases/`).

Each case runs the environment's verify on a hand-written row with the server settings the
NeMo Gym test used, a scripted judge where there is one, and checks the reward and the
fields NeMo Gym's test asserts, and, where the test does, the exact judge prompts.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import msgspec
import pytest

from gymbus.functions import Session
from gymbus.functions.environments._settings import settings_variable
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import VerifyResult
from tests.functions.nemo_gym_cases import (
    Case,
    code_gen,
    equivalence_llm_judge,
    examples,
    instruction_following,
    math_with_judge,
    mcqa,
    reasoning_gym,
    structured_outputs,
    tool_environments,
)
from tests.functions.verifier_rows import ScriptedJudge

CASES: dict[str, list[Case]] = {
    "mcqa": mcqa.CASES,
    "math_with_judge": math_with_judge.CASES,
    "structured_outputs": structured_outputs.CASES,
    "equivalence_llm_judge": equivalence_llm_judge.CASES,
    "instruction_following": instruction_following.CASES,
    "reasoning_gym": reasoning_gym.CASES,
    "code_gen": code_gen.CASES,
    **examples.CASES,
    **tool_environments.CASES,
}
PARAMS = [pytest.param(env, case, id=f"{env}: {case.name}") for env, cases in CASES.items() for case in cases]


def request_body(case: Case) -> dict[str, Any]:
    row = case.row() if callable(case.row) else case.row
    output = case.output() if callable(case.output) else case.output
    body: dict[str, Any] = {"responses_create_params": {"input": [{"role": "user", "content": "Q?"}]}}
    return {**body, **row, "response": {"id": "resp", "created_at": 0, "model": "m", "output": output}}


@pytest.mark.parametrize(("env", "case"), PARAMS)
async def test_a_nemo_gym_case_earns_nemo_gyms_reward(
    env: str, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    if case.needs is not None and shutil.which(case.needs) is None:
        pytest.skip(f"{case.needs} is not installed")
    monkeypatch.setenv(settings_variable(env), json.dumps(case.settings))
    environment = ENVIRONMENTS[env]
    replies = list(case.judge)
    judge = ScriptedJudge(lambda _: replies.pop(0))
    request = msgspec.convert(request_body(case), environment.verify_request)
    result = await environment.verify(request, Session(id="case", models=judge))
    assert isinstance(result, VerifyResult)
    verdict = json.loads(msgspec.json.encode(result))
    assert verdict["reward"] == pytest.approx(case.reward, abs=case.tolerance)
    assert {name: verdict.get(name) for name in case.fields} == case.fields
    assert (len(judge.calls), replies) == (len(case.judge), [])
    if case.judge_prompts is not None:
        assert judge.prompts() == list(case.judge_prompts)


def test_every_ported_environment_has_nemo_gym_cases() -> None:
    ported = {
        "mcqa", "math_with_judge", "instruction_following", "structured_outputs", "equivalence_llm_judge",
        "reasoning_gym", "example_single_tool_call", "example_multi_step", "math_advanced_calculations",
        "workplace_assistant", "google_search", "code_gen",
    }  # fmt: skip
    assert ported <= {env for env, cases in CASES.items() if cases}
