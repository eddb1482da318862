"""`gym-runner verify`: re-score stored rollouts with today's verifiers.

1. Scan: count the rows and find the agents they name (`agent_ref`, else `--agent`).
2. Connect: `NATS_URL`, or an embedded server plus one worker process serving the
   environments of those agents. With `NATS_URL`, the agents live on the bus count too,
   with the environment their service names (a hosted NeMo Gym server's agents, say).
3. Send each row, as it is (or, with `--inputs`, joined with the input row it was made
   from: see `_join`), to `gym.env.<env>.verify` of its agent's environment, with a
   fresh session id; at most `concurrency` rows are in flight. A transient failure (the
   worker restarting, say) is tried again, as an agent's verify call is; an environment
   nobody serves at the start fails its rows at once, without waiting on retries.
4. Write each rescored row in input order: the rows in flight form a window, and its
   oldest row is written as soon as its verdict is in, which frees a place for the next.
   A slow row holds the window, never the memory: at most `concurrency` rows are held.
5. Compare each new reward with the stored one, and write the sidecars:

    <out>.jsonl                       the rescored rows, in input order
    <stem>_disagreements.jsonl        rows whose new reward differs from the stored one
    <stem>_failures.jsonl             rows that could not be verified, with the reason
    <stem>_aggregate_metrics.json     per-agent metrics of the rescored rows
    <stem>_workers.log                the output of the workers `verify` started itself

A row that cannot be verified (not JSON, no `response`, no agent, an agent without a
built-in environment, no input row to join with, nobody serving its verify subject, an
error reply, an environment whose verify needs the rollout's own session: "not
re-verifiable", `Environment.re_verifiable`) becomes one failure row naming its file and
line; every other row is still verified.

The embedded default starts the environments the rows need and the policy model as
`policy` (an LLM judge's default); `--model-url` makes that an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec

from gymbus.bus import (
    Bus,
    ServeOptions,
    Verifier,
    not_served,
    open_bus,
    subjects,
)
from gymbus.functions import Agent, ModelOptions
from gymbus.functions.registry import AGENT_KINDS, AGENTS, ENVIRONMENTS, policy_adapter
from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    AgentRef,
    BusUnavailable,
    GymError,
    InputError,
    NoResponders,
    RemoteError,
    RequestTimeout,
    RolloutFailed,
    Timeouts,
)

from .._console import LISTED
from .._input import read_lines
from .._metrics import Metrics
from .._output import JsonlWriter, OutputPaths, sidecar
from .._progress import ProgressView
from .._sources import OwnFunctions
from .._workers import Supervised, WorkerProcesses, start_workers, stop_workers
from ._join import InputIndex, JoinTally
from ._rescore import (
    Disagreement,
    Stored,
    agrees,
    read_stored,
    rescored_row,
    stored_reward,
    unverified_row,
    verify_error,
)

__all__ = ["VerifyOptions", "VerifyPaths", "VerifyReport", "verify_rollouts"]


@dataclass(frozen=True)
class VerifyOptions:
    input: Path
    output: Path
    input_name: str | None = None
    """What messages call the input (`<stdin>` for a pipe copied to a file); its path by default."""
    agent: str | None = None
    """Agent of rows without `agent_ref` (NeMo Gym rollout files often have none)."""
    own: OwnFunctions = field(default_factory=OwnFunctions)
    """Functions of the user's own, given by file or module (`--agent my_agent.py`): the
    workers `verify` starts load them from there."""
    concurrency: int = DEFAULT_LIMITS.verify_concurrency
    """Rows in flight at once; also the most rows held for writing in order."""
    inputs: Path | None = None
    """The inputs the rollouts were made from (NeMo Gym's `<stem>_materialized_inputs.jsonl`,
    or the task file): each rollout is joined with its input row before it is verified."""
    nats_url: str | None = None
    model: ModelOptions | None = None
    """The judge's endpoint on the embedded default (an environment's `judge_model`,
    `policy` unless set otherwise); `None` means the offline policy."""
    timeouts: Timeouts = DEFAULT_TIMEOUTS


@dataclass(frozen=True)
class VerifyPaths:
    rescored: Path
    disagreements: Path
    failures: Path
    metrics: Path
    workers_log: Path

    @classmethod
    def for_output(cls, output: Path) -> VerifyPaths:
        collected = OutputPaths.for_output(output)  # the sidecars collect writes, named the same
        return cls(
            rescored=output,
            disagreements=sidecar(output, "disagreements.jsonl"),
            failures=collected.failures,
            metrics=collected.metrics,
            workers_log=collected.workers_log,
        )

    def all(self) -> tuple[Path, ...]:
        return (self.rescored, self.disagreements, self.failures, self.metrics, self.workers_log)


@dataclass
class VerifyReport:
    """What a re-verification found. `disagreements` and `failures` list the first `LISTED`."""

    paths: VerifyPaths
    rows: int = 0
    agreed: int = 0
    disagreed: int = 0
    unscored: int = 0
    """Rows verified that had no stored reward to compare with."""
    failed: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    failure_classes: Counter[str] = field(default_factory=Counter)
    metrics: Metrics = field(default_factory=Metrics)
    join: JoinTally | None = None
    """How the rollouts were joined with `--inputs`, when given."""
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def verified(self) -> int:
        return self.agreed + self.disagreed + self.unscored


@dataclass(frozen=True)
class _Verified:
    stored: Stored
    row: bytes
    fields: dict[str, msgspec.Raw]
    reward: float


@dataclass(frozen=True)
class _Failed:
    row: bytes
    failure_class: str
    message: str


@dataclass(frozen=True)
class _Verification:
    """What every row's verification needs."""

    verifier: Verifier
    options: VerifyOptions
    known: Mapping[str, Agent]
    served: set[str]
    inputs: InputIndex | None
    workers_log: Path | None
    """Where the workers `verify` started write; `None` when it started none (`NATS_URL`)."""


