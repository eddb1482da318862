"""One server, both ways: NeMo Gym's own stack and GymBus on the same rows, against the same
recorded endpoint (`census_endpoint`), and what differs (`census_verdict` concludes).

1. GymBus: `gym-runner serve nemo-gym:<server>` beside the endpoint served on the bus under
   the same names (the `openai` adapter: the policy over the Responses API, each judge
   over Chat Completions), `collect` of the same rows with the same agent, `verify --inputs`
   of the same stored rollouts with the same materialized inputs. GymBus's own pre-check
   (its reading of the config, its install) can refuse the server: that is GymBus's
   side's failure only. A config that declares no agent is served and collected all the
   same: each side then says in its own words why its rows cannot run.
2. NeMo Gym: `ng_run` with the server's config and a model config pointing at the endpoint
   (`census_nemo_gym`), `ng_collect_rollouts` on the first rows of its `data/example.jsonl`
   with the agent they name (else its config's first), then, where it has
   `data/example_rollouts.jsonl` of its example rows, `gym eval reverify --force` of those
   stored rollouts (joined with their example rows by prompt, as materialized inputs). It
   runs whatever GymBus's pre-check said: where GymBus could not build an environment,
   NeMo Gym's own installer builds it, and where it refuses, its refusal is its side's own.

Each side ends `works` (every row collected) or in the outcome its failure's text names
(`classify`), with its own cause read from its own log (`census_verdict.cause`). Compared:
per-row rewards (collected, by task index; re-verified, by line, and with the rewards the
stored rollouts carry) and the requests each side sent the endpoint, as NeMo Gym sent them
(`census_endpoint.as_sent`). A re-verified row whose reward differs between the sides is
re-verified once more on each side, and a collection that differs is collected once more on
NeMo Gym's side: a row or request is unsettled only where one side's own two tries differ
on it (`census_verdict`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from census_endpoint import Recorder
from census_nemo_gym import POLICY, STOPPED, OwnStack, materialize, model_names, needs_vllm
from census_verdict import (
    CLASSES,
    TIMED_OUT,
    BothWays,
    Side,
    cause,
    differing,
    judge,
    settle_collected,
    settle_requests,
    settle_reverified,
    verdict,
)

from gymbus import bus
from gymbus.functions import ModelOptions
from gymbus.functions.models import MODELS
from gymbus.functions.nemo_gym import locate, prepare
from gymbus.functions.nemo_gym._config import ServerConfig, _config_file, read_config
from gymbus.runner import CollectOptions, VerifyOptions, collect, verify_rollouts
from gymbus.runner._input import UnknownAgent
from gymbus.schemas import GymError

__all__ = ["CLASSES", "BothWays", "Side", "both_ways"]


@dataclass
class _Plan:
    """What both sides are run with."""

    target: str
    url: str
    recorder: Recorder
    ray: str
    work: Path
    rows: Path
    reverify: tuple[Path, Path] | None
    """Stored rollouts of the example rows and their materialized inputs, where it has them."""
    quiet: Any
    worker: Any
    classify: Any
    timeouts: Any
    declared: frozenset[str] = frozenset()
    """The agents the server's config declares, as GymBus's config reader reads it: the ones
    its worker is to serve."""

    def failed(self, stage: str, text: str) -> Side:
        """A side that failed at `stage`, as `text` (its own log's) says."""
        outcome, why = self.classify(text)
        return Side(outcome=outcome, why=f"{stage}: {why}", cause=cause(text, why))


def _rows(path: Path, count: int, target: Path) -> Path:
    lines = [line for line in path.read_text().splitlines() if line.strip()][:count]
    target.write_text("".join(line + "\n" for line in lines))
    return target


def _not_json(path: Path) -> str:
    """Why `path` holds no JSON lines (`""` where it does): a release ships some data files
    as placeholders."""
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            json.loads(line) if line.strip() else None
        except ValueError:
            return f"NeMo Gym's data: data/{path.name} line {number} is not JSON ({line.strip()[:40]})"
    return ""


def _agent(server: Any, example: Path) -> str:
    for line in example.read_text().splitlines():
        ref = json.loads(line).get("agent_ref") or {} if line.strip() else {}
        if isinstance(ref, dict) and ref.get("name") in {agent.name for agent in server.agents}:
            return str(ref["name"])
    return str(server.agents[0].name)


def _collected(output: Path) -> dict[str, float | None]:
    rewards: dict[str, float | None] = {}
    if output.exists():
        for line in output.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                task, rollout = row.get("_ng_task_index"), row.get("_ng_rollout_index") or 0
                rewards[f"{task}.{rollout}" if rollout else f"{task}"] = row.get("reward")
    return rewards


def _reverified(output: Path, stored: Path) -> dict[str, float | None]:
    """Re-verified rewards by the line of the stored rollout (matched by task index)."""
    lines = {}
    for number, line in enumerate(stored.read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            lines[(row.get("_ng_task_index"), row.get("_ng_rollout_index"))] = number
    rewards: dict[str, float | None] = {}
    if output.exists():
        for line in output.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                number = lines.get((row.get("_ng_task_index"), row.get("_ng_rollout_index")))
                rewards[f"r{number}"] = row.get("reward")
    return rewards


def _failure_reason(*files: Path) -> str:
    for path in files:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                message = row.get("_ng_failure_message") or row.get("failure_message") or row.get("error")
                if message:
                    return f"{row.get('_ng_failure_class', 'failed')}: {message}"
    return ""


_ANSWERED = ("Response content:", "repr(e):")
"""How `ng_run`'s log quotes a server's error answer: what a server's client got back, and
what a server that raised says it answers with (NeMo Gym's handler logs `repr(e)`)."""


def _server_answer(log: Path) -> str:
    """What a NeMo Gym server answered last with an error, from `ng_run`'s log (`""` where
    none did): its client's failure names only the agent's 500."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        for marker in _ANSWERED:
            if marker in line:
                return line.split(marker, 1)[1].strip()
    return ""


def _with_indices(stored: Path, target: Path, agent: str) -> Path:
    """The stored rollouts, each with a task and rollout index (its line's, where it has none),
    naming `agent` (stored rollouts may name an agent of another of the server's configs)."""
    rows = []
    for number, line in enumerate([line for line in stored.read_text().splitlines() if line.strip()]):
        row = json.loads(line)
        row.setdefault("_ng_task_index", number)
        row.setdefault("_ng_rollout_index", 0)
        row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
        rows.append(json.dumps(row))
    target.write_text("".join(line + "\n" for line in rows))
    return target


def _named_agent(example: Path) -> str:
    """The agent the first example row names (`""` where none does)."""
    for line in example.read_text().splitlines():
        ref = json.loads(line).get("agent_ref") or {} if line.strip() else {}
        if isinstance(ref, dict) and ref.get("name"):
            return str(ref["name"])
    return ""


def _stored_rewards(rollouts: Path) -> dict[str, float | None]:
    """The rewards NeMo Gym's example rollouts store, by `r<line>`."""
    lines = [line for line in rollouts.read_text().splitlines() if line.strip()]
    return {f"r{number}": json.loads(line).get("reward") for number, line in enumerate(lines, 1)}


def _gymbus_precheck(
    plan: _Plan, directory: Path, config: str | None
) -> tuple[ServerConfig | None, Side | None]:
    """GymBus's own reading of the config and its install: (its reading, or `None`; its
    side's failure, or `None`). The failure is GymBus's side's only."""
    try:
        server = read_config(directory, config)
    except GymError as exc:
        return None, plan.failed("config", str(exc))
    try:
        prepare(plan.target)
    except GymError as exc:
        return server, plan.failed("install", str(exc))
    return server, None


def _reverify_inputs(
    result: BothWays, example: Path, stored: Path, work: Path, rows: int
) -> tuple[Path, Path] | None:
    """The first `rows` stored rollouts of its example rows and their materialized inputs
    (their stored rewards into `result.stored`); `None` where there are none."""
    # browsecomp's stored rollouts are `<PLACEHOLDER ROW>` lines.
    if not result.agent or not stored.exists() or _not_json(stored):
        return None
    rollouts = _rows(_with_indices(stored, work / "stored.jsonl", result.agent), rows, work / "stored.jsonl")
    inputs = materialize(rollouts, example, work / "stored_materialized_inputs.jsonl", result.agent)
    # Stored rollouts of other rows than its examples (or of another shape) have no inputs
    # to re-verify with, on either side.
    if not inputs.read_text().strip():
        return None
    result.stored = _stored_rewards(rollouts)
    return rollouts, inputs


async def both_ways(
    target: str,
    url: str,
    recorder: Recorder,
    ray: str,
    work: Path,
    rows: int,
    quiet: Any,
    worker: Any,
    classify: Any,
    timeouts: Any,
) -> BothWays:
    """`target` measured both ways (see the module docstring); NeMo Gym's side joins the Ray
    cluster at `ray`."""
    started = time.monotonic()
    result = BothWays(target)
    directory, config = await asyncio.to_thread(locate, target)
    config_file = _config_file(directory, config)
    data = directory / "data"
    example, stored = data / "example.jsonl", data / "example_rollouts.jsonl"
    unreadable = "no data/example.jsonl" if not example.exists() else _not_json(example)
    if unreadable:  # NeMo Gym's own data: neither side has a row to run
        result.nemo_gym = Side(why=unreadable, cause=unreadable)
        result.gymbus = Side(why=unreadable, cause=unreadable)
        result.klass, result.why = verdict(result.nemo_gym, result.gymbus)
        return result
    plan = _Plan(target, url, recorder, ray, work, _rows(example, rows, work / "rows.jsonl"), None, quiet,
                 worker, classify, timeouts)  # fmt: skip
    server, refused = await asyncio.to_thread(_gymbus_precheck, plan, directory, config)
    plan.declared = frozenset(agent.name for agent in server.agents) if server is not None else frozenset()
    result.agent = _agent(server, example) if server is not None and server.agents else _named_agent(example)
    models = model_names(config_file)
    if server is not None:
        models |= {*server.models, *(model for agent in server.agents for model in agent.models)}
    # A copy of the policy's config (`simulator_model: {_copy: policy_model}`) reaches the
    # policy's endpoint under both stacks: served apart on one side only, the same request
    # would be compared under two names.
    aliases = server.policy_aliases if server is not None else ()
    result.judges = sorted(models - {POLICY, *aliases})
    result.policy = "vllm" if needs_vllm(config_file) else "openai"
    plan.reverify = _reverify_inputs(result, example, stored, work, rows)
    result.gymbus = refused if refused is not None else await _gymbus_side(plan, result)
    result.nemo_gym, own = await _nemo_gym_side(plan, result, config_file)
    judge(result, work)
    if result.nemo_gym.rows and _collections_differ(result):
        await _collect_again(plan, result, config_file)
    await _try_reverified_again(plan, result, own)
    result.seconds = round(time.monotonic() - started, 1)
    return result


async def _gymbus_side(plan: _Plan, result: BothWays) -> Side:
    """GymBus's side: its worker served, the rows collected, the stored rollouts re-verified."""
    plan.recorder.log = plan.work / "gymbus.requests.jsonl"
    clock = time.monotonic()
    log = plan.work / "gymbus.worker.log"
    async with _gymbus_serving(plan.target, plan.url, plan.recorder, result.policy, result.judges, plan.worker,
                               log) as running:  # fmt: skip
        failure = await running.ready()
        side = (
            plan.failed("start", failure)
            if failure is not None
            else await _gymbus_collect(plan, result, running)
        )
    side.seconds = round(time.monotonic() - clock, 1)
    return side


async def _gymbus_collect(plan: _Plan, result: BothWays, running: Any) -> Side:
    output = plan.work / "gymbus.jsonl"
    options = CollectOptions(input=plan.rows, output=output, agent=result.agent or None, nats_url=plan.url,
                             timeouts=plan.timeouts)  # fmt: skip
    try:
        done = await collect(options, plan.quiet(), asyncio.Event())
    except UnknownAgent as exc:
        # An agent the config declares that the worker did not serve has its cause in the
        # worker's log (collect itself, asking the bus, knows it no better than a misspelt
        # name); rows that name no agent the config declares are the cause themselves.
        unserved = result.agent in plan.declared
        return plan.failed("collect", f"{exc}\n{running.text()[-3000:]}" if unserved else str(exc))
    if done.written == done.planned and done.planned:
        side = Side(outcome="works", why=f"collected {done.written}/{done.planned}")
    else:
        side = plan.failed(
            f"collect ({done.failed}/{done.planned} failed)", _failure_reason(done.paths.failures)
        )
    side.rows, side.ok, side.failed = done.planned, done.written, done.failed
    side.rewards = _collected(output)
    if plan.reverify is not None and side.outcome == "works":
        plan.recorder.log = plan.work / "gymbus.reverify.requests.jsonl"
        verified = plan.work / "gymbus.reverified.jsonl"
        report, found = await _gymbus_reverify(*plan.reverify, verified, result.agent, plan.url, plan.timeouts,
                                               plan.quiet)  # fmt: skip
        side.rewards |= found
        side.reverified = len(found)
        if report.failed:
            side.why += f"; reverify ({report.failed} failed): {' '.join(report.failures)[:300]}"
    return side


async def _nemo_gym_side(plan: _Plan, result: BothWays, config_file: Path) -> tuple[Side, OwnStack]:
    """NeMo Gym's own side: `ng_run`, `ng_collect_rollouts`, then `gym eval reverify`."""
    plan.recorder.log = plan.work / "nemo_gym.requests.jsonl"
    clock = time.monotonic()
    own = OwnStack(config_file, tuple(result.judges), plan.recorder, plan.ray, plan.work)
    built = f" (NeMo Gym's own installer: {', '.join(own.own_installs)})" if own.own_installs else ""
    try:
        failure = await asyncio.to_thread(own.start)
        if failure is not None and result.gymbus.outcome == "works":
            # Started once more before the server is called one that works on GymBus only:
            # `ng_run` lost a server now and then on two busy cores, then started it fine.
            await asyncio.to_thread(own.stop)
            again = await asyncio.to_thread(own.start)
            failure = None if again is None else failure
        side = plan.failed(f"start{built}", failure) if failure is not None else await _nemo_gym_collect(
            plan, result, own)  # fmt: skip
    finally:
        await asyncio.to_thread(own.stop)
    if plan.reverify is not None and side.outcome == "works":
        await _nemo_gym_reverify_side(plan, side, own)
    side.seconds = round(time.monotonic() - clock, 1)
    return side, own


async def _nemo_gym_collect(plan: _Plan, result: BothWays, own: OwnStack) -> Side:
    output = plan.work / "nemo_gym.jsonl"
    limit = plan.timeouts.rollout * 3
    status = await asyncio.to_thread(own.collect, result.agent, plan.rows, output, limit)
    rewards = _collected(output)
    rows = len(plan.rows.read_text().splitlines())
    if len(rewards) == rows and status == 0:
        side = Side(outcome="works", why=f"collected {rows}/{rows}")
    elif status == STOPPED:  # its log ends mid-run: no last exception to read
        timed_out = TIMED_OUT.format(limit=limit)
        side = Side(
            outcome="fails",
            why=f"collect ({rows - len(rewards)}/{rows} failed): {timed_out}",
            cause=timed_out,
        )
    else:
        said = _failure_reason(plan.work / "nemo_gym_failures.jsonl") or output.with_suffix(".log").read_text(
            errors="replace")[-3000:]  # fmt: skip
        answer = _server_answer(own.log)
        side = plan.failed(f"collect ({rows - len(rewards)}/{rows} failed, exit {status})", said)
        if answer:  # the server's own words are the cause, not the agent's 500 they led to
            side.why += f" (a server said: {answer[:200]})"
            side.cause = cause(answer, answer)
    side.rows, side.ok, side.failed, side.rewards = rows, len(rewards), rows - len(rewards), rewards
    return side


async def _nemo_gym_reverify_side(plan: _Plan, side: Side, own: OwnStack) -> None:
    assert plan.reverify is not None
    plan.recorder.log = plan.work / "nemo_gym.reverify.requests.jsonl"
    output = plan.work / "nemo_gym.reverified.jsonl"
    limit = plan.timeouts.verify * 4
    status, found = await asyncio.to_thread(_nemo_gym_reverify, own, *plan.reverify, output, limit)
    side.rewards |= found
    side.reverified = len(found)
    if status != 0 or len(found) < len(plan.reverify[0].read_text().splitlines()):
        log = output.with_suffix(".log")
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        side.why += f"; reverify (exit {status}, {len(found)} verified): {plan.classify(tail)[1]}"


def _collections_differ(result: BothWays) -> bool:
    collected = [said for said in result.reward_mismatches if not said.startswith("row r")]
    return bool(collected or result.request_mismatches)


async def _collect_again(plan: _Plan, result: BothWays, config_file: Path) -> None:
    """NeMo Gym's side collects the same rows once more where the two sides' collections
    differ: a row (or request) on which NeMo Gym's own two collections differ too (a game
    dealt from an unseeded `random.Random()`) is unsettled; every other difference stands."""
    again = plan.work / "collected_again"
    again.mkdir()
    plan.recorder.log = again / "nemo_gym.requests.jsonl"
    own = OwnStack(config_file, tuple(result.judges), plan.recorder, plan.ray, again)
    try:
        if await asyncio.to_thread(own.start) is not None:
            return
        output = again / "nemo_gym.jsonl"
        await asyncio.to_thread(own.collect, result.agent, plan.rows, output, plan.timeouts.rollout * 3)
    finally:
        await asyncio.to_thread(own.stop)
    settle_collected(result, _collected(output))
    settle_requests(result, plan.work, plan.recorder.log)


async def _try_reverified_again(plan: _Plan, result: BothWays, own: OwnStack) -> None:
    """Each re-verified row whose reward differs between the sides, re-verified once more on
    each side (`settle_reverified`)."""
    numbers = [int(key[1:]) for key in differing(result.nemo_gym, result.gymbus) if key.startswith("r")]
    if not numbers or plan.reverify is None:
        return
    again = plan.work / "again"
    again.mkdir()
    rollouts, inputs = (_lines(path, numbers, again / path.name) for path in plan.reverify)
    plan.recorder.log = again / "requests.jsonl"  # what a second try asks is not compared
    output = again / "nemo_gym.reverified.jsonl"
    limit = plan.timeouts.verify * 4
    _, theirs = await asyncio.to_thread(_nemo_gym_reverify, own, rollouts, inputs, output, limit)
    ours = await _gymbus_again(plan.target, plan.url, plan.recorder, result, plan.worker, (rollouts, inputs),
                               again, plan.timeouts, plan.quiet)  # fmt: skip
    back = {f"r{index}": f"r{number}" for index, number in enumerate(numbers, 1)}
    settle_reverified(result, {back[key]: reward for key, reward in theirs.items() if key in back},
                      {back[key]: reward for key, reward in ours.items() if key in back})  # fmt: skip


@asynccontextmanager
async def _gymbus_serving(target: str, url: str, recorder: Recorder, policy: str, judges: list[str], worker: Any,
                          log: Path) -> AsyncIterator[Any]:  # fmt: skip
    """The server's worker, and the endpoint on the bus under the names the server's configs
    use (GymBus's `openai` adapter: what a user serving a real endpoint would run; its `vllm`
    adapter for a `policy` of `vllm`); both stopped when the side is done."""
    nc = await bus.connect(url, name="census models")
    host = bus.ServiceHost(nc)
    made = []
    for adapter, name, api in [
        (policy, "policy", "responses"),
        *(("openai", name, "chat") for name in judges),
    ]:
        options = ModelOptions(base_url=recorder.url(name), api_key="census", model=name, api=api,
                               token_capture=False)  # fmt: skip
        made.append(MODELS[adapter].make(options))
        service = bus.model_service(adapter, name, made[-1])
        for attempt in range(3):  # two busy cores: a flush may time out
            try:
                await host.add(service)
                break
            except Exception:
                if attempt == 2:
                    raise
                await asyncio.sleep(2)
    running = worker(target, url, log)
    try:
        yield running
    finally:
        await asyncio.to_thread(running.stop)  # it waits for the worker's drain: not on the bus's loop
        await host.stop()
        await nc.close()
        for model in made:
            await model.aclose()


def _lines(path: Path, numbers: list[int], target: Path) -> Path:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    target.write_text("".join(lines[number - 1] + "\n" for number in numbers))
    return target


async def _gymbus_reverify(
    rollouts: Path, inputs: Path, output: Path, agent: str, url: str, timeouts: Any, quiet: Any
) -> tuple[Any, dict[str, float | None]]:
    """`verify --inputs` of stored rollouts on a served worker: (its report, rewards by line)."""
    options = VerifyOptions(input=rollouts, inputs=inputs, output=output, agent=agent, nats_url=url,
                            timeouts=timeouts)  # fmt: skip
    report = await verify_rollouts(options, quiet())
    return report, _reverified(output, rollouts)


def _nemo_gym_reverify(
    own: OwnStack, rollouts: Path, inputs: Path, output: Path, timeout: float
) -> tuple[int, dict[str, float | None]]:
    """`gym eval reverify` of stored rollouts: (its exit status, rewards by line)."""
    status = own.reverify(inputs, rollouts, output, timeout)
    unsafe = output.with_name(f"unsafe_{output.name}")  # its name where reverify_mode is not stateless
    return status, _reverified(unsafe if unsafe.exists() else output, rollouts)


async def _gymbus_again(
    target: str,
    url: str,
    recorder: Recorder,
    result: BothWays,
    worker: Any,
    stored: tuple[Path, Path],
    work: Path,
    timeouts: Any,
    quiet: Any,
) -> dict[str, float | None]:
    """GymBus's second try: the server served again, its rollouts re-verified again."""
    log = work / "gymbus.worker.log"
    async with _gymbus_serving(target, url, recorder, result.policy, result.judges, worker, log) as running:
        if await running.ready() is not None:
            return {}
        output = work / "gymbus.reverified.jsonl"
        return (await _gymbus_reverify(*stored, output, result.agent, url, timeouts, quiet))[1]
