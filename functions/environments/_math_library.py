"""The `math-verify` check of `math_with_judge`, in a child process with a timeout.

`math-verify` parses the gold answer as LaTeX (wrapped in `\\boxed{}`) and the response
as a plain expression or LaTeX, and compares them with SymPy. SymPy can hang on hostile
input, so each check runs in a forked child that is killed at the timeout; a timeout, a
crash or an exception scores 0.0, as in NeMo Gym. Processes, not threads: a thread stuck in
SymPy cannot be stopped. The library (SymPy behind it: seconds on a busy machine) is
imported once in the worker at start-up (`load_library`), not by its first check on the
worker's event loop, so the forked children start warm; at most `max_children` checks
(NeMo Gym's `library_verifier_max_concurrency`) run at a time per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import multiprocessing
import signal
import weakref
from collections.abc import Callable
from functools import cache
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["MAX_CHILDREN", "library_check", "load_library", "strip_math_delimiters"]

MAX_CHILDREN = 32
"""Checks running at once in one worker by default (NeMo Gym's `library_verifier_max_concurrency`)."""

Outcome = tuple[float, str | None]
"""(library reward, extracted answer)."""

_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def strip_math_delimiters(answer: str) -> str:
    """`\\(x\\)` → `x` and `$x$` → `x`: gold answers often carry them, and `\\boxed{$x$}`
    does not parse."""
    answer = answer.strip()
    if answer.startswith("\\(") and answer.endswith("\\)"):
        answer = answer[2:-2].strip()
    if answer.startswith("$") and answer.endswith("$") and len(answer) > 1:
        answer = answer[1:-1].strip()
    return answer


@cache
def _verifier() -> tuple[Callable[..., Any], Callable[..., bool]]:
    """`math_metric` (gold as LaTeX; prediction as an expression or LaTeX) and `verify`."""
    from math_verify import grader
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    metric = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    return metric, grader.verify


def load_library() -> None:
    """Import math-verify (and SymPy) in this process: a worker's start-up."""
    _verifier()


def _check(expected: str, generated: str) -> Outcome:
    """The library reward and the extracted answer: the first prediction equal to a gold
    reading, else the first prediction. Runs in the child."""
    from math_verify.errors import TimeoutException

    metric, verify = _verifier()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            score, extracted = metric(["\\boxed{" + strip_math_delimiters(expected) + "}"], [generated])
            if extracted is None:
                return float(score), None
            golds, predictions = extracted
            matching = (p for p in predictions if any(verify(gold, p) for gold in golds))
            answer = next(matching, predictions[0] if predictions else None)
        return float(score), None if answer is None else str(answer)
    except (Exception, TimeoutException):  # noqa: BLE001 - any failure scores 0, as in NeMo Gym
        return 0.0, None


def _child(expected: str, generated: str, sender: Connection) -> None:
    # The parent's signal handlers (an asyncio loop's) must not keep the child alive.
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    try:
        sender.send(_check(expected, generated))
    finally:
        sender.close()


async def _receive(receiver: Connection, timeout: float) -> Outcome:
    """The child's outcome, waiting on the pipe without blocking the event loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(receiver.fileno(), readable)
    try:
        await asyncio.wait_for(ready, timeout)
        outcome: Outcome = receiver.recv()
        return outcome
    except (TimeoutError, EOFError, OSError):
        return 0.0, None  # too slow, or died without answering
    finally:
        loop.remove_reader(receiver.fileno())


async def _reap(process: BaseProcess) -> None:
    """Kill the child if it is still running and collect it, without blocking the loop."""
    if process.is_alive():
        process.kill()
    for _ in range(200):
        if not process.is_alive():  # is_alive() reaps a finished child
            return
        await asyncio.sleep(0.01)


async def library_check(
    expected: str, generated: str, timeout: float, max_children: int = MAX_CHILDREN
) -> Outcome:
    """`math-verify`'s reward for `generated` against the gold `expected`, and the answer it
    extracted; (0.0, None) on a timeout (seconds) or any failure, and for a blank response
    (which math-verify cannot read an answer from) without starting a child."""
    if not generated.strip():
        return 0.0, None
    _verifier()  # imported in the parent (at start-up in a worker): every child starts with it loaded
    slots = _slots.setdefault(asyncio.get_running_loop(), {})
    async with slots.setdefault(max_children, asyncio.Semaphore(max_children)):
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(expected, generated, sender), daemon=True)
        process.start()
        sender.close()
        try:
            return await _receive(receiver, timeout)
        finally:
            receiver.close()
            await _reap(process)
