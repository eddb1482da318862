"""NeMo Gym's own stack, run as a NeMo Gym user runs it, for the census's both-ways run.

`ng_run` with the server's config and a model config whose policy and judges are NeMo
Gym's `openai_model` pointing at the census endpoint (each under its own name), joining
the census's one Ray cluster as NeMo RL's runs join theirs (`ray_cluster`: no Ray start per
server, which busy cores would miss), then
`ng_collect_rollouts` on the server's example rows, and `gym eval reverify --force` of
stored rollouts. NeMo Gym builds a virtual environment per server with uv; here each
server's directory is given the environment GymBus built for it from the same
requirements (`+uv_venv_dir` to a tree of links, `+skip_venv_if_present`), so both sides
run the same packages and no build happens at start. Where GymBus cannot build one (its
install refused a download, a conflict in its rewrite of the requirements), no link is made
and NeMo Gym's own installer builds it as `ng_run` starts: its refusal, if any, is NeMo Gym's
side's own, in its own log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from bench._procs import stop_ng_run
from bench._ray import RAY_ENVIRONMENT
from gymbus.functions.nemo_gym import find_python, release, requirements_of, virtual_env
from gymbus.functions.nemo_gym._resolve import resolve
from gymbus.functions.nemo_gym._venv import pinned, tool_path
from gymbus.schemas import DEFAULT_TIMEOUTS, GymError

__all__ = ["START_TIMEOUT", "STOPPED", "OwnStack", "materialize", "model_names", "needs_vllm", "ray_binary"]

_KINDS = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")
POLICY = "policy_model"
_RAISED = re.compile(r"^(\([\w.-]+\) )?[\w.]+(Error|Exception|Exit)\b.*:")
"""An exception raised, opening a line (after the server's name in parentheses where `ng_run`
prefixes a server's lines with it)."""
_INSTALL_FAILED = re.compile(r"^(\([\w.-]+\) )?error: ")
"""NeMo Gym's own installer (uv) failing: the lines of its last command carry the server's name
in parentheses, those of the commands before it do not (a server with a pyproject.toml
installs `nemo-gym` alone first, and that resolution is where an unfit Python is refused)."""
_CLI_REFUSED = re.compile(r"^Error: ")
"""NeMo Gym's CLI refusing the config (a `ConfigError`, which Rich prints as `Error: ...`)
before it starts any server."""
START_TIMEOUT = DEFAULT_TIMEOUTS.nemo_gym_start + 60.0
"""Seconds each side gets to start every server of the config: more than each side's own
limit (NeMo Gym's `server_spinup_timeout_seconds`, which GymBus shares), so that a server
that does not start says so in each side's own words, and more than a server's own wait
before it fails (competitive_coding_challenges waits 240 s for its sandbox)."""
OWN_INSTALL_TIMEOUT = 900.0
"""Seconds `ng_run` gets where NeMo Gym's own installer builds an environment first."""
STOPPED = -1
"""The status of a command the census stopped at its time limit."""


def ray_binary() -> Path:
    """The `ray` of NeMo Gym's own environment, which starts the census's cluster."""
    return virtual_env([pinned()], "NeMo Gym").python.parent / "ray"


def needs_vllm(config_file: Path) -> bool:
    """Whether a resources server of the config allows only vLLM model servers as its policy
    (`allowed_model_types`: `asr_with_pc`, whose audio only NeMo Gym's vLLM adapter sends):
    then each side's policy is its vLLM adapter (token capture off: the endpoint is no vLLM)."""
    document = yaml.safe_load(config_file.read_text()) or {}
    for value in document.values():
        for server in (
            ((value or {}).get("resources_servers") or {}).values() if isinstance(value, dict) else ()
        ):
            allowed = (server or {}).get("allowed_model_types") if isinstance(server, dict) else None
            if allowed and "openai_model" not in allowed:
                return True
    return False


def model_names(config_file: Path) -> set[str]:
    """The model servers the config refers to (`type: responses_api_models`, `name: ...`),
    read from its YAML as NeMo Gym reads it, not through GymBus's config reader."""
    found: set[str] = set()
    pending: list[Any] = [yaml.safe_load(config_file.read_text())]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if value.get("type") == "responses_api_models" and isinstance(value.get("name"), str):
                found.add(value["name"])
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return found


def _openai_model(endpoint: Any, name: str) -> dict[str, Any]:
    model = "policy" if name == POLICY else name
    return {"responses_api_models": {"openai_model": {
        "entrypoint": "app.py", "openai_base_url": endpoint.url(model), "openai_api_key": "census",
        "openai_model": model, "openai_default_headers": {},
    }}}  # fmt: skip


def _server_failure(log: str) -> str:
    """`ng_run`'s log up to the first exception a server raised, with the lines that detail
    it (a `ValidationError` names its fields below), or up to NeMo Gym's own installer's
    failure, with the causes it gives: what follows is that failure's
    consequence (`ng_run`'s own `RuntimeError: Process ... finished unexpectedly!`, which
    names the server but not why, and the other servers' `KeyboardInterrupt` as it stops
    them). NeMo Gym's warning about the open-files limit quotes an `OSError`: not one. A config
    NeMo Gym's own validation refuses (an "almost-server") is that refusal, not the config it
    prints after it; one its CLI refuses before starting a server (`Error: ...`), that refusal."""
    refused = log.find("Almost-Server Detected")
    if refused >= 0:  # NeMo Gym's own validation refused the config: said before it prints the config
        said = " ".join(log[refused : log.find("This server will NOT be started", refused)].split())
        return f"NeMo Gym's config validation refused it: {said[:600]}"
    lines = [line for line in log.splitlines() if "Found ulimit of" not in line]
    for number, line in enumerate(lines):
        if _CLI_REFUSED.match(line):
            return "\n".join([*lines[:number], _refusal(lines, number)])
        if _INSTALL_FAILED.match(line):
            return "\n".join(lines[: _installer_said(lines, number)])
        raised = _RAISED.match(line)
        if raised and "finished unexpectedly!" not in line:
            return "\n".join(lines[: _details_end(lines, number, raised[1] or "")])
    return "\n".join(lines)


def _details_end(lines: list[str], raised: int, name: str) -> int:
    """Where the lines that detail the exception at line `raised` end: up to 5 more, and
    only the same server's (`name`, its prefix) where `ng_run` names it: what `ng_run`
    prints next (its own "finished unexpectedly") is not that server's."""
    end = raised + 1
    while end < min(len(lines), raised + 6) and lines[end].startswith(name):
        end += 1
    return end


def _installer_said(lines: list[str], failed: int) -> int:
    """Where what NeMo Gym's installer printed about its failure at line `failed` ends: the
    causes follow the error, each line with the server's name in parentheses where the
    error has it, else indented below it."""
    named = _INSTALL_FAILED.match(lines[failed])
    continued = named[1].strip() if named and named[1] else " "
    end = failed + 1
    while end < len(lines) and lines[end].startswith(continued):
        end += 1
    return end


def _refusal(lines: list[str], at: int) -> str:
    """The CLI's refusal starting at line `at`, one line again: Rich wraps it at its console's
    width, keeping the space where it breaks between words and none where it folds a word
    longer than a line (a config value's dotted name), so its lines join with nothing
    between. Its first paragraph is the refusal; what follows the blank line is advice."""
    end = at
    while end < len(lines) and lines[end].strip():
        end += 1
    return "".join(lines[at:end])


def _free_port() -> int:
    with socket.socket() as one:
        one.bind(("127.0.0.1", 0))
        return int(one.getsockname()[1])


def _resolve_as_declared(work: Path) -> dict[str, str]:
    """On an older patch release of Python than nemo-gym declares (3.13.0 for 0.7.0's
    3.13.14), NeMo Gym's own installer refuses every environment it builds; GymBus's resolves
    for the declared version (`Python.needs_override`). NeMo Gym's is told the same through
    uv's own settings file, so both sides install under one rule: its code is unchanged."""
    python = find_python(release().python)
    if not python.needs_override:
        return {}
    settings = work / "uv.toml"
    settings.write_text(f'[pip]\npython-version = "{python.wanted_text}"\n')
    return {"UV_CONFIG_FILE": str(settings)}


class OwnStack:
    """`ng_run` of one server's config; `collect` and `reverify` run against it."""

    def __init__(
        self, config_file: Path, judges: tuple[str, ...], endpoint: Any, ray: str, work: Path
    ) -> None:
        base = virtual_env([pinned()], "NeMo Gym")
        self.bin = base.python.parent
        self.tree = base.site_packages()
        self.work = work
        self.log = work / "ng_run.log"
        self.own_installs: list[str] = []
        """The server directories NeMo Gym's own installer builds (GymBus's build refused them)."""
        models = work / "census_models.yaml"
        served = {name: _openai_model(endpoint, name) for name in (POLICY, *judges)}
        if needs_vllm(config_file):
            served[POLICY] = {"responses_api_models": {"vllm_model": {
                "entrypoint": "app.py", "base_url": endpoint.url("policy"), "api_key": "census", "model": "policy",
                "return_token_id_information": False, "uses_reasoning_parser": False,
            }}}  # fmt: skip
        models.write_text(yaml.safe_dump(served))
        kinds = {kind for model in served.values() for kind in model["responses_api_models"]}
        self.settings = [
            f"+config_paths=[{self._without(config_file, (POLICY, *judges))},{models}]",
            f"+uv_venv_dir={self._link_environments(config_file, kinds)}",
            "+skip_venv_if_present=true",
            f"+head_server={{host:127.0.0.1,port:{_free_port()}}}",
            f"+policy_base_url={endpoint.url('policy')}",
            "+policy_api_key=census",
            "+policy_model_name=policy",
            f"+ray_head_node_address={ray}",
        ]
        # uv on the path, as where NeMo Gym is installed: bigcodebench builds its sandbox with it.
        # So is the Python NeMo Gym runs on: its installer asks uv for that very version.
        path = os.pathsep.join([str(base.python.resolve().parent), tool_path()])
        self.environment = {**os.environ, **RAY_ENVIRONMENT, "PATH": path, **_resolve_as_declared(work)}
        self.process: subprocess.Popen[bytes] | None = None

    def _without(self, config_file: Path, models: tuple[str, ...]) -> Path:
        """The server's config without its own definitions of the models the census serves
        (`arena`'s config defines its judge as a `vllm_model` at NVIDIA's API), as a NeMo Gym
        user pointing the judge at their endpoint edits it: merged with the census's
        `openai_model` under the same name, NeMo Gym refuses a model server of two types."""
        document = yaml.safe_load(config_file.read_text()) or {}
        if not set(document) & set(models):
            return config_file
        copy = self.work / f"own_{config_file.name}"
        copy.write_text(
            yaml.safe_dump({name: value for name, value in document.items() if name not in models})
        )
        return copy

    def _link_environments(self, config_file: Path, models: set[str]) -> Path:
        """A tree `<kind>/<name>/.venv` of links to the environments GymBus built (building
        any not built yet) for every server directory the config names once resolved as
        NeMo Gym resolves it (an agent it inherits lives in another directory than the
        config's own document says) and the census's `models`; one GymBus cannot build is
        left to NeMo Gym's own installer."""
        root = self.work / "venvs"
        root.mkdir(parents=True, exist_ok=True)
        directories = {self.tree / "responses_api_models" / model for model in models}
        try:  # what ng_run will start: the servers its `config_paths` and `_inherit_from` bring in too
            document = resolve(config_file, self.tree)
        except GymError:  # NeMo Gym refuses it too, and says so as it starts
            document = yaml.safe_load(config_file.read_text()) or {}
        for value in document.values():
            if isinstance(value, dict):
                for kind in _KINDS:
                    for name in value.get(kind) or {}:
                        directories.add(self.tree / kind / name)
        for directory in sorted(path for path in directories if path.is_dir()):
            try:
                env = virtual_env(requirements_of(directory), directory.name, directory)
            except GymError:
                self.own_installs.append(f"{directory.parent.name}/{directory.name}")
                continue
            link = root / directory.parent.name / directory.name / ".venv"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(env.path)
        return root

    def start(self) -> str | None:
        """`None` once every server is ready; else why not (its log's tail)."""
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [str(self.bin / "ng_run"), *self.settings], cwd=self.work, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, env=self.environment,
            )  # fmt: skip
        limit = OWN_INSTALL_TIMEOUT if self.own_installs else START_TIMEOUT
        deadline = time.monotonic() + limit
        while True:
            text = self.log.read_text(errors="replace")
            if "servers ready!" in text:
                return None
            if self.process.poll() is not None:
                return f"ng_run exited with code {self.process.returncode}: " + _server_failure(text)[-3000:]
            if time.monotonic() > deadline:
                return f"ng_run did not start within {limit:.0f} s: " + text[-3000:]
            time.sleep(1)

    def stop(self) -> None:
        if self.process is not None:
            stop_ng_run(self.process)

    def _run(self, command: list[str], log: Path, timeout: float) -> int:
        """Run `command` to its end in a process group of its own, then end what it left
        running: `gym eval reverify` starts the config's servers and leaves them behind."""
        with open(log, "wb") as out:
            process = subprocess.Popen(
                command, cwd=self.work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=self.environment,
            )  # fmt: skip
            try:
                status = process.wait(timeout)
            except subprocess.TimeoutExpired:
                status = STOPPED
            for sent in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sent)
                except ProcessLookupError:
                    break
                time.sleep(5 if sent == signal.SIGINT else 0)
            process.wait()
            return status

    def collect(self, agent: str, rows: Path, output: Path, timeout: float) -> int:
        """`ng_collect_rollouts` of `rows` with `agent` (where none, the one each row names):
        its exit status."""
        named = [f"+agent_name={agent}"] if agent else []
        command = [str(self.bin / "ng_collect_rollouts"), *self.settings[2:], *named,
                   f"+input_jsonl_fpath={rows}", f"+output_jsonl_fpath={output}"]  # fmt: skip
        return self._run(command, output.with_suffix(".log"), timeout)

    def reverify(self, inputs: Path, rollouts: Path, output: Path, timeout: float) -> int:
        """`gym eval reverify --force` (it starts the config's servers itself): its exit status."""
        command = [str(self.bin / "gym"), "eval", "reverify", "--inputs", str(inputs), "--rollouts", str(rollouts),
                   "--output", str(output), "--force", "--disable-aggregation", *self.settings]  # fmt: skip
        return self._run(command, output.with_suffix(".log"), timeout)


