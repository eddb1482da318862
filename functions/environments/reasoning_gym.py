"""`reasoning_gym`: the `reasoning-gym` library's 100+ procedural tasks, scored by the
library's own scorer for the row's task. NeMo Gym's rules.

No tools. The answer is taken from all assistant `output_text` joined: the last
`<answer>…</answer>` (reasoning-gym's `extract_answer`), else the first `\\boxed{…}`,
else the whole text stripped. Reward = `score_answer(answer, entry)` of the task named
by `metadata.source_dataset`, with `entry = {question, answer, metadata}`; it can be
fractional. The result adds `task_name`, `score` and `extracted_answer`.

A row without `metadata.source_dataset`, a non-string `answer`, an unknown task, an
empty response or a scorer that raises give reward 0 with an `error_type`
(NeMo Gym answers the first two with a server error).

`task_rows` generates rows in NeMo Gym's format for any task; the command line for it is
`scripts/reasoning_gym_dataset.py --task mini_sudoku --size 2000 --seed 42 --output FILE`.

The library (with matplotlib, SymPy and NumPy behind it) takes a second to import on an
idle machine and several on a busy one: a worker imports it at start-up, before it says
it is ready, so no rollout waits for it. Its scorers are Python code, some slow (a
sudoku's check, a SymPy comparison), so the environment is `cpu_bound`: its calls run in
threads, off the worker's event loop. Not in child processes: a scorer is cheap next to
starting one, and building each task's dataset object once per process would be repeated
per child.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from gymbus.schemas import VerifyRequest, VerifyResult, output_text

from .._spec import Environment, Session

__all__ = ["ENVIRONMENT", "extract_answer", "task_rows"]

_BOXED = re.compile(r"\\boxed\{([^}]+)\}")


class ReasoningGymVerifyRequest(VerifyRequest, kw_only=True):
    question: Any = None
    answer: Any = None
    metadata: Any = None


class ReasoningGymResult(VerifyResult, kw_only=True, omit_defaults=True):
    task_name: str | None
    score: float
    extracted_answer: str | None
    error_type: str | None = None
    error_message: str | None = None


def extract_answer(text: str) -> str:
    """`<answer>` tags, else `\\boxed{}`, else the whole text (stripped)."""
    from reasoning_gym.utils import extract_answer as extract_tagged

    tagged = extract_tagged(text, tag_name="answer")
    if tagged is not None:
        return str(tagged)
    boxed = _BOXED.search(text)
    return boxed.group(1).strip() if boxed else text.strip()


@functools.cache
def _scorer(task_name: str) -> Callable[..., float]:
    # Building a task's dataset object is not free; one per task per process is enough.
    import reasoning_gym

    scorer: Callable[..., float] = reasoning_gym.get_score_answer_fn(task_name)
    return scorer


def _import_library() -> None:
    import reasoning_gym
    import reasoning_gym.utils  # noqa: F401  (extract_answer's)

    del reasoning_gym


def _failed(task: str | None, answer: str | None, error_type: str, message: str) -> ReasoningGymResult:
    return ReasoningGymResult(
        reward=0.0,
        task_name=task,
        score=0.0,
        extracted_answer=answer,
        error_type=error_type,
        error_message=message,
    )


def _score(task: str, answer: str, request: ReasoningGymVerifyRequest) -> ReasoningGymResult:
    try:
        scorer = _scorer(task)
    except ValueError:
        return _failed(task, answer, "unknown_task", f"reasoning-gym has no task {task!r}")
    entry = {"question": request.question, "answer": request.answer, "metadata": request.metadata}
    try:
        score = float(scorer(answer=answer, entry=entry))
    except Exception as exc:  # noqa: BLE001  (a scorer bug or an odd entry costs one reward, not the worker)
        return _failed(task, answer, "scoring_error", f"{type(exc).__name__}: {exc}"[:300])
    return ReasoningGymResult(reward=score, task_name=task, score=score, extracted_answer=answer)


async def verify(request: ReasoningGymVerifyRequest, session: Session) -> ReasoningGymResult:
    """Score the extracted answer with the task's own reasoning-gym scorer."""
    metadata = request.metadata if isinstance(request.metadata, dict) else {}
    task = metadata.get("source_dataset")
    if not isinstance(task, str) or not task:
        return _failed(None, None, "missing_field", "the row has no metadata.source_dataset")
    if request.answer is not None and not isinstance(request.answer, str):
        return _failed(task, None, "invalid_row", "the row's answer must be a string or null")
    text = output_text(request.response)
    if not text.strip():
        return _failed(task, "", "empty_response", "the response has no assistant text")
    return _score(task, extract_answer(text), request)


def task_rows(
    task: str, size: int, seed: int, config: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """`size` rows of reasoning-gym task `task` in NeMo Gym's format: the entry
    (`question`, `answer`, `metadata`) plus `responses_create_params` asking the question
    and `agent_ref` naming this environment's agent. Raises `ValueError` for an unknown task."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(task, **{**(config or {}), "size": size, "seed": seed})
    for index in range(size):
        entry = dataset[index]
        yield {
            "responses_create_params": {"input": [{"role": "user", "content": entry["question"]}]},
            **entry,
            "agent_ref": {"type": "responses_api_agents", "name": AGENT},
        }


AGENT = "reasoning_gym_simple_agent"

ENVIRONMENT = Environment(
    name="reasoning_gym",
    verify=verify,
    verify_request=ReasoningGymVerifyRequest,
    agents=(AGENT,),
    description="reasoning-gym procedural tasks scored by the library's own scorers (NeMo Gym's rules).",
    startup=_import_library,
    cpu_bound=True,
)
