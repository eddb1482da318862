"""`gym-runner collect`: from an input JSONL to rewarded rollouts, through the task queue.

0. Take the output's lock (`_lock`): one run per output file.
1. Plan: validate the input and number its rollouts (`_plan`).
2. Connect: `NATS_URL`, or an embedded server plus the workers the dataset's agents need.
3. Submit each rollout as a task of the run (`bus.RunClient`: signed, deduplicated, durable),
   at most `--concurrency` in flight; each carries a deadline.
4. Write each result once as it arrives (`_sink`); a rollout whose result has not come
   by its deadline (plus a grace) is written as a failure, so no straggler holds the run.
5. Write the aggregate metrics; clean the run's results off the bus.

With `--resume`, keys already in the rollouts file are skipped, and keys that failed
fewer than `max_attempts` times are tried again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Collection, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from gymbus.bus import (
    Bus,
    EmbeddedServer,
    RunClient,
    ServeOptions,
    not_sent_message,
    not_served,
    open_bus,
    serve_hint,
    unserved_row,
)
from gymbus.functions import ModelOptions
from gymbus.functions.registry import AGENTS, ENVIRONMENTS, policy_adapter
from gymbus.schemas import (
    AGENT_REF,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    INPUT_LINE,
    BusUnavailable,
    ClaimStoreFull,
    Limits,
    PayloadTooLarge,
    Timeouts,
    failure_row,
)

from .._input import UnknownAgent, nearest
from .._metrics import Metrics
from .._output import MaterializedInputs, OutputPaths, Progressed, read_progress, write_whole
from .._progress import ProgressView
from .._sources import OwnFunctions
from .._workers import Supervised, WorkerProcesses, start_workers, stop_workers
from ._ledger import Ledger
from ._lock import OutputLock
from ._plan import Asked, BadRow, Plan, PlannedRollout
from ._sink import FailureTally, ResultSink
from ._summary import plural

__all__ = ["CollectOptions", "CollectResult", "collect"]

log = logging.getLogger("gymbus.collect")

_T = TypeVar("_T")


@dataclass(frozen=True)
class CollectOptions:
    input: Path
    output: Path
    agent: str | None = None
    input_name: str | None = None
    """What messages call the input (`<stdin>` for a pipe copied to a file); its path by default."""
    limit: int | None = None
    num_repeats: int = 1
    concurrency: int = DEFAULT_LIMITS.collect_concurrency
    resume: bool = False
    workers: int = DEFAULT_LIMITS.embedded_workers
    """Worker processes to start when running on the embedded server."""
    model: ModelOptions | None = None
    """An OpenAI-compatible endpoint; `None` means the offline policy."""
    policy: str | None = None
    """The model function serving the policy on the embedded default, by name (`--model
    my_model.py`); `None`: the adapter `model` calls for (`policy_adapter`)."""
    own: OwnFunctions = field(default_factory=OwnFunctions)
    """Functions of the user's own, given by file or module: the workers load them from there."""
    nats_url: str | None = None
    max_attempts: int = DEFAULT_LIMITS.max_attempts
    """Attempts per rollout across `--resume`s before its failure is final."""
    limits: Limits = DEFAULT_LIMITS
    timeouts: Timeouts = DEFAULT_TIMEOUTS


@dataclass
class CollectResult:
    paths: OutputPaths
    planned: int
    """Rollouts the input asks for, counting each bad row as one."""
    written: int
    """Rollouts this run wrote to the rollouts file."""
    failed: int
    """Failure rows this run wrote (failed rollouts and bad input rows)."""
    skipped: int
    """Planned rollouts an earlier run settled for good (`--resume`)."""
    seconds: float
    """The whole command, starting the bus and workers included."""
    metrics: Metrics
    interrupted: bool = False
    run_id: str = ""
    workers_log: Path | None = None
    """Where the workers this run started wrote their output; `None` if it started none."""
    done_before: int = 0
    """Of the skipped, those that are rollouts (the others are final failures)."""
    collecting: float = 0.0
    """Seconds from the first task published to the last result written."""
    failures: FailureTally = field(default_factory=FailureTally)
    """This run's failure rows by class."""

    @property
    def rollouts(self) -> int:
        """Planned rollouts now in the rollouts file, from this run or an earlier one."""
        return self.written + self.done_before

    @property
    def rate(self) -> float | None:
        """Rollouts (and failures) this run finished per second of collecting; `None` if none."""
        finished = self.written + self.failed
        return finished / self.collecting if finished and self.collecting > 0 else None


