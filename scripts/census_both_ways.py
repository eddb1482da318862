"""One server, both ways: NeMo Gym's own stack and GymBus on the same rows, against the same
recorded endpoint (`census_endpoint`), and what differs.

1. GymBus: `gym-runner serve nemo-gym:<server>` beside the endpoint served on the bus under
   the same names (the `openai` adapter: the policy over the Responses API, each judge
   over Chat Completions), `collect` of the same rows with the same agent, `verify --inputs`
   of the same stored rollouts with the same materialized inputs.
2. NeMo Gym: `ng_run` with the server's config and a model config pointing at the endpoint
   (`census_nemo_gym`), `ng_collect_rollouts` on the first rows of its `data/example.jsonl`
   with the agent they name (else its config's first), then, where it has
   `data/example_rollouts.jsonl` of its example rows, `gym eval reverify --force` of those
   stored rollouts (joined with their example rows by prompt, as materialized inputs).

Each side ends `works` (every row collected) or in the outcome its failure's text names
(`classify`). Compared: per-row rewards (collected, by task index; re-verified, by line)
and the requests each side sent the endpoint, as a multiset per model name, in the
endpoint's canonical form. A re-verified row whose reward differs between the sides is
re-verified once more on each side: where one side scores the same request differently
the second time, the row is `unsettled` (the server's own nondeterminism, listed with
every reward each side gave), else the difference stands. The server's class says whose
problem it is: `works on both`,
`works on GymBus only`, `works on NeMo Gym only` (a GymBus bug, always), or `fails on
both` with the shared reason.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from census_endpoint import Recorder, canonical
from census_nemo_gym import POLICY, OwnStack, materialize, needs_vllm

from gymbus import bus
from gymbus.functions import ModelOptions
from gymbus.functions.models import MODELS
from gymbus.functions.nemo_gym import locate, prepare
from gymbus.functions.nemo_gym._config import read_config
from gymbus.runner import CollectOptions, VerifyOptions, collect, verify_rollouts
from gymbus.runner._input import UnknownAgent
from gymbus.schemas import GymError

CLASSES = ("works on both", "works on GymBus only", "works on NeMo Gym only", "fails on both")
REWARD_TOLERANCE = 1e-6


@dataclass
class Side:
    """What one side did with the server's rows."""

    outcome: str = "fails"
    why: str = ""
    rows: int = 0
    ok: int = 0
    failed: int = 0
    rewards: dict[str, float | None] = field(default_factory=dict)
    """Collected rows' rewards by task index; re-verified ones' by `r<line>`."""
    reverified: int = 0
    seconds: float = 0.0


@dataclass
class BothWays:
    server: str
    klass: str = "fails on both"
    why: str = ""
    agent: str = ""
    policy: str = "openai"
    """The adapter serving the policy on each side: `vllm` where the server allows no other."""
    judges: list[str] = field(default_factory=list)
    nemo_gym: Side = field(default_factory=Side)
    gymbus: Side = field(default_factory=Side)
    reward_mismatches: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    """Re-verified rows whose reward changed between two tries of the same request on one side."""
    request_mismatches: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    """How many requests each side sent the endpoint."""
    seconds: float = 0.0


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


def _server_said(log: Path) -> str:
    """What a NeMo Gym server answered last with an error, from `ng_run`'s log: its client's
    failure names only the agent's 500."""
    found = [line for line in log.read_text(errors="replace").splitlines() if "Response content:" in line]
    return f" (a server said: {found[-1].split('Response content:', 1)[1].strip()[:200]})" if found else ""


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


def _requests(logs: list[Path]) -> collections.Counter[str]:
    found: collections.Counter[str] = collections.Counter()
    for log in (log for log in logs if log.exists()):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            try:
                said = canonical(record["api"], record["request"])
            except (GymError, ValueError) as exc:
                said = {"unreadable": str(exc)}
            found[json.dumps([record["model"], said], sort_keys=True)] += 1
    return found