def materialize(rollouts: Path, example: Path, target: Path, agent: str) -> Path:
    """NeMo Gym's materialized inputs for stored `rollouts` of `example`'s rows: each rollout's
    example row (the one with its prompt) under the rollout's task and rollout index, as
    `ng_collect_rollouts` would have written them beside the rollouts. `rollouts` keeps only
    the rollouts of example rows: NeMo Gym's reverify stops at the first it cannot join."""
    by_prompt = {}
    for line in example.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_prompt[_prompt(row)] = row
    inputs, kept = [], []
    for number, line in enumerate(rollouts.read_text().splitlines()):
        if not line.strip():
            continue
        rollout = json.loads(line)
        row = by_prompt.get(_prompt(rollout))
        if row is not None:
            indices = {"_ng_task_index": rollout.get("_ng_task_index", number),
                       "_ng_rollout_index": rollout.get("_ng_rollout_index", 0)}  # fmt: skip
            ref = {"agent_ref": {"type": "responses_api_agents", "name": agent}}
            inputs.append(json.dumps(row | indices | ref))
            kept.append(line)
    target.write_text("".join(line + "\n" for line in inputs))
    rollouts.write_text("".join(line + "\n" for line in kept))
    return target


def _prompt(row: dict[str, Any]) -> str:
    params = row.get("responses_create_params") or {}
    items = params.get("input")
    if isinstance(items, list):
        items = [
            {k: v for k, v in item.items() if k in ("role", "content")}
            for item in items
            if isinstance(item, dict)
        ]
    return json.dumps([items, params.get("instructions")], sort_keys=True)