async def collect(
    options: CollectOptions, view: ProgressView, stop_publishing: asyncio.Event
) -> CollectResult:
    """Run a collection; see the module docstring. `stop_publishing` ends it early, after
    the rollouts already in flight are written. `OutputInUse` at once if another run is
    writing the same output."""
    with OutputLock(options.output):
        return await _collect(options, view, stop_publishing)


async def _collect(
    options: CollectOptions, view: ProgressView, stop_publishing: asyncio.Event
) -> CollectResult:
    started = time.monotonic()
    paths = OutputPaths.for_output(options.output)
    metrics = Metrics()
    asked, progressed, plan = await _planned(options, paths, metrics)
    async with open_bus(options.nats_url, name="gym-runner collect", timeouts=options.timeouts) as bus:
        if bus.embedded is None:
            await _check_live_agents(bus, plan, options.agent)
        await _start_output(options, paths, asked)
        workers = await _start_workers(options, plan, bus) if bus.embedded is not None else None
        stop_within = options.timeouts.drain + 5
        try:
            served = await bus.served(sorted(plan.agents))
            run_id = asked.run
            client = await RunClient.open(
                bus, run_id, resume=options.resume, limits=options.limits, timeouts=options.timeouts
            )
            ledger = Ledger(plan.total, options.concurrency, options.timeouts.result_grace)
            sink = ResultSink(client, ledger, paths, metrics, view, progressed)
            sink.start()
            await client.watch_given_up(lambda seq, deliveries: _given_up(sink, seq, deliveries))
            view.start(plan.total, already=0)
            state = _RunState(options, plan, progressed, served, client, ledger, sink, view, stop_publishing)
            counts = await _run(state, _watch_processes(bus.embedded, workers))
            collecting = view.elapsed()
            finished = ledger.settled == ledger.total
            await sink.stop(forget=finished)
        except asyncio.CancelledError:
            stop_within = options.timeouts.kill_grace  # stopping now: their work is abandoned
            raise
        except Exception as exc:
            _raise_if_gone(bus.embedded, exc)  # the cause, not how it was first noticed
            raise
        finally:
            await stop_workers(workers, stop_within)
    view.stop()
    await _write_metrics(paths, metrics)
    return CollectResult(
        paths=paths, planned=plan.total, written=sink.rollouts.lines, failed=sink.failures.lines,
        skipped=counts["skipped"], seconds=time.monotonic() - started, metrics=metrics,
        interrupted=not finished, run_id=run_id, workers_log=paths.workers_log if workers else None,
        done_before=counts["done_before"], collecting=collecting, failures=sink.failed,
    )  # fmt: skip


async def _planned(
    options: CollectOptions, paths: OutputPaths, metrics: Metrics
) -> tuple[Asked, Progressed, Plan]:
    """What the command line asks, what earlier runs wrote (`--resume`), and the input's plan;
    raises, before anything starts, for a run that cannot go (a `--resume` of another run's
    plan, rows that name no agent, an agent or a setting the embedded default cannot serve)."""
    asked = Asked.of(
        options.input_name or str(options.input), options.num_repeats, options.limit, options.agent
    )
    if options.resume:
        asked = asked.resuming(paths.plan, options.output)
    progressed = await read_progress(paths, metrics) if options.resume else Progressed(set(), Counter())
    plan = await Plan.scan(
        options.input, limit=options.limit, num_repeats=options.num_repeats, default_agent=options.agent,
        name=options.input_name,
    )  # fmt: skip
    _check_named(plan)
    if options.nats_url is None:  # the embedded default can serve only the built-in agents
        _check_agents(plan, options.agent, known=AGENTS, served=set(AGENTS))
        _check_settings(plan)
    return asked, progressed, plan