async def verify_rollouts(
    options: VerifyOptions, view: ProgressView, stop: asyncio.Event | None = None
) -> VerifyReport:
    """Re-verify every row of `options.input`; see the module docstring. `stop` ends it
    early: no new rows are sent, and the rows in flight are still written."""
    started = time.monotonic()
    paths = _prepare_paths(options)
    inputs = await asyncio.to_thread(InputIndex.build, options.inputs) if options.inputs else None
    report = VerifyReport(paths=paths, join=inputs.tally if inputs else None)
    try:
        total, needed = await _scan(options.input, options.agent)
        needed |= inputs.agents if inputs else set()
        async with open_bus(options.nats_url, name="gym-runner verify", timeouts=options.timeouts) as bus:
            known = AGENTS if bus.embedded else {**AGENTS, **await _live_agents(bus)}
            environments = sorted(
                {
                    known[name].environment
                    for name in needed
                    if name in known and _re_verifiable(known[name].environment)
                }
            )
            workers = await _start_workers(environments, bus, options) if bus.embedded else None
            try:
                served = await _served(bus, environments, view)
                log = paths.workers_log if workers is not None else None
                verification = _Verification(
                    Verifier(bus, options.timeouts), options, known, served, inputs, log
                )
                view.start(total, already=0)
                await _verify_all(verification, report, view, stop or asyncio.Event())
            finally:
                await stop_workers(workers, options.timeouts.drain + 5)
    finally:
        if inputs is not None:
            inputs.close()
    view.stop()
    paths.metrics.write_text(json.dumps(report.metrics.aggregate(), indent=2) + "\n")
    report.seconds = time.monotonic() - started
    return report


async def _live_agents(bus: Bus) -> dict[str, Agent]:
    """The agents live on the bus that are not built in (those over a hosted NeMo Gym
    server, say), each with the environment its service says it drives."""
    return {
        name: Agent(name=name, rollout=AGENT_KINDS["simple_agent"], environment=environment)
        for name, environment in (await bus.served_agents()).items()
        if name not in AGENTS
    }


