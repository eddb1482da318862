"""No function in runner/ or bus/ runs over 50 lines, counting its whole span (signature and
docstring included): a long one names its steps as functions instead. An exception is listed
here with its reason, and leaves the list once it is short."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOST_LINES = 50
EXCEPTIONS: dict[str, str] = {}
"""`path:name` of a function allowed to be longer, with the reason (none today)."""


def long_functions() -> dict[str, int]:
    """`path:name` of each function over `MOST_LINES` lines in runner/ and bus/, with its length."""
    found = {}
    for path in sorted((*ROOT.joinpath("runner").rglob("*.py"), *ROOT.joinpath("bus").rglob("*.py"))):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MOST_LINES:
                    found[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = lines
    return found


def test_no_function_in_runner_or_bus_runs_over_50_lines() -> None:
    unexcused = {where: lines for where, lines in long_functions().items() if where not in EXCEPTIONS}
    assert unexcused == {}, f"name the steps of these functions (lines each): {unexcused}"


def test_each_exception_is_still_long() -> None:
    # A function made short leaves the list, so the list says what is still to do.
    assert set(EXCEPTIONS) <= set(long_functions())