def _first_difference(a: Any, b: Any, at: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{at}.{key}")
        return at
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{at}[{index}]")
    return f"{at}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"


def compare_requests(ours: list[Path], theirs: list[Path]) -> tuple[dict[str, int], list[str]]:
    """(how many requests each side's logs hold, what differs): each request one side sent more
    often than the other, with its first differing field against the other side's nearest."""
    gymbus, nemo_gym = _requests(ours), _requests(theirs)
    counts = {"nemo_gym": sum(nemo_gym.values()), "gymbus": sum(gymbus.values())}
    only_ours, only_theirs = gymbus - nemo_gym, nemo_gym - gymbus
    differences = []
    for key in sorted(only_theirs.elements()):
        model, said = json.loads(key)
        pool = [json.loads(other)[1] for other in only_ours.elements() if json.loads(other)[0] == model]
        if not pool:
            differences.append(f"{model}: NeMo Gym sent a request GymBus did not")
            continue
        nearest = min(pool, key=lambda other: len(_first_difference(said, other)))
        differences.append(f"{model}: {_first_difference(said, nearest)} (NeMo Gym != GymBus)")
    extra = sum(only_ours.values()) - sum(only_theirs.values())
    if extra > 0:
        differences.append(f"GymBus sent {extra} request(s) more")
    return counts, differences


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
        *(("openai", judge, "chat") for judge in judges),
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
    try:
        directory, config = await asyncio.to_thread(locate, target)
        server = read_config(directory, config)
        await asyncio.to_thread(prepare, target)
    except GymError as exc:
        outcome, why = classify(str(exc))
        result.nemo_gym = result.gymbus = Side(outcome=outcome, why=f"install: {why}")
        result.why = result.nemo_gym.why
        return result
    data = directory / "data"
    example, stored = data / "example.jsonl", data / "example_rollouts.jsonl"
    unreadable = "no data/example.jsonl" if not example.exists() else _not_json(example)
    if unreadable:
        result.nemo_gym = result.gymbus = Side(why=unreadable)
        result.why = unreadable
        return result
    if not server.agents:  # its agent comes from elsewhere (a benchmark's config): neither side has one
        result.nemo_gym = result.gymbus = Side(why="its config declares no agent")
        result.why = "its config declares no agent"
        return result
    rows_file = _rows(example, rows, work / "rows.jsonl")
    result.agent = _agent(server, example)
    models = {*server.models, *(model for agent in server.agents for model in agent.models)}
    result.judges = sorted(models - {POLICY})
    result.policy = "vllm" if needs_vllm(server.config_file) else "openai"
    reverify = None
    if stored.exists() and not _not_json(stored):  # browsecomp's are `<PLACEHOLDER ROW>` lines
        rollouts = _rows(
            _with_indices(stored, work / "stored.jsonl", result.agent), rows, work / "stored.jsonl"
        )
        inputs = materialize(rollouts, example, work / "stored_materialized_inputs.jsonl", result.agent)
        # Stored rollouts of other rows than its examples (or of another shape) have no inputs
        # to re-verify with, on either side.
        reverify = (rollouts, inputs) if inputs.read_text().strip() else None

    # GymBus.
    recorder.log = work / "gymbus.requests.jsonl"
    side = result.gymbus
    clock = time.monotonic()
    log = work / "gymbus.worker.log"
    async with _gymbus_serving(target, url, recorder, result.policy, result.judges, worker, log) as running:
        failure = await running.ready()
        if failure is not None:
            side.outcome, why = classify(failure)
            side.why = f"start: {why}"
        else:
            output = work / "gymbus.jsonl"
            options = CollectOptions(input=rows_file, output=output, agent=result.agent, nats_url=url,
                                     timeouts=timeouts)  # fmt: skip
            try:
                done = await collect(options, quiet(), asyncio.Event())
            except UnknownAgent as exc:  # the worker did not serve it: its log says why
                side.outcome, why = classify(f"{exc}\n{running.text()[-3000:]}")
                side.why = f"collect: {why}"
                done = None
            if done is not None:
                side.rows, side.ok, side.failed = done.planned, done.written, done.failed
                side.rewards = _collected(output)
                if done.written == done.planned and done.planned:
                    side.outcome, side.why = "works", f"collected {side.ok}/{side.rows}"
                else:
                    side.outcome, why = classify(_failure_reason(done.paths.failures))
                    side.why = f"collect ({side.failed}/{side.rows} failed): {why}"
                if reverify is not None and side.outcome == "works":
                    recorder.log = work / "gymbus.reverify.requests.jsonl"
                    verified = work / "gymbus.reverified.jsonl"
                    report, found = await _gymbus_reverify(
                        *reverify, verified, result.agent, url, timeouts, quiet
                    )
                    side.rewards |= found
                    side.reverified = len(found)
                    if report.failed:
                        side.why += f"; reverify ({report.failed} failed): {' '.join(report.failures)[:300]}"
    side.seconds = round(time.monotonic() - clock, 1)

    # NeMo Gym's own stack.
    recorder.log = work / "nemo_gym.requests.jsonl"
    side = result.nemo_gym
    clock = time.monotonic()
    own = OwnStack(server.config_file, tuple(result.judges), recorder, ray, work)
    try:
        failure = await asyncio.to_thread(own.start)
        if failure is not None and result.gymbus.outcome == "works":
            # Started once more before the server is called one that works on GymBus only:
            # `ng_run` lost a server now and then on two busy cores, then started it fine.
            await asyncio.to_thread(own.stop)
            again = await asyncio.to_thread(own.start)
            failure = None if again is None else failure
        if failure is not None:
            side.outcome, why = classify(failure)
            side.why = f"start: {why}"
        else:
            output = work / "nemo_gym.jsonl"
            status = await asyncio.to_thread(
                own.collect, result.agent, rows_file, output, timeouts.rollout * 3
            )
            side.rewards = _collected(output)
            side.rows = len(rows_file.read_text().splitlines())
            side.ok = len(side.rewards)
            side.failed = side.rows - side.ok
            if side.ok == side.rows and status == 0:
                side.outcome, side.why = "works", f"collected {side.ok}/{side.rows}"
            else:
                said = _failure_reason(work / "nemo_gym_failures.jsonl") or output.with_suffix(".log").read_text(
                    errors="replace")[-3000:]  # fmt: skip
                side.outcome, why = classify(said)
                side.why = (
                    f"collect ({side.failed}/{side.rows} failed, exit {status}): {why}{_server_said(own.log)}"
                )
    finally:
        await asyncio.to_thread(own.stop)
    if reverify is not None and side.outcome == "works":
        recorder.log = work / "nemo_gym.reverify.requests.jsonl"
        output = work / "nemo_gym.reverified.jsonl"
        limit = timeouts.verify * 4
        status, found = await asyncio.to_thread(_nemo_gym_reverify, own, *reverify, output, limit)
        side.rewards |= found
        side.reverified = len(found)
        if status != 0 or len(found) < len(reverify[0].read_text().splitlines()):
            tail = output.with_suffix(".log").read_text(errors="replace")[-3000:] if output.with_suffix(
                ".log").exists() else ""  # fmt: skip
            side.why += f"; reverify (exit {status}, {len(found)} verified): {classify(tail)[1]}"
    side.seconds = round(time.monotonic() - clock, 1)

    _judge(result, work)
    if (work / "nemo_gym.requests.jsonl").exists() and _collections_differ(result, work):  # its side ran rows
        await _collect_again(result, server.config_file, recorder, ray, work, rows_file, timeouts)
    differing = [key for key in _differing(result.nemo_gym, result.gymbus) if key.startswith("r")]
    if differing and reverify is not None:
        again = work / "again"
        again.mkdir()
        numbers = [int(key[1:]) for key in differing]
        rollouts, inputs = (_lines(path, numbers, again / path.name) for path in reverify)
        recorder.log = again / "requests.jsonl"  # what a second try asks is not compared
        output = again / "nemo_gym.reverified.jsonl"
        limit = timeouts.verify * 4
        _, theirs = await asyncio.to_thread(_nemo_gym_reverify, own, rollouts, inputs, output, limit)
        ours = await _gymbus_again(target, url, recorder, result, worker, (rollouts, inputs), again, timeouts,
                                   quiet)  # fmt: skip
        back = {f"r{index}": f"r{number}" for index, number in enumerate(numbers, 1)}
        _settle(result, {back[key]: reward for key, reward in theirs.items() if key in back},
                {back[key]: reward for key, reward in ours.items() if key in back})  # fmt: skip
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _collections_differ(result: BothWays, work: Path) -> bool:
    collected = [key for key in _differing(result.nemo_gym, result.gymbus) if not key.startswith("r")]
    return bool(collected or _collect_requests_differ(work))


def _collect_requests_differ(work: Path) -> list[str]:
    return compare_requests([work / "gymbus.requests.jsonl"], [work / "nemo_gym.requests.jsonl"])[1]


async def _collect_again(
    result: BothWays, config_file: Path, recorder: Recorder, ray: str, work: Path, rows: Path, timeouts: Any
) -> None:
    """NeMo Gym's side collects the same rows once more where the two sides' collections
    differ. Where NeMo Gym's own two collections differ too (a game dealt from an unseeded
    `random.Random()`), the server is nondeterministic on its own: its collected rewards and
    requests that differ are unsettled, not differences; else they stand."""
    again = work / "collected_again"
    again.mkdir()
    recorder.log = again / "nemo_gym.requests.jsonl"
    own = OwnStack(config_file, tuple(result.judges), recorder, ray, again)
    try:
        if await asyncio.to_thread(own.start) is not None:
            return
        output = again / "nemo_gym.jsonl"
        await asyncio.to_thread(own.collect, result.agent, rows, output, timeouts.rollout * 3)
    finally:
        await asyncio.to_thread(own.stop)
    first, second = result.nemo_gym.rewards, _collected(output)
    rewards_moved = [
        key for key in first if not key.startswith("r") and not _same(first[key], second.get(key))
    ]
    own_requests = compare_requests([again / "nemo_gym.requests.jsonl"], [work / "nemo_gym.requests.jsonl"])[
        1
    ]
    if not rewards_moved and not own_requests:
        return
    why = f"NeMo Gym's own second collection differs from its first ({len(rewards_moved)} rewards, " \
          f"{len(own_requests)} requests)"  # fmt: skip
    collected = {f"row {key}" for key in first if not key.startswith("r")}
    for said in [said for said in result.reward_mismatches if said.partition(":")[0] in collected]:
        result.reward_mismatches.remove(said)
        result.unsettled.append(f"{said} ({why})")
    for said in _collect_requests_differ(work):
        if said in result.request_mismatches:
            result.request_mismatches.remove(said)
            result.unsettled.append(f"request {said} ({why})")


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


def _settle(result: BothWays, theirs: dict[str, float | None], ours: dict[str, float | None]) -> None:
    """Each re-verified row tried again on both sides (`theirs`, `ours`): a row one side
    scored differently the second time is unsettled, no longer a mismatch; a row each side
    scored alike twice (or a second try that gave no reward) stays a mismatch, saying so."""
    kept = []
    for said in result.reward_mismatches:
        key = said.removeprefix("row ").partition(":")[0]
        if key not in theirs and key not in ours:
            kept.append(said)
            continue
        tries = {
            "NeMo Gym": (result.nemo_gym.rewards.get(key), theirs.get(key)),
            "GymBus": (result.gymbus.rewards.get(key), ours.get(key)),
        }
        each = ", ".join(f"{side} {first} then {second}" for side, (first, second) in tries.items())
        varied = [side for side, (first, second) in tries.items() if not _same(first, second)]
        if varied and None not in (value for pair in tries.values() for value in pair):
            by = " and ".join(varied)
            result.unsettled.append(f"row {key}: {each} (the same request scored differently by {by})")
        else:
            kept.append(f"row {key}: {each}")
    result.reward_mismatches = kept


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (
        isinstance(a, int | float) and isinstance(b, int | float) and abs(a - b) <= REWARD_TOLERANCE
    )


def _differing(theirs: Side, ours: Side) -> list[str]:
    """The rows whose rewards differ between the sides (re-verified ones only where both re-verified)."""
    keys = set(theirs.rewards) | set(ours.rewards)
    if not (theirs.reverified and ours.reverified):  # a side whose re-verification did not run says why
        keys = {key for key in keys if not key.startswith("r")}
    return [key for key in sorted(keys) if not _same(theirs.rewards.get(key), ours.rewards.get(key))]


def _judge(result: BothWays, work: Path) -> None:
    """The server's class, and what differs between the sides."""
    theirs, ours = result.nemo_gym, result.gymbus
    # Rows and requests compare only where both sides ran the rows: a side that did not start
    # (its class says why) has nothing to differ by.
    both_ran = bool(theirs.rows and ours.rows)
    for key in _differing(theirs, ours) if both_ran else []:
        said = f"NeMo Gym {theirs.rewards.get(key)}, GymBus {ours.rewards.get(key)}"
        result.reward_mismatches.append(f"row {key}: {said}")
    # A re-verification's requests count only where both sides re-verified.
    logs = ["requests", *(["reverify.requests"] if theirs.reverified and ours.reverified else [])]
    result.requests, differences = compare_requests(
        [work / f"gymbus.{log}.jsonl" for log in logs], [work / f"nemo_gym.{log}.jsonl" for log in logs]
    )
    result.request_mismatches = differences if both_ran else []
    if theirs.outcome == "works" and ours.outcome == "works":
        result.klass, result.why = "works on both", theirs.why
    elif theirs.outcome == "works":
        result.klass, result.why = "works on NeMo Gym only", f"GymBus: {ours.why}"
    elif ours.outcome == "works":
        result.klass, result.why = "works on GymBus only", f"NeMo Gym: {theirs.why}"
    else:
        result.klass = "fails on both"
        result.why = (
            theirs.why if theirs.outcome == ours.outcome else f"NeMo Gym: {theirs.why}; GymBus: {ours.why}"
        )
