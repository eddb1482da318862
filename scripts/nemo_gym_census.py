"""Which of the nemo-gym package's resources servers work through GymBus, measured.

For each server of the release (`$GYMBUS_NEMO_GYM_VERSION`, 0.7.0 by default), one at a time,
as a user would run it:

1. build its environment (`gym-runner nemo-gym install`'s `prepare`: the server's and its
   NeMo Gym agents');
2. start a worker, `gym-runner serve nemo-gym:<server>` (the server and its agents), on a
   nats-server this script runs, beside the offline policy served as `policy` (and no model
   under any other name: a judge called by another name is not served);
3. where its rollouts are agent-driven (its example rows name an agent of another kind than
   `simple_agent`, e.g. `gymnasium_agent`), collect its example rows with that agent;
   otherwise verify its `data/example_rollouts.jsonl` again, joined with `data/example.jsonl`,
   and compare each reward with the stored one.

Each server ends in one outcome: `works`; `needs a judge model` (a verify asked a model
nobody serves, or the offline policy judged and the stored rewards were not reproduced);
`needs a key`; `needs containers or GPUs`; `downloads at start` (data, models, or GitHub at
install); `fails` (with why). The reason is read from what failed: the build's log, the
server's or agent's log, the failure rows. About 40 minutes for the 145 servers of 0.7.0 on
two busy cores, their environments built (building them adds more); a run stopped midway
resumes where it stopped (servers already in `--out` are kept).

    .venv/bin/python scripts/nemo_gym_census.py --out census.jsonl [--servers mcqa wordle ...]
    .venv/bin/python scripts/nemo_gym_census.py --table census.jsonl   # the docs' table
    .venv/bin/python scripts/nemo_gym_census.py --table census.jsonl --counts   # the README's
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console

from gymbus import bus
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.nemo_gym import OWN_AGENTS, locate, prepare, release
from gymbus.functions.nemo_gym._config import read_config
from gymbus.runner import CollectOptions, ProgressView, VerifyOptions, collect, verify_rollouts
from gymbus.schemas import DEFAULT_TIMEOUTS, GymError, Response, ResponsesCreateParams

OUTCOMES = (
    "works", "needs a judge model", "needs a key", "needs containers or GPUs", "downloads at start", "fails"
)  # fmt: skip
CAUSES = (
    # (outcome, what in a failure's text says so); the first that matches wins.
    ("fails", r"No solution found when resolving"),  # its requirements conflict with NeMo Gym's
    ("needs a key", r"api[_ -]?key|API_KEY|Unauthorized|\b401\b|credential|access token|_TOKEN\b"),
    ("needs containers or GPUs", r"docker|podman|apptainer|singularity|\b[Ss]andbox|CUDA|cuda|nvidia|GPU"),
    ("downloads at start", r"github\.com|git\+https|git clone|Could not resolve|name resolution"
                           r"|Name or service not known|getaddrinfo|Cannot connect to host"
                           r"|huggingface|hf_hub|urlopen|nltk|download"),
)  # fmt: skip
_EXCEPTION = re.compile(r"\b(\w+(?:Error|Exception|Exit|MissingMandatoryValue))\b[:(]\s*(.*)")
_LOG = re.compile(r"its log is (\S+\.log)")
_NOT_SERVED = re.compile(r"no model serves `([^`]+)`")
_LOG_ENDS = "\n(its log ends)\n"
START_TIMEOUT = 180.0
"""Seconds a worker gets to start its server and agents (the big ones load data)."""
TIMEOUTS = replace(DEFAULT_TIMEOUTS, verify=90.0, rollout=180.0, model=60.0, agent_run=180.0)
"""Each verify and rollout is bounded well below the defaults: a server that hangs is a finding."""


@dataclass
class Result:
    server: str
    outcome: str = "fails"
    why: str = ""
    mode: str = ""
    """`reverify` (its stored rollouts) or `collect` (its example rows, by its own agent)."""
    rows: int = 0
    agreed: int = 0
    failed: int = 0
    judge_calls: int = 0
    agents: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    """Seconds each step took: install, start, run, stop."""
    log: str = ""


class CountingPolicy:
    """The offline policy, counting the calls it gets (judges among them)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, params: ResponsesCreateParams) -> Response:
        self.calls += 1
        return await offline_policy(params)


