"""`code_gen` rewards as NeMo Gym's code_gen does, pinned by hand-built responses.

Tests that run code need bubblewrap (`apt-get install -y bubblewrap`) and are skipped,
with that hint, without it; the fail-closed tests run either way.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus.functions import Session
from gymbus.functions.environments._sandbox import SandboxLimits
from gymbus.functions.environments._unit_tests import UnitTests, _compare_stdout, run_unit_tests, truncate
from gymbus.functions.environments.code_gen import CodeGenVerifyRequest, check, extract_code, unit_tests
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import FunctionFailed
from tests.functions.test_code_sandbox import needs_sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LIMITS = SandboxLimits(test_timeout=1)
needs_bwrap = needs_sandbox

SQUARE = {"unit_tests": {"inputs": ["2\n", "5\n"], "outputs": ["4", "25"]}}
RIGHT = "```python\nn = int(input())\nprint(n * n)\n```"


def request(text: str | None, metadata: Any = SQUARE, reasoning: str | None = None) -> CodeGenVerifyRequest:
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        output.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]})
    if text is not None:
        content = [{"type": "output_text", "text": text, "annotations": []}]
        output.append({"type": "message", "role": "assistant", "content": content})
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "Square n."}]},
        "response": {"id": "r", "created_at": 0, "model": "m", "output": output},
        "verifier_metadata": metadata,
    }
    return msgspec.convert(row, CodeGenVerifyRequest)


def example_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXAMPLES / "code_gen.jsonl").read_text().splitlines()]


# Code extraction (no sandbox)


def test_the_code_is_between_the_last_two_fence_lines() -> None:
    text = "First try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert extract_code(text) == "print(2)"
    assert extract_code("```\nx = 1\n```") == "x = 1"
    assert extract_code("no code here") == ""
    assert extract_code("```python\nprint(1)") == ""  # an unclosed block is no code


def test_tests_are_read_plain_or_packed() -> None:
    packed = base64.b64encode(zlib.compress(json.dumps({"inputs": ["1"], "outputs": ["2"]}).encode()))
    tests = unit_tests({"unit_tests": {"packed": packed.decode(), "fn_name": "f"}})
    assert tests == UnitTests(inputs=["1"], outputs=["2"], fn_name="f")
    assert unit_tests(SQUARE) == UnitTests(inputs=["2\n", "5\n"], outputs=["4", "25"])
    assert [unit_tests(row["verifier_metadata"]) != "missing_unit_tests" for row in example_rows()] == [
        True
    ] * 5


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        (None, "missing_unit_tests"),
        ({}, "missing_unit_tests"),
        ({"unit_tests": {"inputs": [], "outputs": []}}, "missing_unit_tests"),
        ({"unit_tests": {"inputs": ["1"]}}, "invalid_unit_tests"),
        ({"unit_tests": {"inputs": ["1", "2"], "outputs": ["1"]}}, "invalid_unit_tests"),
        ({"unit_tests": {"inputs": [1], "outputs": ["1"]}}, "invalid_unit_tests"),
        ({"unit_tests": {"packed": "not base64!"}}, "invalid_unit_tests"),
        ({"unit_tests": {"inputs": ["{x"], "outputs": ["1"], "fn_name": "f"}}, "invalid_unit_tests"),
    ],
)
async def test_a_row_without_usable_tests_is_zero_with_a_reason(metadata: Any, reason: str) -> None:
    result = await check(request(RIGHT, metadata), LIMITS)
    assert (result.reward, result.error_type) == (0.0, reason)


async def test_a_response_without_text_is_zero_with_a_reason() -> None:
    for text in (None, "", "   \n"):
        result = await check(request(text), LIMITS)
        assert (result.reward, result.error_type) == (0.0, "no_response_text")


async def test_a_response_without_a_code_block_is_zero_with_a_reason() -> None:
    result = await check(request("n = int(input())\nprint(n * n)"), LIMITS)
    assert (result.reward, result.error_type) == (0.0, "no_code_block")
    assert result.extracted_model_output == "n = int(input())\nprint(n * n)"
    assert result.extracted_model_code is None and result.result is None


# LiveCodeBench's output comparison (through the sandbox)


@needs_bwrap
async def test_right_solution_earns_one() -> None:
    result = await check(request(f"Here it is:\n{RIGHT}\nIt squares n."), LIMITS)
    assert result.reward == 1.0 and result.error_type is None
    assert result.result == [True, True]
    assert result.extracted_model_code == "n = int(input())\nprint(n * n)"
    assert result.unit_tests_time_taken is not None and "execution time" in (result.metadata or {})


@needs_bwrap
async def test_a_real_example_row_is_solved_by_a_right_solution() -> None:
    row = example_rows()[4]  # beautiful numbers in a permutation
    solution = """```python
import sys
def main():
    data = sys.stdin.buffer.read().split()
    t, i, out = int(data[0]), 1, []
    for _ in range(t):
        n = int(data[i]); i += 1
        pos = [0] * (n + 1)
        for k in range(n):
            pos[int(data[i + k])] = k
        i += n
        lo = hi = pos[1]; answer = []
        for m in range(1, n + 1):
            lo, hi = min(lo, pos[m]), max(hi, pos[m])
            answer.append("1" if hi - lo + 1 == m else "0")
        out.append("".join(answer))
    print("\\n".join(out))
main()
```"""
    result = await check(request(solution, row["verifier_metadata"]), LIMITS)
    assert result.reward == 1.0 and result.result == [True, True, True]


@needs_bwrap
async def test_wrong_output_is_zero_and_says_where() -> None:
    result = await check(request("```python\nn = int(input())\nprint(n + 1)\n```"), LIMITS)
    assert (result.reward, result.error_type, result.result) == (0.0, "wrong_answer", [-2])
    assert result.metadata is not None
    assert result.metadata["error_message"] == "Wrong answer at output_line_idx=0: 3 != 4"
    assert (result.metadata["output"], result.metadata["expected"]) == ("3\n", "4")


@needs_bwrap
async def test_tests_stop_at_the_first_failure() -> None:
    code = "```python\nn = int(input())\nprint(4 if n == 2 else 0)\n```"
    result = await check(request(code), LIMITS)
    assert result.result == [True, -2] and result.reward == 0.0


@needs_bwrap
async def test_a_syntax_error_is_zero() -> None:
    result = await check(request("```python\nprint('hello'  # unclosed\n```"), LIMITS)
    assert (result.reward, result.error_type, result.result) == (0.0, "compile_error", [-4])
    assert result.metadata == {
        "error_code": -4,
        "error_message": "Error during testing: '(' was never closed (<string>, line 1)",
    }


@needs_bwrap
async def test_a_runtime_error_is_zero() -> None:
    result = await check(request("```python\nn = int(input())\nprint(n / 0)\n```"), LIMITS)
    assert (result.reward, result.error_type) == (0.0, "runtime_error")
    assert result.metadata is not None and result.metadata["error_message"] == "Runtime Error"
    assert result.metadata["error"] == "ZeroDivisionError('division by zero')"
    assert "ZeroDivisionError" in result.metadata["traceback"]


@needs_bwrap
async def test_a_timeout_is_zero() -> None:
    result = await check(request("```python\nwhile True:\n    pass\n```"), LIMITS)
    assert (result.reward, result.error_type, result.result) == (0.0, "time_limit_exceeded", [-3])
    assert result.metadata is not None and result.metadata["error_message"] == "Time Limit Exceeded"


@needs_bwrap
async def test_multiple_code_blocks_use_the_last() -> None:
    text = f"A wrong try:\n```python\nprint(0)\n```\nThe fix:\n{RIGHT}"
    result = await check(request(text), LIMITS)
    assert result.reward == 1.0 and result.extracted_model_code == "n = int(input())\nprint(n * n)"
    flipped = f"{RIGHT}\nActually:\n```python\nprint(0)\n```"
    assert (await check(request(flipped), LIMITS)).reward == 0.0


@needs_bwrap
async def test_leaked_think_tags_cost_the_reward() -> None:
    result = await check(request(f"<think>hmm</think>\n{RIGHT}"), LIMITS)
    assert (result.reward, result.error_type, result.reasoning_format_violation_rate) == (
        0.0,
        "reasoning_format_violation",
        1.0,
    )
    assert result.result == [True, True]  # the code itself passed
    doubled = await check(request(RIGHT, reasoning="<think>a</think><think>b</think>"), LIMITS)
    assert doubled.reward == 0.0
    assert (await check(request(RIGHT, reasoning="<think>fine</think>"), LIMITS)).reward == 1.0


@needs_bwrap
async def test_judge_like_program_behaviour() -> None:
    """Implicit LiveCodeBench imports, exit(), threads, atexit and binary stdin all work."""
    programs = [
        "n = int(input())\nprint(int(pow(n, 2)))\nexit(1)",  # `pow` via the math preamble
        "import sys\nn = int(sys.stdin.buffer.read())\nsys.stdout.buffer.write(b'%d\\n' % (n * n))",
        "import threading\ndef main():\n    print(int(input()) ** 2)\nthreading.Thread(target=main).start()",
        "import atexit\nout = []\natexit.register(lambda: print(*out))\nout.append(int(input()) ** 2)",
        "if __name__ == '__main__':\n    print(int(open(0).read()) ** 2)",
        "print(gcd(0, int(input())) ** 2)",
    ]
    for program in programs:
        result = await check(request(f"```python\n{program}\n```"), LIMITS)
        assert result.reward == 1.0, (program, result.metadata)


# What NeMo Gym's code_gen (LiveCodeBench's `grade_stdio`, at its newest version) answers
# for each printed line and expected line: equal after stripping, or equal as lists of
# `Decimal`s, exactly. Python's `Decimal` reads any Unicode digit, so fullwidth and
# Arabic-Indic digits pass there too.
NEMO_GYM_STDOUT = [
    ("42", "42", True),
    ("４２", "42", True),
    ("42", "４２", True),
    ("٤٢", "42", True),
    ("0.3333333333333333 1000\n7", "0.3333333 1e3\n 7  ", False),  # no tolerance
    ("0.3333333 1000\n7", "0.3333333 1e3\n 7  ", True),
    ("1.0", "1", True),
    ("1e3", "1000", True),
    ("1_000", "1000", True),
    ("+5", "5", True),
    ("-0", "0", True),
    ("0.1000000001", "0.1", False),
    ("nan", "nan", True),
    ("NaN", "nan", False),
    ("sNaN", "1", False),  # NeMo Gym's comparison raises, and the test fails
    ("1000001", "1000000", False),
    ("1 2", "1 2 3", False),
    ("a b", "a  b", False),
]


@pytest.mark.parametrize(("printed", "expected", "passes"), NEMO_GYM_STDOUT)
def test_stdout_is_compared_as_nemo_gym_compares_it(printed: str, expected: str, passes: bool) -> None:
    assert (_compare_stdout(printed + "\n", expected) is None) == passes


@needs_bwrap
async def test_fullwidth_digits_earn_what_they_earn_in_nemo_gym() -> None:
    metadata = {"unit_tests": {"inputs": [""], "outputs": ["42"]}}
    assert (await check(request("```python\nprint('４２')\n```", metadata), LIMITS)).reward == 1.0
    exact = {"unit_tests": {"inputs": [""], "outputs": ["0.3333333"]}}
    assert (await check(request("```python\nprint(1 / 3)\n```", exact), LIMITS)).reward == 0.0


@needs_bwrap
async def test_function_call_tests() -> None:
    metadata = {
        "unit_tests": {"inputs": ["[1, 2]\n3", "[]\n0"], "outputs": ["[1, 2, 3]", "[0]"], "fn_name": "add"}
    }
    leetcode = (
        "```python\nclass Solution:\n    def add(self, xs: List[int], x: int):\n        return (*xs, x)\n```"
    )
    assert (await check(request(leetcode, metadata), LIMITS)).reward == 1.0
    plain = "```python\ndef add(xs, x):\n    print('noise')\n    return xs + [x]\n```"
    assert (await check(request(plain, metadata), LIMITS)).reward == 1.0
    wrong = await check(request("```python\ndef add(xs, x):\n    return xs\n```", metadata), LIMITS)
    assert (wrong.reward, wrong.result) == (0.0, [-2])
    assert wrong.metadata is not None and wrong.metadata["error_message"] == "Wrong Answer"
    missing = await check(request("```python\ndef other(): pass\n```", metadata), LIMITS)
    assert (missing.reward, missing.error_type) == (0.0, "runtime_error")
    floats = {"unit_tests": {"inputs": ["2"], "outputs": ["0.5"], "fn_name": "half"}}
    approx = "```python\ndef half(n):\n    return 1 / n + 1e-9\n```"
    assert (await check(request(approx, floats), LIMITS)).reward == 1.0


@needs_bwrap
async def test_a_run_past_its_total_budget_is_a_global_timeout() -> None:
    limits = SandboxLimits(test_timeout=1, total_timeout=0.5)
    tests = UnitTests(inputs=["1", "2"], outputs=["1", "2"])
    outcome = await run_unit_tests("import time\ntime.sleep(2)\nprint(input())", tests, limits)
    assert outcome.result == [-1, -1] and outcome.metadata["error_code"] == -1


def test_long_texts_are_truncated_at_both_ends() -> None:
    assert truncate("x" * 10) == "x" * 10
    assert truncate("a" * 200 + "b" * 200) == "a" * 150 + "...(truncated) ..." + "b" * 150


# Failing closed: no sandbox, no code run


async def test_without_bubblewrap_verify_fails_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code = f"```python\nopen({str(marker)!r}, 'w').write('ran')\n```"
    with pytest.raises(FunctionFailed, match=r"bubblewrap.*scripts/install-sandbox.sh"):
        await check(request(code), LIMITS)
    assert not marker.exists()


async def test_a_bubblewrap_that_cannot_sandbox_fails_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FunctionFailed, match="Creating new namespace failed: Operation not permitted"):
        await check(request(RIGHT), LIMITS)


async def test_the_environment_is_found_under_nemo_gyms_agent_name() -> None:
    env = ENVIRONMENTS["code_gen"]
    assert env.agents == ("code_gen_simple_agent",) and env.tools == ()
    result = await env.verify(request("no code"), Session(id="s"))
    assert (result.reward, result.error_type) == (0.0, "no_code_block")