def _prepare_paths(options: VerifyOptions) -> VerifyPaths:
    """The output paths, emptied; never one that is the input itself."""
    paths = VerifyPaths.for_output(options.output)
    sources = {options.input.resolve(), *([options.inputs.resolve()] if options.inputs else [])}
    for path in paths.all():
        if path.resolve() in sources:
            raise ValueError(f"{path} would overwrite an input file; choose another --output")
    paths.rescored.parent.mkdir(parents=True, exist_ok=True)
    for path in paths.all():
        path.unlink(missing_ok=True)
    return paths


class _AgentOnly(msgspec.Struct):
    agent_ref: AgentRef | None = None


_agent_decoder = msgspec.json.Decoder(_AgentOnly)


async def _scan(path: Path, default_agent: str | None) -> tuple[int, set[str]]:
    """Rows in the file, and the agents they name (rows that do not decode count, unnamed)."""
    rows = 0
    needed: set[str] = set()
    async for _, line in read_lines(path):
        rows += 1
        try:
            ref = _agent_decoder.decode(line).agent_ref
        except msgspec.DecodeError:
            continue
        name = ref.name if ref is not None else default_agent
        if name is not None:
            needed.add(name)
    return rows, needed


async def _start_workers(environments: list[str], bus: Bus, options: VerifyOptions) -> Supervised | None:
    """One worker process serving `environments` on the embedded server, and the policy
    model as `policy`, which judges of environments like `equivalence_llm_judge` call."""
    if not environments:
        return None
    model = policy_adapter(options.model)
    serve = ServeOptions(
        functions=(*options.own.for_worker(environments), model),
        model=options.model or ModelOptions(),
        timeouts=options.timeouts,
    )
    log = VerifyPaths.for_output(options.output).workers_log
    workers = WorkerProcesses(serve, bus.url, log, auth=bus.worker_auth())
    return await start_workers(bus, [(workers, [*environments, "policy"])], options.timeouts)


async def _served(bus: Bus, environments: list[str], view: ProgressView) -> set[str]:
    """The environments some worker serves; a warning names each verify subject nobody does."""
    served = await bus.served(environments)
    for environment in environments:
        if environment not in served:
            view.note(not_served(subjects.env_verify(environment), "its rows go to the failures file"))
    return served


async def _verify_all(
    verification: _Verification, report: VerifyReport, view: ProgressView, stop: asyncio.Event
) -> None:
    """Send every row, and write the verdicts in input order (see the module docstring)."""
    path = verification.options.input_name or str(verification.options.input)
    writers = _Writers(report.paths, path)
    window: deque[asyncio.Task[_Verified | _Failed]] = deque()
    try:
        async for number, line in read_lines(verification.options.input):
            if stop.is_set():
                report.interrupted = True
                break
            window.append(asyncio.create_task(_verify_row(verification, line, path, number)))
            if len(window) >= verification.options.concurrency:
                await writers.write(await window.popleft(), report, view)
        while window:
            await writers.write(await window.popleft(), report, view)
    finally:
        for task in window:
            task.cancel()
        await writers.flush()


async def _verify_row(
    verification: _Verification, line: bytes, path: str, number: int
) -> _Verified | _Failed:
    """One row's verdict, or why it has none. Raises only if the bus itself is gone."""
    try:
        if verification.inputs is None:
            stored = read_stored(line, path, number, verification.options.agent, verification.known)
        else:
            request, kept = verification.inputs.join(line, path, number)
            stored = read_stored(request, path, number, verification.options.agent, verification.known)
            stored = replace(stored, reward=stored_reward(kept))
    except InputError as exc:
        return _failed(line, number, "invalid_input", str(exc))
    except RolloutFailed as exc:
        return _failed(line, number, exc.failure_class, exc.message)
    if not _re_verifiable(stored.environment):
        return _failed(stored.body, number, "not_re_verifiable", _NOT_RE_VERIFIABLE.format(
            where=f"{path}:{number}", environment=stored.environment))  # fmt: skip
    if stored.environment not in verification.served:
        return _unserved(stored, path, verification.workers_log)
    try:
        reply = await verification.verifier.verdict(stored.environment, stored.body)
        row, fields, reward = rescored_row(stored.body, reply)
    except NoResponders:
        return _unserved(stored, path, verification.workers_log)
    except RequestTimeout as exc:
        return _failed(stored.body, number, "verify_failed", f"{path}:{number}: verify timed out: {exc}")
    except RemoteError as exc:
        return _failed(stored.body, number, "verify_failed", verify_error(exc, path, number))
    except RolloutFailed as exc:
        return _failed(stored.body, number, exc.failure_class, f"{path}:{number}: {exc.message}")
    except BusUnavailable:
        raise
    except GymError as exc:
        return _failed(stored.body, number, "verify_failed", f"{path}:{number}: verify failed: {exc}")
    return _Verified(stored, row, fields, reward)