def classify(text: str) -> tuple[str, str]:
    """(outcome, why) for the text of a failure (a message, then a log's tail): why is its
    last exception, else its last line that says which outcome, else its innermost error."""
    tail = text[-6000:]
    for outcome, pattern in CAUSES:
        found = list(re.finditer(pattern, tail))
        if found:
            line = _line_of(tail, found[-1].start())
            return outcome, (line if outcome == "fails" else _last_exception(tail) or line)
    return "fails", _last_exception(tail) or _log_end(text) or _innermost(text)


def _innermost(text: str) -> str:
    """The error an error wraps last: from the last "NeMo Gym server ... " it quotes on."""
    at = text.rfind("NeMo Gym server ")
    return " ".join(text[max(at, 0) :].split())[:200]


def _log_end(text: str) -> str:
    """What exited, and the last line of its log (`_log_text`): a process that stops
    without an exception says why last."""
    message, found, log = text.partition(_LOG_ENDS)
    lines = [line for line in log.splitlines() if line.strip()]
    if not found or not lines:
        return ""
    exited = re.search(r"exited with code -?\d+", message)
    return f"{exited[0] + ': ' if exited else ''}{' '.join(lines[-1].split())}"[:200]


def _last_exception(text: str) -> str:
    for line in reversed(text.splitlines()):
        found = list(_EXCEPTION.finditer(line))
        if found:
            said = " ".join(found[-1][2].replace("\\n", " ").split())
            return f"{found[-1][1]}: {said}"[:200].rstrip(": ")
    return ""


def _line_of(text: str, at: int) -> str:
    start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
    return " ".join(text[start : end if end >= 0 else None].split())[:200]


def _log_text(message: str) -> str:
    """The message, and the tail of the log it names."""
    found = _LOG.search(message)
    if found and Path(found[1]).exists():
        return message + _LOG_ENDS + Path(found[1]).read_text(errors="replace")[-6000:]
    return message


def _first_lines(path: Path, count: int, target: Path, agent: str | None = None) -> Path:
    """The first `count` rows of `path`, in `target`; with `agent`, each row names it (stored
    rollouts may name an agent of another of the server's configs)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()][:count]
    if agent is not None:
        lines = [_with_agent(line, agent) for line in lines]
    target.write_text("".join(line + "\n" for line in lines))
    return target


def _with_agent(line: str, agent: str) -> str:
    try:
        row = json.loads(line)
    except ValueError:
        return line  # verify reports it
    if not isinstance(row, dict):
        return line
    row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
    return json.dumps(row)


def _agent_of(rows: Path) -> str | None:
    for line in rows.read_text().splitlines():
        try:
            ref = json.loads(line).get("agent_ref") or {}
        except (ValueError, AttributeError):
            continue
        if isinstance(ref, dict) and ref.get("name"):
            return str(ref["name"])
    return None


class Worker:
    """`gym-runner serve nemo-gym:<server>` on the census's bus."""

    def __init__(self, target: str, url: str, log: Path) -> None:
        self.log = log
        env = {**os.environ, "NATS_URL": url}
        command = [sys.executable, "-m", "gymbus.runner", "serve", f"nemo-gym:{target}", "--ack-wait", "5"]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def ready(self) -> str | None:
        """`None` once serving; else why it did not start."""
        deadline = time.monotonic() + START_TIMEOUT
        while "ready: serving" not in self.text():
            if self.process.poll() is not None:
                return _log_text(" ".join(self.text().split()))
            if time.monotonic() > deadline:
                return f"did not start within {START_TIMEOUT:.0f} s: " + self.text()[-3000:]
            await asyncio.sleep(0.5)
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _quiet() -> ProgressView:
    return ProgressView(Console(file=io.StringIO()))