async def _start_output(options: CollectOptions, paths: OutputPaths, asked: Asked) -> None:
    if not options.resume:
        paths.start_fresh()  # only now: a run refused before leaves an earlier run's files be
    paths.rollouts.parent.mkdir(parents=True, exist_ok=True)
    await write_whole(paths.plan, asked.encoded())


def _check_agents(plan: Plan, default: str | None, known: Collection[str], served: set[str]) -> None:
    """`UnknownAgent`, before any task is sent, for an `--agent` nobody serves, or a dataset
    none of whose agents anybody does; the message suggests the nearest `known` names. Rows
    of an unserved agent among served ones become failure rows naming their line."""
    if default is not None and default not in served:
        raise UnknownAgent(f"--agent {default}: {_why_unserved(default, known)}", usage=default not in known)
    if plan.agents and not served & set(plan.agents):
        why = "; ".join(
            f"{name} ({plural(count, 'rollout')}): {_why_unserved(name, known)}"
            for name, count in sorted(plan.agents.items())
        )
        # Names that are no agent at all are a bad value, as a misspelt --agent is.
        misnamed = not any(name in known for name in plan.agents)
        raise UnknownAgent(f"{plan.name}: no agent its rows name can run here: {why}", usage=misnamed)


def _check_named(plan: Plan) -> None:
    """`UnknownAgent` (bad usage), before anything starts, for rows that name no agent when
    no `--agent` says which runs them: each would only become a failure row."""
    if plan.first_unnamed is None:
        return
    raise UnknownAgent(
        f"{plan.name}:{plan.first_unnamed}: field `{AGENT_REF}`: missing, and no --agent was given "
        f"({plural(plan.unnamed, 'row')} name no agent): say which agent runs them with "
        f"--agent{nearest(Path(plan.name).stem, AGENTS) or f' (the agents: {_listed(AGENTS)})'}",
        usage=True,
    )


def _listed(names: Collection[str]) -> str:
    return ", ".join(sorted(names))


def _check_settings(plan: Plan) -> None:
    """`BadRequest` before anything starts if the settings variable of an environment the
    workers will serve (`GYMBUS_<ENV>`, which they inherit) is not that environment's
    settings: else every verify fails, after its rollout's model calls were paid."""
    for environment in sorted({AGENTS[name].environment for name in plan.agents if name in AGENTS}):
        spec = ENVIRONMENTS.get(environment)
        if spec is not None:
            spec.check_settings()


def _why_unserved(name: str, known: Collection[str]) -> str:
    if name in known:
        return not_served("it", serve_hint(name))
    listed = nearest(name, known) or f" (the agents: {_listed(known)})"
    return f"not an agent{listed}; an agent of your own is given by its file: --agent path/to/{name}.py"


async def _check_live_agents(bus: Bus, plan: Plan, default: str | None) -> None:
    """`_check_agents` against the agents live on a shared bus."""
    asked = {*plan.agents, *([default] if default else [])}
    served = await bus.served(sorted(asked))
    _check_agents(plan, default, known={*AGENTS, *await bus.served_agents()}, served=served)


async def _start_workers(options: CollectOptions, plan: Plan, bus: Bus) -> Supervised | None:
    known = AGENTS
    needed = [name for name in plan.agents if name in known]
    if not needed:
        return None
    model = options.own.for_worker([options.policy or policy_adapter(options.model)])[0]
    functions = options.own.for_worker(sorted({*needed, *(known[name].environment for name in needed)}))
    serve = ServeOptions(
        functions=(*functions, model), model=options.model or ModelOptions(), limits=options.limits
    )
    # Models an agent calls besides the policy (a user simulator) are served by the same adapter.
    others = sorted({other for name in needed for other in known[name].other_models})
    log = OutputPaths.for_output(options.output).workers_log
    url, auth = bus.url, bus.worker_auth()
    groups = [
        (
            WorkerProcesses(serve, url, log, options.workers, auth),
            [*needed, *{known[name].environment for name in needed}, "policy"],
        ),
        *(
            (
                WorkerProcesses(replace(serve, functions=(model,), served_model=other), url, log, auth=auth),
                [other],
            )
            for other in others
        ),
    ]
    return await start_workers(bus, groups, options.timeouts)


