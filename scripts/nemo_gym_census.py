"""Which of the nemo-gym package's resources servers work, measured both ways: NeMo Gym's
own stack beside GymBus, on the same rows, against the same recorded policy.

For each server of the release (`$GYMBUS_NEMO_GYM_VERSION`, 0.7.0 by default), one at a
time (`census_both_ways` says how each side is run): NeMo Gym's `ng_run` +
`ng_collect_rollouts` (+ `gym eval reverify --force` of its stored rollouts) and GymBus's
`gym-runner serve nemo-gym:<server>` + `collect` (+ `verify --inputs`), both against one
local endpoint that answers deterministically and records every request
(`census_endpoint`), under each model's own name (policy and judges).

Each server ends in a class that says whose problem it is (`census_verdict` draws them):
`fails on both, different causes` (listed first), `works on both`, `runs, not evidenced`,
`works on GymBus only`, `works on NeMo Gym only` (a GymBus bug: must stay empty) or `fails
on both, same cause`. Each side's cause is its own, read from its own log; GymBus's own
pre-check (its install, its reading of the config) refusing a server fails GymBus's side
only, and NeMo Gym's side still runs. Per server it records each side's rows ok and failed,
per-row rewards, the calls its policy got, re-verified rewards beside the ones NeMo Gym's
example rollouts store, and whether the two sides sent the model the same requests, as NeMo
Gym sent them. The run exits 1 when a server works on NeMo Gym only or a reward or request
differs, listing each difference. A row is unsettled, and no difference, only where one
side's own two tries differ on it (a re-verified row scored differently the second time;
a collected row on which NeMo Gym's own two collections differ), listed with every reward.
A run stopped midway resumes where it stopped (servers already in `--out` are kept).

    .venv/bin/python scripts/nemo_gym_census.py --out census.jsonl [--servers mcqa wordle ...]
    .venv/bin/python scripts/nemo_gym_census.py --table census.jsonl   # the docs' tables
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
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, when imported
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # bench's Ray cluster, run from any folder

from census_both_ways import CLASSES, both_ways  # noqa: E402
from census_endpoint import Recorder  # noqa: E402
from census_nemo_gym import START_TIMEOUT, _server_failure, ray_binary  # noqa: E402
from census_verdict import without_folders  # noqa: E402

from bench._ray import ray_cluster  # noqa: E402
from gymbus import bus  # noqa: E402
from gymbus.functions.nemo_gym import locate, release  # noqa: E402
from gymbus.functions.nemo_gym._config import read_config  # noqa: E402
from gymbus.runner import ProgressView  # noqa: E402
from gymbus.schemas import DEFAULT_TIMEOUTS, GymError  # noqa: E402

OUTCOMES = ("works", "needs a key", "needs containers or GPUs", "downloads at start", "fails")
"""What each side of a server ends in (the class of the server says which side)."""
CAUSES = (
    # (outcome, what in a failure's text says so); the first that matches wins.
    ("fails", r"No solution found when resolving"),  # its requirements conflict with NeMo Gym's
    ("needs a key", r"api[_ -]?key|API_KEY|Unauthorized|\b401\b|credential|access token|_TOKEN\b"),
    # Not a requirement's extra (`nemo-gym[sandbox]`, which an install log lists).
    ("needs containers or GPUs", r"docker|podman|apptainer|singularity|(?<![\[,])\b[Ss]andbox|CUDA|cuda|nvidia|GPU"),
    ("downloads at start", r"github\.com|git\+https|git clone|Could not resolve|name resolution"
                           r"|Name or service not known|getaddrinfo|Cannot connect to host"
                           r"|huggingface|hf_hub|urlopen|nltk|download|HTTPSConnectionPool"),
)  # fmt: skip
_EXCEPTION = re.compile(
    r"\b(\w+(?:Error|Exception|Exit|MissingMandatoryValue)|(?:^|(?<=: ))Error)\b[:(]\s*(.*)"
)
"""An exception, or a CLI's own `Error: ...` (NeMo Gym's refusing a config) opening a line or
following what quotes it (`ng_run exited with code 1: Error: ...`)."""
_RESOLUTION_CAUSE = re.compile(r"^(?:\([\w.-]+\))?\s*cause: (.+)")
"""The line under uv's "No solution found" that says why (with the server's name in
parentheses where NeMo Gym's installer prints it)."""
_LOG = re.compile(r"its log is (\S+\.log)")
_LOG_ENDS = "\n(its log ends)\n"
TIMEOUTS = replace(DEFAULT_TIMEOUTS, verify=90.0, rollout=180.0, model=60.0, agent_run=180.0)
"""Each verify and rollout is bounded well below the defaults: a server that hangs is a finding."""