async def measure(target: str, url: str, policy: CountingPolicy, work: Path, rows: int) -> Result:
    result = Result(target)
    clock = time.monotonic()

    def lap(step: str) -> None:
        nonlocal clock
        result.seconds[step] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    try:
        directory, config = await asyncio.to_thread(locate, target)
        if config is None and not (directory / "configs" / f"{directory.name}.yaml").exists():
            config = _first_config(directory)  # several, none named after the server
            target = result.server = f"{target}/{config}"
        server = read_config(directory, config)
        await asyncio.to_thread(prepare, target)
    except GymError as exc:
        result.outcome, why = classify(str(exc))
        result.why = f"install: {why}"
        return result
    finally:
        lap("install")
    worker = Worker(target, url, work / f"{target.replace('/', '_')}.worker.log")
    result.log = str(worker.log)
    try:
        failure = await worker.ready()
        lap("start")
        if failure is not None:
            result.outcome, why = classify(failure)
            said = " ".join(str(server.block.get("description") or "").split())
            if "not a standalone server" in said.lower():  # a library other servers import
                why = f"its config says: {said}"
            result.why = f"start: {why}"
            return result
        result.agents = _agents_served(worker.text(), server.agents)
        await _run(result, directory, server.agents, url, policy, work, rows)
        lap("run")
    finally:
        worker.stop()
        lap("stop")
    return result


def _first_config(directory: Path) -> str | None:
    """The config of the agent its example rows name, else the first of the server's
    configs that declares a resources server the bridge reads."""
    data = directory / "data"
    files = [data / "example.jsonl", data / "example_rollouts.jsonl"]
    named = {_agent_of(path) for path in files if path.exists()}
    readable = []
    for path in sorted((directory / "configs").glob("*.yaml")):
        try:
            server = read_config(directory, path.stem)
        except GymError:
            continue
        if named & {agent.name for agent in server.agents}:
            return path.stem
        readable.append(path.stem)
    return readable[0] if readable else None


def _agents_served(log: str, agents: tuple) -> dict[str, str]:  # type: ignore[type-arg]
    said = " ".join(log.split())
    served = {}
    for agent in agents:
        if agent.kind in OWN_AGENTS:
            served[agent.name] = f"{agent.kind}: GymBus's"
        elif f"not serving its agent {agent.name} " in said:
            why = said.split(f"not serving its agent {agent.name} ", 1)[1]
            served[agent.name] = f"{agent.kind}: not started: {classify(_log_text(why[:2000]))[1]}"
        else:
            served[agent.name] = f"{agent.kind}: NeMo Gym's, hosted"
    return served


async def _run(
    result: Result,
    directory: Path,
    agents: tuple,  # type: ignore[type-arg]
    url: str,
    policy: CountingPolicy,
    work: Path,
    rows: int,
) -> None:
    data = directory / "data"
    example, stored = data / "example.jsonl", data / "example_rollouts.jsonl"
    own = [agent.name for agent in agents if agent.kind in OWN_AGENTS]
    theirs = [agent for agent in agents if agent.kind not in OWN_AGENTS]
    named = _agent_of(example) if example.exists() else None
    driven = next((agent for agent in theirs if agent.name == named), None)
    if driven is None and theirs and not own:
        driven = theirs[0]
    if driven is not None:
        if not result.agents.get(driven.name, "").endswith("hosted"):
            result.outcome, result.why = classify(result.agents.get(driven.name, "its agent did not start"))
            result.why = f"agent {driven.name}: {result.why}"
            return
        await _collect(result, example, driven.name, url, work, rows)
        return
    if not stored.exists():
        result.outcome, result.why = "fails", "no data/example_rollouts.jsonl to verify"
        return
    agent = named if named in own else (own[0] if own else f"{directory.name}_simple_agent")
    before = policy.calls
    await _reverify(result, stored, example, agent, url, work, rows, Path(result.log))
    result.judge_calls = policy.calls - before
    if result.judge_calls and result.outcome == "works" and result.agreed < result.rows:
        # The offline policy answered its judge: a real judge model decides these rewards.
        result.outcome = "needs a judge model"
        result.why = f"the offline policy judged: {result.why}"