@dataclass
class _RunState:
    """What publishing a run shares with the rest of `collect`."""

    options: CollectOptions
    plan: Plan
    progressed: Progressed
    served: set[str]
    client: RunClient
    ledger: Ledger
    sink: ResultSink
    view: ProgressView
    stop_publishing: asyncio.Event


async def _run(state: _RunState, watchdog: Coroutine[Any, Any, None]) -> dict[str, int]:
    options = state.options
    materialized = MaterializedInputs(OutputPaths.for_output(options.output))
    expiry = asyncio.create_task(_expire_forever(state.ledger, state.sink, state.client))
    watching = asyncio.create_task(watchdog, name="the process watch")
    publishing = asyncio.create_task(_publish_unless_bus_lost(state, materialized))
    try:
        return await _supervised(publishing, expiry, watching, state.sink.loop_task)
    finally:
        for helper in (expiry, watching, publishing):
            helper.cancel()
        await asyncio.gather(expiry, watching, publishing, return_exceptions=True)
        materialized.abandon()  # unless complete: then there is nothing left to abandon


async def _watch_processes(server: EmbeddedServer | None, workers: Supervised | None) -> None:
    """Raise once the processes this run started can no longer do its work (the embedded
    server exited, or a group of workers was given up on: they kept exiting as they
    started), rather than wait for results that cannot come. A worker that dies is
    replaced by its supervisor (`runner._workers`); its tasks come back by redelivery."""
    while True:
        await asyncio.sleep(0.5)
        _raise_if_gone(server)
        if workers is not None:
            workers.check()


def _raise_if_gone(server: EmbeddedServer | None, cause: BaseException | None = None) -> None:
    if server is None:
        return
    code = server.exit_code if cause is None else server.exit_code_within(DEFAULT_TIMEOUTS.server_ping)
    if code is not None:
        raise BusUnavailable(f"the embedded nats-server exited with code {code}") from cause


