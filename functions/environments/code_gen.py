"""`code_gen`: competitive programming, NeMo Gym's code_gen (LiveCodeBench format). No tools.

Reward rule (NeMo Gym's `resources_servers/code_gen`):

1. The response's output text is empty → 0.0.
2. The code is the text between the last two lines containing a ``` fence (so the last
   fenced block wins); none → 0.0.
3. The code runs against `verifier_metadata.unit_tests` (`inputs`, `outputs`, optional
   `fn_name`; or NeMo Gym's compressed `packed` form) in order, stopping at the first
   failure, with a 10 CPU-second limit per test (see `_unit_tests` for the grading).
   Reward 1.0 iff every test passes.
4. `<think>`/`</think>` in the final answer, or more than one of either in the
   reasoning summary, sets the reward to the reasoning-format penalty (0.0).

The verify result carries NeMo Gym's fields (`extracted_model_output`,
`extracted_model_code`, `result`, `metadata`, `unit_tests_time_taken`,
`reasoning_format_violation_rate`, `difficulty`) and `error_type`, why the reward is 0:
`no_response_text`, `no_code_block`, `missing_unit_tests`, `invalid_unit_tests`,
`compile_error`, `wrong_answer`, `time_limit_exceeded`, `runtime_error`,
`global_timeout` or `reasoning_format_violation`.

Where GymBus differs from NeMo Gym, on purpose:

- Code runs in a bubblewrap sandbox (`_sandbox`), never on the worker; each test in a
  fresh process with real stdin and stdout (so `sys.stdin.buffer`, `open(0)`, threads
  and `atexit` behave as on a judge), and every process a test starts ends with it.
  Without bubblewrap or libseccomp, verify fails (a failure row); it never runs code
  unsandboxed. Where the worker can make no cgroup, each test must stay one process
  (fork fails), and the worker says so in its log when it starts.
- Only the standard library is importable (NeMo Gym's environment also has numpy).
- A row without tests, or whose inputs and outputs differ in number, is reward 0 with
  `error_type` (NeMo Gym fails the request, passes any code when there are no tests, and
  ignores the unmatched tests).
- A test's time limit is 10 CPU seconds, with a wall-clock backstop (NeMo Gym: 10
  wall-clock seconds), and a submission gets 240 s from when its verify starts, waiting
  for a sandbox slot included (NeMo Gym scales its global timeout with the number of
  tests and does not count waiting), to stay within the bus's verify timeout.
  Submissions take fair turns at a worker's slots (`_turns`). Past the caller's
  deadline (`Session.deadline`) the sandbox is killed and verify fails with
  `DeadlineExceeded`, as it does when a submission got no slot at all within its 240 s.
  `unit_tests_time_taken` is, as in NeMo Gym, the time the tests held a slot.
- Memory is 2 GiB of address space per process and 2 GiB per submission, all its
  processes and files together (NeMo Gym: 4 GB of data segment per test).
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from typing import Any

import msgspec

from gymbus.schemas import FunctionFailed, Response, VerifyRequest, VerifyResult, output_text

from .._spec import Environment, Session
from ._sandbox import DEFAULT_SANDBOX_LIMITS, SandboxLimits, SandboxUnavailable, describe
from ._unit_tests import Outcome, UnitTests, run_unit_tests

__all__ = [
    "ENVIRONMENT",
    "REASONING_FORMAT_PENALTY",
    "CodeGenVerifyRequest",
    "CodeGenVerifyResult",
    "check",
    "extract_code",
    "reasoning_format_violation",
    "unit_tests",
    "verify",
]

REASONING_FORMAT_PENALTY = 0.0
"""Reward of a response whose think tags leaked (NeMo Gym's `reasoning_format_penalty`)."""

log = logging.getLogger("gymbus.code_gen")

_ERROR_TYPES = {-1: "global_timeout", -2: "wrong_answer", -3: "time_limit_exceeded", -4: "runtime_error"}


class CodeGenVerifyRequest(VerifyRequest, kw_only=True):
    verifier_metadata: Any = None


class CodeGenVerifyResult(VerifyResult, kw_only=True):
    extracted_model_output: str | None = None
    extracted_model_code: str | None = None
    result: list[bool | int] | None = None
    metadata: dict[str, Any] | None = None
    unit_tests_time_taken: float | None = None
    reasoning_format_violation_rate: float = 0.0
    difficulty: Any = None
    error_type: str | None = None


def extract_code(text: str) -> str:
    """The lines between the last two lines holding ``` (LiveCodeBench's rule), or ""."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


def unit_tests(metadata: Any) -> UnitTests | str:
    """The row's tests, or the `error_type` of why there are none usable."""
    raw = metadata.get("unit_tests") if isinstance(metadata, dict) else None
    if not isinstance(raw, dict) or not raw:
        return "missing_unit_tests"
    try:
        if "packed" in raw:  # NeMo Gym's zlib+base64 form for big test sets
            unpacked = json.loads(zlib.decompress(base64.b64decode(raw["packed"])))
            raw = {
                "inputs": unpacked["inputs"],
                "outputs": unpacked["outputs"],
                "fn_name": raw.get("fn_name"),
            }
        tests = msgspec.convert(raw, UnitTests)
    except (msgspec.ValidationError, ValueError, TypeError, KeyError, zlib.error):
        return "invalid_unit_tests"
    if not tests.inputs:
        return "missing_unit_tests"
    if len(tests.inputs) != len(tests.outputs) or not _calls_parse(tests):
        return "invalid_unit_tests"
    return tests


def _calls_parse(tests: UnitTests) -> bool:
    """Function-call tests must be JSON: one argument per input line, one output."""
    if tests.fn_name is None:
        return True
    try:
        for test_input, output in zip(tests.inputs, tests.outputs):
            [json.loads(line) for line in test_input.split("\n")]
            json.loads(output)
    except ValueError:
        return False
    return True


def reasoning_format_violation(response: Response) -> bool:
    """Think tags in the final answer, or repeated in the reasoning summary."""
    answer = output_text(response)
    if "<think>" in answer or "</think>" in answer:
        return True
    reasoning = "".join(
        part.text
        for item in response.output
        if item.kind == "reasoning" and isinstance(item.summary, list)
        for part in item.summary
    )
    return reasoning.count("<think>") > 1 or reasoning.count("</think>") > 1


async def verify(request: CodeGenVerifyRequest, session: Session) -> CodeGenVerifyResult:
    """Reward 1.0 iff the last fenced code block passes every unit test (module docstring)."""
    return await check(request, DEFAULT_SANDBOX_LIMITS, session.deadline)


async def check(
    request: CodeGenVerifyRequest, limits: SandboxLimits, deadline: float | None = None
) -> CodeGenVerifyResult:
    """`verify` with explicit sandbox limits and caller's deadline (unix seconds)."""
    metadata = request.verifier_metadata
    difficulty = metadata.get("difficulty") if isinstance(metadata, dict) else None
    text = output_text(request.response)
    if not text.strip():
        return CodeGenVerifyResult(reward=0.0, difficulty=difficulty, error_type="no_response_text")
    tests = unit_tests(metadata)
    code = extract_code(text)
    found = CodeGenVerifyResult(reward=0.0, extracted_model_output=text, difficulty=difficulty)
    if isinstance(tests, str) or not code:
        reason = tests if isinstance(tests, str) else "no_code_block"
        return msgspec.structs.replace(found, error_type=reason, extracted_model_code=code or None)
    outcome = await _run(code, tests, limits, deadline)
    # As NeMo Gym measures it: time running the tests, not time waiting for a slot.
    ran = msgspec.structs.replace(found, extracted_model_code=code, unit_tests_time_taken=outcome.seconds)
    return _graded(ran, request.response, outcome)


async def _run(code: str, tests: UnitTests, limits: SandboxLimits, deadline: float | None) -> Outcome:
    try:
        return await run_unit_tests(code, tests, limits, deadline)
    except SandboxUnavailable as exc:  # fail closed: a failure row, never unsandboxed code
        raise FunctionFailed(f"code_gen cannot run code safely: {exc}") from None


def _graded(ran: CodeGenVerifyResult, response: Response, outcome: Outcome) -> CodeGenVerifyResult:
    """`ran` with the reward and NeMo Gym's report of the test run."""
    violation = reasoning_format_violation(response)
    if violation:
        reward, error_type = REASONING_FORMAT_PENALTY, "reasoning_format_violation"
    elif outcome.passed:
        reward, error_type = 1.0, None
    else:
        reward, error_type = 0.0, _error_type(outcome)
    return msgspec.structs.replace(
        ran,
        reward=reward,
        result=outcome.result,
        metadata=outcome.metadata,
        reasoning_format_violation_rate=1.0 if violation else 0.0,
        error_type=error_type,
    )


def _error_type(outcome: Outcome) -> str:
    message = str(outcome.metadata.get("error_message", ""))
    if message.startswith("Error during testing"):
        return "compile_error"
    return _ERROR_TYPES.get(int(outcome.metadata.get("error_code", -4)), "runtime_error")


def report_sandbox() -> None:
    """Log what this worker's sandboxes enforce (a warning where some bound cannot hold)."""
    complete, line = describe()
    log.log(logging.INFO if complete else logging.WARNING, "code_gen sandbox: %s", line)


ENVIRONMENT = Environment(
    name="code_gen",
    verify=verify,
    verify_request=CodeGenVerifyRequest,
    agents=("code_gen_simple_agent",),
    startup=report_sandbox,
    description="Competitive programming: the last fenced Python block must pass every unit test "
    "(run in a bubblewrap sandbox).",
)