async def _collect(result: Result, example: Path, agent: str, url: str, work: Path, rows: int) -> None:
    result.mode = "collect"
    if not example.exists():
        result.outcome, result.why = "fails", "no data/example.jsonl to collect"
        return
    source = _first_lines(example, rows, work / f"{result.server.replace('/', '_')}.rows.jsonl")
    output = work / f"{result.server.replace('/', '_')}.collected.jsonl"
    options = CollectOptions(input=source, output=output, agent=agent, nats_url=url, timeouts=TIMEOUTS)
    done = await collect(options, _quiet(), asyncio.Event())
    result.rows, result.agreed, result.failed = done.planned, done.written, done.failed
    if done.written == done.planned and done.planned:
        result.outcome, result.why = "works", f"collected {done.written} of its example rows with {agent}"
        return
    failures = done.paths.failures.read_text() if done.paths.failures.exists() else ""
    said = Path(result.log).read_text(errors="replace") if Path(result.log).exists() else ""
    unserved = sorted(set(_NOT_SERVED.findall(failures + " ".join(said.split()))))
    if unserved:
        result.outcome, result.why = "needs a judge model", f"no model serves {', '.join(unserved)}"
        return
    result.outcome, why = classify(_log_text(_failure_text(failures)))
    result.why = f"collect ({done.failed}/{done.planned} failed): {why}"


def _failure_text(failures: str) -> str:
    for line in failures.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        return f"{row.get('_ng_failure_class')}: {row.get('_ng_failure_message')}"
    return "no failure rows"


async def _reverify(
    result: Result, stored: Path, example: Path, agent: str, url: str, work: Path, rows: int, worker_log: Path
) -> None:
    result.mode = "reverify"
    source = _first_lines(stored, rows, work / f"{result.server.replace('/', '_')}.stored.jsonl", agent)
    output = work / f"{result.server.replace('/', '_')}.reverified.jsonl"
    options = VerifyOptions(input=source, output=output, agent=agent, nats_url=url, timeouts=TIMEOUTS,
                            inputs=example if example.exists() else None)  # fmt: skip
    report = await verify_rollouts(options, _quiet())
    joined = ""
    if report.join is not None and report.rows and report.join.unmatched == report.rows:
        # NeMo Gym's stored rollouts of other rows than its example.jsonl: verified as stored.
        report = await verify_rollouts(replace(options, inputs=None), _quiet())
        joined = " (as stored: they are of other rows than example.jsonl)"
    result.rows, result.agreed, result.failed = report.rows, report.agreed, report.failed
    messages = " ".join(str(failure) for failure in report.failures)
    # Named in a failure, or in the worker's log (a server may turn a failed judge call into a reward).
    said = worker_log.read_text(errors="replace") if worker_log.exists() else ""
    unserved = sorted(set(_NOT_SERVED.findall(messages + " ".join(said.split()))))
    if unserved:
        result.outcome, result.why = "needs a judge model", f"no model serves {', '.join(unserved)}"
    elif report.rows and report.failed == 0:
        # Every stored rollout verified; a reward NeMo Gym's release grades differently from
        # when it stored the file is the release's, so it is said, not counted a failure.
        result.outcome, result.why = "works", f"{report.agreed}/{report.rows} stored rewards reproduced{joined}"
    else:
        result.outcome, why = classify(messages)
        result.why = f"verify ({report.failed}/{report.rows} failed{joined}): {why}"


_WHERE = re.compile(r"\S+\.jsonl:\d+: |\S*/site-packages/|\S*/venvs/\w+/")
_FOLDERS = re.compile(
    r"(?<![\w:/.])/(?:tmp|home|root|work|var|opt|usr|srv|mnt|Users|private)/(?:[^\s/'\"]+/)*"
)
"""The folders of an absolute path (a log's, the census's scratch files'): the table names
the file only, so it reads the same on every machine."""
_WHY_CHARS = 200
_ALL_REPRODUCED = re.compile(r"(\d+)/\1 stored rewards reproduced$")


_WORDY = (
    (re.compile(r" \(as stored: they are of other rows than example\.jsonl\)"), " of rows not in example"),
    (re.compile(r"verify failed \(\w+\): NeMo Gym server \S+ refused the request to (\S+)"), r"\1"),
    (re.compile(r"agent_failed: NeMo Gym server \S+ failed on /run \(500\): "), ""),
)


