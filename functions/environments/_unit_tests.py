"""A submission's unit tests, run in a sandbox and graded as NeMo Gym's code_gen grades
them (LiveCodeBench's `testing_util`).

Two kinds of test, as in LiveCodeBench's `input_output` format:

- **standard input** (`fn_name` unset): the input is the program's stdin; its stdout
  must match the expected output line by line after stripping whitespace, or else as a
  line of numbers: Python's `Decimal` of each token, compared exactly (so `1.0` is `1`
  and `1e3` is `1000`, but `0.3333333` is not `0.33333333`; `Decimal` reads any Unicode
  digit, so `４２` is `42`, as in NeMo Gym);
- **function call** (`fn_name` set): each line of the input is one JSON argument; the
  function's return value must equal the JSON expected output (tuples as lists, or the
  same JSON text, or floats within numpy's `allclose` tolerance).

Tests run in order and stop at the first failure. `result` has one entry per test run:
`True` (passed), `-2` (wrong answer), `-3` (time limit exceeded), `-4` (runtime or
compile error); `-1` for every test when the submission ran out of its time budget
(`SandboxLimits.total_timeout`, from when its verify began).

A worker's submissions take fair turns at its sandbox slots (`_turns`); a submission that
is handed over between tests continues in a fresh sandbox. When the caller's deadline
passes first, the sandbox is killed and `DeadlineExceeded` raised: nobody waits for the
verdict. A submission that never got a slot within its budget (an overloaded worker)
raises it too, rather than earn a 0 its code did not cause.
`metadata` is NeMo Gym's: `error_code`, `error_message`, and the failing test's
`inputs`, `expected`, `output`, `error` and `traceback` (truncated), or
`{"execution time": ...}` (CPU seconds) when all passed.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from msgspec import Struct

from gymbus.schemas import DeadlineExceeded

from ._sandbox import DEFAULT_SANDBOX_LIMITS, ProgramRun, SandboxLimits, open_sandbox
from ._sandbox_slots import Account, slots_for

__all__ = ["Outcome", "UnitTests", "run_unit_tests"]

WRONG_ANSWER, TIME_LIMIT_EXCEEDED, RUNTIME_ERROR, GLOBAL_TIMEOUT = -2, -3, -4, -1


class UnitTests(Struct, kw_only=True):
    """`verifier_metadata.unit_tests` of a code_gen row (LiveCodeBench's format)."""

    inputs: list[str]
    outputs: list[str]
    fn_name: str | None = None


@dataclass
class Outcome:
    """Per-test results and what went wrong, as NeMo Gym reports them."""

    result: list[bool | int]
    metadata: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    """Wall-clock seconds the tests held a sandbox slot (waiting for one not counted)."""

    @property
    def passed(self) -> bool:
        return bool(self.result) and all(r is True for r in self.result)


async def run_unit_tests(
    code: str, tests: UnitTests, limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS, deadline: float | None = None
) -> Outcome:
    """Run `code` on `tests`, in fair turns at this worker's slots, within the
    submission's time budget and the caller's `deadline` (unix seconds; `None`: none).

    Raises `SandboxUnavailable` if there is no sandbox, and `DeadlineExceeded` if the
    caller's deadline passed, or no slot came free within the budget (module docstring).
    """
    budget_ends = time.time() + limits.total_timeout
    ends = budget_ends if deadline is None else min(deadline, budget_ends)
    run = _Run(code, tests, limits)
    try:
        async with asyncio.timeout(ends - time.time()):
            outcome = await run.all_tests()
        outcome.seconds = run.account.served
        return outcome
    except TimeoutError:
        if deadline is not None and deadline <= budget_ends:
            raise DeadlineExceeded("the caller's deadline passed while the code was being tested") from None
        if not run.turn_began:
            message = f"no sandbox slot came free within {limits.total_timeout:g} s: the worker is overloaded"
            raise DeadlineExceeded(message) from None
        outcome = _global_timeout(len(tests.inputs), limits)
        outcome.seconds = run.account.served
        return outcome


class _Run:
    """One submission's tests, run over one or more turns at the slots."""

    def __init__(self, code: str, tests: UnitTests, limits: SandboxLimits) -> None:
        self.code = code
        self.tests = tests
        self.limits = limits
        self.account = Account()
        self.turn_began = False
        self.results: list[bool | int] = []
        self.cpu_seconds = 0.0

    async def all_tests(self) -> Outcome:
        slots = slots_for(self.limits.concurrency, self.limits.quantum)
        while True:
            async with slots.turn(self.account) as turn:
                self.turn_began = True
                outcome = await self._some_tests(turn.should_yield)
            if outcome is not None:
                return outcome

    async def _some_tests(self, should_yield: Callable[[], bool]) -> Outcome | None:
        """Tests from where the last turn stopped, until done, failed, or `should_yield`."""
        tests, limits = self.tests, self.limits
        async with open_sandbox(self.code, tests.fn_name, limits) as sandbox:
            if sandbox.compile_error is not None:
                message = f"Error during testing: {sandbox.compile_error}"
                return Outcome([RUNTIME_ERROR], {"error_code": RUNTIME_ERROR, "error_message": message})
            while len(self.results) < len(tests.inputs):
                index = len(self.results)
                test_input, expected = tests.inputs[index], tests.outputs[index]
                run = await sandbox.run(test_input, limits.wall_timeout)
                failure = _failure(run, test_input, expected, tests.fn_name, limits)
                if failure is not None:
                    return Outcome([*self.results, failure["error_code"]], failure)
                self.results.append(True)
                self.cpu_seconds += run.cpu_seconds
                if should_yield() and len(self.results) < len(tests.inputs):
                    return None
        return Outcome(self.results, {"execution time": self.cpu_seconds})


def _global_timeout(count: int, limits: SandboxLimits) -> Outcome:
    message = f"Global timeout: the tests took longer than {limits.total_timeout:g} s in all"
    return Outcome([GLOBAL_TIMEOUT] * count, {"error_code": GLOBAL_TIMEOUT, "error_message": message})


def truncate(value: Any, length: int = 300) -> str:
    """LiveCodeBench's `truncatefn`: the two ends of a long text."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= length:
        return text
    return text[: length // 2] + "...(truncated) ..." + text[-length // 2 :]


def _failure(
    run: ProgramRun, test_input: str, expected: str, fn_name: str | None, limits: SandboxLimits
) -> dict[str, Any] | None:
    """NeMo Gym's metadata for a failed test, or `None` if it passed."""
    where = {"inputs": truncate(test_input), "expected": truncate(expected)}
    crash = _crash(run, limits)
    if crash is not None:
        return {**crash, **where}
    mismatch = _compare_call(run.output, expected) if fn_name else _compare_stdout(run.output, expected)
    if mismatch is None:
        return None
    return {"output": truncate(run.output), **where, "error_code": WRONG_ANSWER, "error_message": mismatch}


def _crash(run: ProgramRun, limits: SandboxLimits) -> dict[str, Any] | None:
    """A run that timed out or failed before producing an answer."""
    if run.timed_out:
        error = f"wall-clock limit of {limits.wall_timeout:g} s exceeded"
        return {"error": error, "error_code": TIME_LIMIT_EXCEEDED, "error_message": "Time Limit Exceeded"}
    cpu_killed = run.exit_code == -signal.SIGKILL and run.cpu_seconds >= math.ceil(limits.test_timeout)
    if run.exit_code == -signal.SIGXCPU or cpu_killed:
        error = f"CPU time limit of {math.ceil(limits.test_timeout)} s exceeded"
        return {"error": error, "error_code": TIME_LIMIT_EXCEEDED, "error_message": "Time Limit Exceeded"}
    if run.error is None and run.exit_code == 0:
        return None
    crash = {"error": run.error or _exit_reason(run.exit_code), "error_code": RUNTIME_ERROR}
    return {**crash, "error_message": "Runtime Error", "traceback": run.traceback or ""}


def _exit_reason(exit_code: int) -> str:
    if exit_code < 0:
        return f"killed by {signal.Signals(-exit_code).name}"
    return f"exited with status {exit_code}"


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _compare_stdout(output: str, expected: str) -> str | None:
    """LiveCodeBench's standard-input grading: `None` if equal, else why not."""
    got, want = _stripped_lines(output), _stripped_lines(expected)
    if len(got) != len(want):
        return "Wrong answer: mismatched output length"
    for index, (got_line, want_line) in enumerate(zip(got, want)):
        if got_line != want_line and not _decimal_lines_match(got_line, want_line):
            return f"Wrong answer at output_line_idx={index}: {truncate(got_line)} != {truncate(want_line)}"
    return None


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _decimal_lines_match(got_line: str, want_line: str) -> bool:
    """NeMo Gym's rule: both lines read as numbers, and the numbers are equal, exactly."""
    got, want = _decimals(got_line), _decimals(want_line)
    if got is None or want is None:
        return False
    try:
        return got == want
    except InvalidOperation:  # a signalling NaN refuses comparison (NeMo Gym's test crashes)
        return False


def _compare_call(output: str, expected: str) -> str | None:
    """LiveCodeBench's function-call grading: `None` if equal, else `"Wrong Answer"`."""
    try:
        got, want = json.loads(output), json.loads(expected)
    except ValueError:
        return "Wrong Answer"
    if got == want or json.dumps(got) == json.dumps(want) or _close_floats(got, want):
        return None
    return "Wrong Answer"


def _close_floats(got: Any, want: Any) -> bool:
    """numpy's `allclose(float(got), float(want))`, as LiveCodeBench compares numbers."""
    try:
        a, b = float(got), float(want)
    except (TypeError, ValueError):
        return False
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b)