def classify(text: str) -> tuple[str, str]:
    """(outcome, why) for the text of a failure (a message, then a log's tail): why is its
    last exception, else its last line that says which outcome, else its innermost error."""
    tail = text[-6000:]
    for outcome, pattern in CAUSES:
        found = list(re.finditer(pattern, tail))
        if found:
            line = _line_of(tail, found[-1].start())
            return outcome, (_with_cause(tail, found[-1].start()) if outcome == "fails"
                             else _last_exception(tail) or line)  # fmt: skip
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
            said = " ".join(without_folders(found[-1][2]).replace("\\n", " ").split())
            return f"{found[-1][1]}: {said}"[:200].rstrip(": ")
    return ""


def _with_cause(text: str, at: int) -> str:
    """The line at `at` and, where uv gives one on the next line, its cause: "No solution
    found" alone does not say which requirement could not be met, nor why."""
    line, end = _line_of(text, at), text.find("\n", at)
    below = _RESOLUTION_CAUSE.match(text[end + 1 :].partition("\n")[0]) if end >= 0 else None
    return f"{line.rstrip(':')}: {' '.join(below[1].split())}"[:200] if below else line


def _line_of(text: str, at: int) -> str:
    start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
    return " ".join(text[start : end if end >= 0 else None].split())[:200]


def _log_text(message: str) -> str:
    """The message, and the log it names read as NeMo Gym's side reads `ng_run`'s
    (`_server_failure`: up to the server's first failure), so that the same failure in the
    same server's output is the same cause on both sides. What the message quotes of the
    log after naming it is left out: the log itself follows."""
    found = _LOG.search(message)
    if found and Path(found[1]).exists():
        log = _server_failure(Path(found[1]).read_text(errors="replace"))
        return message[: found.end()] + _LOG_ENDS + log[-6000:]
    return message


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
    (re.compile(r", url='http://127\.0\.0\.1:\d+(/\S*)'"), r" on \1"),  # a port of this run
)


def _short(why: object) -> str:
    """A reason without the census's own paths and line numbers, cut to a table cell."""
    text = _FOLDERS.sub("", _WHERE.sub("", str(why)))
    for wordy, plain in _WORDY:
        text = wordy.sub(plain, text)
    text = " ".join(text.replace("|", "/").replace("\\'", "'").split())
    return text if len(text) <= _WHY_CHARS else text[: _WHY_CHARS - 3] + "..."


def _classes(results: list[dict[str, Any]]) -> list[str]:
    """`CLASSES`, then any other class a results file holds (one measured before these)."""
    return [*CLASSES, *sorted({str(one["klass"]) for one in results} - set(CLASSES))]


def table(results: list[dict[str, Any]]) -> str:
    """The docs' table: one row per class, its servers, each with why where it is not `works on both`."""
    by: dict[str, list[str]] = collections.defaultdict(list)
    for one in results:
        name = f"`{one['server']}`"
        by[str(one["klass"])].append(
            name if one["klass"] == "works on both" else f"{name} ({_short(one['why'])})"
        )
    lines = [f"| class | servers ({len(results)}) |", "| --- | --- |"]
    for klass in _classes(results):
        lines.append(f"| {klass} ({len(by[klass])}) | {' · '.join(sorted(by[klass])) or '-'} |")
    return "\n".join(lines)