def _short(why: object) -> str:
    """A reason without the census's own paths and line numbers, cut to a table cell."""
    text = _FOLDERS.sub("", _WHERE.sub("", str(why)))
    for wordy, plain in _WORDY:
        text = wordy.sub(plain, text)
    text = " ".join(text.replace("|", "/").replace("\\'", "'").split())
    return text if len(text) <= _WHY_CHARS else text[: _WHY_CHARS - 3] + "..."


def table(results: list[dict[str, object]]) -> str:
    """The docs' table: one row per outcome, its servers, each with why (for `works`: how
    many stored rewards it reproduced, where not all)."""
    by: dict[str, list[str]] = collections.defaultdict(list)
    for one in results:
        name, why = f"`{one['server']}`", _short(one["why"])
        quiet = one["outcome"] == "works" and (_ALL_REPRODUCED.match(why) or why.startswith("collected"))
        by[str(one["outcome"])].append(name if quiet else f"{name} ({why})")
    lines = [f"| outcome | servers ({len(results)}) |", "| --- | --- |"]
    for outcome in OUTCOMES:
        if by.get(outcome):
            lines.append(f"| {outcome} ({len(by[outcome])}) | {' · '.join(sorted(by[outcome]))} |")
    return "\n".join(lines)


def counts(results: list[dict[str, object]]) -> str:
    """The README's table: how many servers end in each outcome."""
    by = collections.Counter(str(one["outcome"]) for one in results)
    lines = ["| outcome | servers |", "| --- | ---: |"]
    lines += [f"| {outcome} | {by[outcome]} |" for outcome in OUTCOMES if by[outcome]]
    return "\n".join([*lines, f"| all | {len(results)} |"])


async def census(targets: list[str], out: Path, rows: int) -> None:
    policy = CountingPolicy()
    with bus.EmbeddedServer() as server, tempfile.TemporaryDirectory(prefix="gymbus-census-") as scratch:
        nc = await bus.connect(server.url, name="census policy")
        host = bus.ServiceHost(nc)
        await host.add(bus.model_service("offline", "policy", policy))
        try:
            for number, target in enumerate(targets, 1):
                work = Path(scratch) / str(number)
                work.mkdir()
                result = await measure(target, server.url, policy, work, rows)
                with open(out, "a") as file:
                    file.write(json.dumps(asdict(result)) + "\n")
                took = " ".join(f"{step} {seconds:.0f} s" for step, seconds in result.seconds.items())
                said = f"{result.outcome} ({result.why}; {took})"
                print(f"[{number}/{len(targets)}] {target}: {said}", flush=True)
        finally:
            await host.stop()
            await nc.close()


def all_servers() -> list[str]:
    """Every resources server of the release (a directory with a configs/ folder)."""
    servers = locate("mcqa")[0].parent
    return sorted(path.name for path in servers.iterdir() if (path / "configs").is_dir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("nemo_gym_census.jsonl"))
    parser.add_argument("--servers", nargs="*", help="servers to measure (default: every one of the release)")
    parser.add_argument("--rows", type=int, default=5, help="example rows (or stored rollouts) per server")
    parser.add_argument("--table", type=Path, help="print the table of a census's results and stop")
    parser.add_argument(
        "--counts", action="store_true", help="with --table: only how many end in each outcome"
    )
    args = parser.parse_args()
    if args.table:
        results = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        print(counts(results) if args.counts else table(results))
        return
    done = set()
    if args.out.exists():  # resume: servers already measured are kept
        measured = [json.loads(line)["server"] for line in args.out.read_text().splitlines() if line.strip()]
        done = {name for server in measured for name in (server, server.partition("/")[0])}
    targets = [target for target in (args.servers or all_servers()) if target not in done]
    print(f"nemo-gym {release().version}: measuring {len(targets)} servers into {args.out}", flush=True)
    asyncio.run(census(targets, args.out, args.rows))
    print(table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]))


if __name__ == "__main__":
    main()