_NOT_RE_VERIFIABLE = (
    "{where}: not re-verifiable: {environment} says its verify needs the rollout's own session "
    "(Environment.re_verifiable is False), which a stored rollout no longer has"
)


def _re_verifiable(name: str) -> bool:
    """Whether the environment `name`, as far as this process knows it, can judge a stored
    rollout; one known only on the bus is taken to."""
    environment = ENVIRONMENTS.get(name)
    return environment is None or environment.re_verifiable


def _unserved(stored: Stored, path: str, workers_log: Path | None) -> _Failed:
    subject = subjects.env_verify(stored.environment)
    hint = (
        f"the worker verify started for it stopped serving it (see {workers_log})"
        if workers_log is not None
        else f"start one with `gym-runner serve {stored.environment}`"
    )
    return _failed(
        stored.body, stored.line, "no_worker", f"{path}:{stored.line}: {not_served(subject, hint)}"
    )


def _failed(line: bytes, number: int, failure_class: str, message: str) -> _Failed:
    return _Failed(unverified_row(line, number, failure_class, message), failure_class, message)


class _Writers:
    """The three JSONL outputs, written in input order, and the tally of the report."""

    def __init__(self, paths: VerifyPaths, source: str) -> None:
        self.source = source
        self.rescored = JsonlWriter(paths.rescored)
        self.disagreements = JsonlWriter(paths.disagreements)
        self.failures = JsonlWriter(paths.failures)

    async def write(self, outcome: _Verified | _Failed, report: VerifyReport, view: ProgressView) -> None:
        report.rows += 1
        if isinstance(outcome, _Failed):
            self._fail(outcome, report)
        else:
            self._rescore(outcome, report)
        view.advance(1, report.metrics.mean_reward)
        if len(self.rescored.buffer) + len(self.failures.buffer) > DEFAULT_LIMITS.write_batch_lines:
            await self.flush()

    def _fail(self, outcome: _Failed, report: VerifyReport) -> None:
        self.failures.add(outcome.row)
        report.failed += 1
        report.failure_classes[outcome.failure_class] += 1
        if len(report.failures) < LISTED:
            report.failures.append(outcome.message)

    def _rescore(self, outcome: _Verified, report: VerifyReport) -> None:
        stored = outcome.stored
        self.rescored.add(outcome.row)
        report.metrics.add(stored.agent, outcome.fields)
        if stored.reward is None:
            report.unscored += 1
        elif agrees(stored.reward, outcome.reward):
            report.agreed += 1
        else:
            report.disagreed += 1
            self._disagree(outcome, report)

    def _disagree(self, outcome: _Verified, report: VerifyReport) -> None:
        stored = outcome.stored
        assert stored.reward is not None
        disagreement = Disagreement(
            path=self.source,
            line=stored.line,
            agent=stored.agent,
            task_index=stored.task_index,
            rollout_index=stored.rollout_index,
            stored=stored.reward,
            new=outcome.reward,
        )
        self.disagreements.add(disagreement.row())
        if len(report.disagreements) < LISTED:
            report.disagreements.append(disagreement)

    async def flush(self) -> None:
        for writer in (self.rescored, self.disagreements, self.failures):
            await writer.flush()