def details(results: list[dict[str, Any]]) -> str:
    """Each server's two sides: rows ok of rows (and re-verified, and how many of those as
    NeMo Gym's example rollouts store them), the calls its policy got, its collected
    rewards, rewards and requests that differ, rows whose reward changed between tries, and
    how long each side took."""
    lines = [
        "| server | NeMo Gym | GymBus | policy calls | rewards collected | reward mismatches | unsettled "
        "| request mismatches | requests (NeMo Gym / GymBus) | seconds (NeMo Gym + GymBus) |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for one in sorted(results, key=lambda one: str(one["server"])):
        theirs, ours = one["nemo_gym"], one["gymbus"]
        asked = one["requests"]
        calls = f"{theirs.get('policy_calls', 0)} / {ours.get('policy_calls', 0)}"
        lines.append(
            f"| `{one['server']}` | {_side(theirs)} | {_side(ours)} | {calls} "
            f"| {_rewards(theirs)} / {_rewards(ours)} | {len(one['reward_mismatches'])} "
            f"| {len(one.get('unsettled', []))} | {len(one['request_mismatches'])} "
            f"| {asked.get('nemo_gym', 0)} / {asked.get('gymbus', 0)} "
            f"| {theirs['seconds']:.0f} + {ours['seconds']:.0f} |"
        )
    unsettled = [f"- `{one['server']}` {said}" for one in results for said in one.get("unsettled", [])]
    if unsettled:
        lines += ["", "Unsettled (one side's own two tries differ on it):", *unsettled]
    return "\n".join(lines)


def _side(side: dict[str, Any]) -> str:
    if side["outcome"] != "works":
        return f"{side['outcome']}: {_short(side.get('cause') or side['why'])[:80]}"
    again = ""
    if side["reverified"]:
        again = f", {side['reverified']} re-verified ({side.get('reproduced', 0)} as stored)"
    return f"{side['ok']}/{side['rows']} collected{again}"


def _rewards(side: dict[str, Any]) -> str:
    """The collected rows' rewards, in task order (`-` where none)."""
    collected = {key: reward for key, reward in side["rewards"].items() if not key.startswith("r")}
    return " ".join(f"{collected[key]:g}" if isinstance(collected[key], int | float) else "none"
                    for key in sorted(collected, key=_task_order)) or "-"  # fmt: skip


def _task_order(key: str) -> tuple[int, ...]:
    return tuple(int(part) for part in key.split(".") if part.isdigit())


def counts(results: list[dict[str, Any]]) -> str:
    """The README's table: how many servers end in each class."""
    by = collections.Counter(str(one["klass"]) for one in results)
    lines = [
        "| class | servers |",
        "| --- | ---: |",
        *(f"| {klass} | {by[klass]} |" for klass in _classes(results)),
    ]
    return "\n".join([*lines, f"| all | {len(results)} |"])


def differences(results: list[dict[str, Any]]) -> list[str]:
    """What must be empty: servers that work on NeMo Gym only, per-row reward and request mismatches."""
    found = []
    for one in results:
        if one["klass"] == "works on NeMo Gym only":
            found.append(f"{one['server']}: works on NeMo Gym only: {one['why']}")
        found += [f"{one['server']}: {said}" for said in one["reward_mismatches"] + one["request_mismatches"]]
    return found


async def census(targets: list[str], out: Path, rows: int) -> list[str]:
    """Measures `targets` into `out`, one server at a time, on one Ray cluster for NeMo Gym's
    side; returns those the census itself failed on (a traceback printed, no row written: a
    run again measures them), so that one server's surprise does not stop a long run."""
    failed: list[str] = []
    if not targets:
        return failed
    _unwrapped_logs()
    with (
        bus.EmbeddedServer() as server,
        tempfile.TemporaryDirectory(prefix="gymbus-census-") as scratch,
        Recorder(Path(scratch) / "requests.jsonl") as recorder,
        ray_cluster(ray_binary()) as ray,
    ):
        for number, target in enumerate(targets, 1):
            work = Path(scratch) / str(number)
            work.mkdir()
            try:
                result = await both_ways(
                    _resolved(target),
                    server.url,
                    recorder,
                    ray,
                    work,
                    rows,
                    _quiet,
                    Worker,
                    classify,
                    TIMEOUTS,
                )
            except Exception:
                failed.append(target)
                print(
                    f"[{number}/{len(targets)}] {target}: the census failed\n{traceback.format_exc()}",
                    flush=True,
                )
                continue
            with open(out, "a") as file:
                file.write(json.dumps(asdict(result)) + "\n")
            mismatches = len(result.reward_mismatches) + len(result.request_mismatches)
            said = f"{result.klass} ({_short(result.why)}; {mismatches} mismatches; {result.seconds:.0f} s)"
            print(f"[{number}/{len(targets)}] {result.server}: {said}", flush=True)
    return failed


def _unwrapped_logs() -> None:
    """uv wraps each message at the width `COLUMNS` names (a shell started in a terminal may
    export it), in a log file too: a cause read from one of its lines is then the end of a
    sentence (`host: github.com`). Without it, uv still wraps at the width of a terminal it
    finds on its standard input, which every installer and server inherits from the census;
    so the census reads nothing from its own standard input and gives them none. Then uv
    writes each message on one line, on both sides, whatever terminal the census was
    started from."""
    os.environ.pop("COLUMNS", None)
    if os.isatty(0):
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)