async def _publish_unless_bus_lost(state: _RunState, materialized: MaterializedInputs) -> dict[str, int]:
    """`_publish_all`, which a stopping run (after one Ctrl-C or SIGTERM) gives up once the
    bus has been gone for `Timeouts.reconnect_window`: then none of the rollouts in flight
    can be written, and waiting for them (up to their deadlines) would only keep a
    terminal, or a pod's shutdown, waiting. They stay for `--resume`."""
    counts = {"skipped": 0, "done_before": 0}
    publishing = asyncio.create_task(_publish_all(state, materialized, counts))
    lost = asyncio.create_task(_lost_for_good_while_stopping(state))
    try:
        await asyncio.wait({publishing, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (publishing, lost):
            task.cancel()
        await asyncio.gather(publishing, lost, return_exceptions=True)
    if not publishing.cancelled():
        publishing.result()  # raises what ended it
    return counts


async def _lost_for_good_while_stopping(state: _RunState) -> None:
    await state.stop_publishing.wait()
    window = state.options.timeouts.reconnect_window
    await state.client.lost_for_good(window)
    state.view.note(
        f"the bus has been gone for {window:g} s: stopping without the "
        f"{plural(len(state.ledger.in_flight), 'rollout')} in flight"
    )


async def _publish_all(state: _RunState, materialized: MaterializedInputs, counts: dict[str, int]) -> None:
    timeouts = state.options.timeouts
    async for item in state.plan.rollouts():
        if state.stop_publishing.is_set():
            break
        if isinstance(item, PlannedRollout):
            await materialized.add(item.body)
        if _written_before(item, state.progressed, state.options.max_attempts):
            state.ledger.settle(item.seq)
            state.ledger.free_settled()
            state.view.skip(1)
            counts["skipped"] += 1
            counts["done_before"] += _done_before(item, state.progressed)
        elif isinstance(item, BadRow):
            state.sink.record(item.seq, _bad_row(item))
        elif item.agent not in state.served:
            state.sink.record(item.seq, _unserved_row(item, state.plan.name))
        else:
            await _launch(item, state, timeouts)
    else:
        await materialized.complete()
    await state.client.wait_submitted()
    await _wait_settled(state.ledger, state.stop_publishing)


async def _supervised(work: asyncio.Task[_T], *helpers: asyncio.Task[Any] | None) -> _T:
    """`work`'s result. A helper that stops first (the disk is full, the bus has been
    gone for a minute) ends `work` with the helper's error, rather than leaving it waiting
    for results nobody will write."""
    watched = {work, *(helper for helper in helpers if helper is not None)}
    await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return work.result()
    stopped = next(helper for helper in watched if helper.done())
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    stopped.result()  # raises what stopped it
    raise RuntimeError(f"{stopped.get_name()} stopped before the collection ended")


def _written_before(item: PlannedRollout | BadRow, progressed: Progressed, max_attempts: int) -> bool:
    """Whether an earlier run wrote `item`'s row for good: a rollout, its last allowed
    failure, or the failure row of a bad input line."""
    if isinstance(item, BadRow):
        return item.line in progressed.bad_lines
    key = (item.task_index, item.rollout_index)
    return key in progressed.done or progressed.failed[key] >= max_attempts


def _done_before(item: PlannedRollout | BadRow, progressed: Progressed) -> bool:
    return isinstance(item, PlannedRollout) and (item.task_index, item.rollout_index) in progressed.done


async def _launch(item: PlannedRollout, state: _RunState, timeouts: Timeouts) -> None:
    # The deadline starts once a slot is free: waiting for one is not the rollout's time.
    entry = await state.ledger.launch(
        item.seq, item.task_index, item.rollout_index, item.agent, timeouts.rollout
    )
    if entry is None:
        return
    attempt = state.progressed.failed[(item.task_index, item.rollout_index)]
    try:
        await state.client.submit(item.agent, item.body, item.seq, attempt, entry.deadline)
    except (ClaimStoreFull, PayloadTooLarge) as exc:  # a row too big to send now: written as failed
        state.sink.record(item.seq, entry.failure_row(exc.type, not_sent_message(exc)))


async def _wait_settled(ledger: Ledger, stop_publishing: asyncio.Event) -> None:
    """Until every rollout is settled, or (after a stop) every launched one is."""
    while not ledger.all_settled.is_set():
        if stop_publishing.is_set() and not ledger.in_flight:
            return
        try:
            async with asyncio.timeout(0.2):  # not wait_for, which can drop a cancellation
                await ledger.all_settled.wait()
        except TimeoutError:
            pass


async def _expire_forever(ledger: Ledger, sink: ResultSink, client: RunClient) -> None:
    while True:
        await asyncio.sleep(1.0)
        await client.check_submitted()
        for seq, row in ledger.expired():
            sink.record(seq, row)


def _given_up(sink: ResultSink, seq: int, deliveries: int) -> None:
    row = sink.ledger.given_up(seq, deliveries)
    if row is not None:
        sink.record(seq, row)


def _unserved_row(item: PlannedRollout, source: str) -> bytes:
    hint = (
        None
        if item.agent in AGENTS
        else f"{item.agent} is neither a built-in agent nor an installed one{nearest(item.agent, AGENTS)}"
    )
    where = f"{source}:{item.line}: field `{AGENT_REF}`"
    return unserved_row(item.body, item.agent, hint, where=where, **{INPUT_LINE: item.line})


def _bad_row(item: BadRow) -> bytes:
    return failure_row(b"", "invalid_input", str(item.error), **{INPUT_LINE: item.line})


async def _write_metrics(paths: OutputPaths, metrics: Metrics) -> None:
    await write_whole(paths.metrics, (json.dumps(metrics.aggregate(), indent=2) + "\n").encode())