def _resolved(target: str) -> str:
    """`target`, or `<server>/<config>` where the server has several configs and none named
    after it declares an agent (`swe_next.yaml` starts its servers; `swe_next_example.yaml`
    adds the agent its example rows are collected with, as NeMo Gym's own data check does)."""
    directory, config = locate(target)
    if config is None and not _declares_agent(directory, directory.name):
        return f"{target}/{_first_config(directory)}"
    return target


def _declares_agent(directory: Path, config: str) -> bool:
    try:
        return bool(read_config(directory, config).agents)
    except GymError:
        return False


def all_servers() -> list[str]:
    """Every resources server of the release (a directory with a configs/ folder)."""
    servers = locate("mcqa")[0].parent
    return sorted(path.name for path in servers.iterdir() if (path / "configs").is_dir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("nemo_gym_census.jsonl"))
    parser.add_argument("--servers", nargs="*", help="servers to measure (default: every one of the release)")
    parser.add_argument("--rows", type=int, default=5, help="example rows (and stored rollouts) per server")
    parser.add_argument("--table", type=Path, help="print the tables of a census's results and stop")
    parser.add_argument("--counts", action="store_true", help="with --table: only how many end in each class")
    args = parser.parse_args()
    if args.table:
        results = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        print(counts(results) if args.counts else f"{table(results)}\n\n{details(results)}")
        sys.exit(1 if differences(results) else 0)
    done = set()
    if args.out.exists():  # resume: servers already measured are kept
        measured = [json.loads(line)["server"] for line in args.out.read_text().splitlines() if line.strip()]
        done = {name for server in measured for name in (server, server.partition("/")[0])}
    targets = [target for target in (args.servers or all_servers()) if target not in done]
    print(
        f"nemo-gym {release().version}: measuring {len(targets)} servers both ways into {args.out}",
        flush=True,
    )
    try:
        failed = asyncio.run(census(targets, args.out, args.rows))
    except KeyboardInterrupt:
        # Every server measured is already a line of --out; the one under way is measured again.
        print(f"stopped: the same command goes on from where this one stopped ({args.out})", file=sys.stderr)
        sys.exit(130)
    results = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
    print(f"{table(results)}\n\n{details(results)}")
    found = differences(results)
    for said in found:
        print(f"difference: {said}", file=sys.stderr)
    if failed:
        print(f"the census failed on (run again to measure them): {' '.join(failed)}", file=sys.stderr)
    sys.exit(1 if found or failed else 0)


if __name__ == "__main__":
    main()
