"""GymBus resolves a NeMo Gym config as NeMo Gym's own loader does: every config of every
server of the release, and configs written for the rules the release's own configs do not
use, resolved by both (NeMo Gym's in its own environment, one subprocess for all) and
compared whole. What GymBus deliberately does otherwise is listed here, each with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gymbus.functions.nemo_gym._resolve import MISSING, instances, resolve, unset_values
from gymbus.functions.nemo_gym._venv import HOME_VARIABLE, pinned, virtual_env
from gymbus.schemas import BadRequest, GymError

RESOLVER = Path(__file__).with_name("nemo_gym_resolve.py")

NOT_RESOLVED_BY_GYMBUS = {
    # ng_run's own settings: its head server, ports and installs (GymBus installs, binds and
    # supervises each process itself), and where its runs and caches go (servers read these
    # with `.get`, falling back to the same defaults).
    **dict.fromkeys(
        (
            "head_server",
            "disallowed_ports",
            "port_range_low",
            "port_range_high",
            "use_absolute_ip",
            "head_server_deps",
            "python_version",
            "allow_openai_version_skew",
            "skip_venv_if_present",
            "dry_run",
            "server_spinup_timeout_seconds",
            "model_endpoint_readiness_timeout_seconds",
            "uv_cache_dir",
            "uv_lock_timeout_seconds",
            "uv_venv_dir",
            "results_dir",
            "cache_dir",
        ),
        "ng_run's own settings",
    ),  # fmt: skip
    "config_paths": "the list of files read: GymBus names the config file (ServerConfig.config_file)",
    "error_on_almost_servers": "set by this test: GymBus leaves a block's validation to its server",
}
"""Top-level keys only NeMo Gym's resolution has, and why."""
PER_INSTANCE = "host and port: NeMo Gym assigns each instance one; the bridge binds its own at start"
RELAYS = (
    "environment servers NeMo Gym generates (`legacy_agent`) for agents that have none: GymBus's "
    "runner reaches agents on the bus, and its front generates its own (runner/front/_layout.py)"
)
SUPPLIED = "placeholders the test gives NeMo Gym for what a user supplies (judges, API keys)"
REFUSED_BY_NEMO_GYM_ONLY = {
    "resources_servers/spartqa/configs/spartqa.yaml": (
        "its agent's dataset license `CC-BY-SA-4.0` is not one of the names NeMo Gym's dataset config "
        "accepts, so its loader drops the agent (an almost-server) and then refuses the environment "
        "server naming it; GymBus validates no dataset config: its simple agent reads none"
    ),
}
"""Configs NeMo Gym's loader refuses and GymBus resolves, and why."""


@pytest.fixture(scope="module")
def nemo_gym() -> Path:
    """NeMo Gym's environment (built, or found built); skipped where it cannot be, failed in CI."""
    try:
        return virtual_env([pinned()], "NeMo Gym").path
    except GymError as exc:
        message = f"NeMo Gym's environment unavailable (`sh scripts/install-nemo-gym.sh`): {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI this is a failure, not a skip)")
        pytest.skip(message)


RULES = {
    # What 0.7.0's own configs do not exercise: each file a rule the loader applies.
    "configs/composed.yaml": """
config_paths: [responses_api_agents/standalone/configs/standalone.yaml]
gymbus_rules: {resources_servers: {gymbus_rules: {entrypoint: app.py, domain: other, rate: 1e-5, day: 2024-01-02}}}
gymbus_rules_simple_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server: {type: resources_servers, name: gymbus_rules}
      model_server: {type: responses_api_models, name: policy_model}
      max_steps: 4
      datasets: [{name: example, type: example, jsonl_fpath: data/example.jsonl}]
""",
    "configs/deleted.yaml": """
config_paths: [$HERE/diamond_left.yaml, $HERE/diamond_right.yaml]
skip_verification: true
template: {responses_api_agents: {simple_agent: {entrypoint: app.py, max_steps: 3, temperature: 0.5,
  resources_server: {type: resources_servers, name: gymbus_rules}}}}
gymbus_rules_simple_agent:
  _inherit_from: template
  responses_api_agents: {simple_agent: {seed: 1}}
copied_limits: ${copy:gymbus_rules.resources_servers.gymbus_rules.limits}
moved_limits: ${inherit_from:spare_limits}
spare_limits: {steps: 9}
trimmed_limits: {_copy: spare_limits, _delete_key: "steps, tokens", tokens: 5, note: kept}
""",
    "configs/diamond_left.yaml": """
config_paths: [$HERE/diamond_base.yaml]
gymbus_rules: {resources_servers: {gymbus_rules: {side: left, limits: {tokens: '???', steps: 2}}}}
""",
    "configs/diamond_right.yaml": """
config_paths: [$HERE/diamond_base.yaml]
gymbus_rules: {resources_servers: {gymbus_rules: {side: right, limits: {tokens: 100}}}}
""",
    "configs/diamond_base.yaml": """
gymbus_rules: {resources_servers: {gymbus_rules: {entrypoint: app.py, domain: other, side: base, limits: '???'}}}
""",
    "configs/unset.yaml": """
gymbus_rules: {resources_servers: {gymbus_rules: {entrypoint: app.py, domain: other,
  judge: {type: responses_api_models, name: '???'}, keys: [1, '???']}}}
""",
    "configs/dangling.yaml": """
gymbus_rules: {resources_servers: {gymbus_rules: {entrypoint: app.py, domain: other}}}
lost_agent: {responses_api_agents: {simple_agent: {entrypoint: app.py,
  resources_server: {type: resources_servers, name: nobody}}}}
""",
}
AGENT = """
standalone:
  responses_api_agents:
    standalone_agent:
      entrypoint: app.py
      resources_server: {type: resources_servers, name: '???'}
      model_server: {type: responses_api_models, name: policy_model}
      turns: 7
"""


def rule_configs(root: Path) -> list[str]:
    """Write `RULES` as a server of a NeMo Gym tree at `root`; their paths in it."""
    server = root / "resources_servers" / "gymbus_rules"
    for name, text in RULES.items():
        (server / name).parent.mkdir(parents=True, exist_ok=True)
        (server / name).write_text(text.replace("$HERE", "resources_servers/gymbus_rules/configs"))
    agent = root / "responses_api_agents" / "standalone" / "configs" / "standalone.yaml"
    agent.parent.mkdir(parents=True)
    agent.write_text(AGENT)
    return [f"resources_servers/gymbus_rules/{name}" for name in RULES if "diamond" not in name]


def by_nemo_gym(env: Path, configs: list[str], cwd: Path) -> list[dict[str, Any]]:
    """NeMo Gym's resolution of each of `configs` (relative to `cwd`, then to its install root)."""
    done = subprocess.run(
        [str(env / "bin" / "python"), str(RESOLVER), *configs],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def compared(nemo_gym: dict[str, Any], gymbus: dict[str, Any]) -> dict[str, Any]:
    """NeMo Gym's resolution without what GymBus deliberately leaves out (the lists above)."""
    theirs = {key: value for key, value in nemo_gym["resolved"].items() if key not in NOT_RESOLVED_BY_GYMBUS}
    for name in nemo_gym["supplied"]:  # SUPPLIED
        theirs.pop(name)
    for kind in ("responses_api_models", "resources_servers", "responses_api_agents", "environment_servers"):
        for name, (impl, block) in instances(theirs, kind).items():
            ours = ((gymbus.get(name) or {}).get(kind) or {}).get(impl) or {}
            for key in ("host", "port"):  # PER_INSTANCE
                if key not in ours:
                    block.pop(key, None)
            if (
                name not in gymbus
                and block.keys() == {"entrypoint", "agent_server"}
                and impl == "legacy_agent"
            ):
                theirs.pop(name)  # RELAYS
    return theirs


def differences(theirs: Any, ours: Any, at: str = "") -> list[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return [
            found
            for key in sorted({*theirs, *ours}, key=str)
            for found in differences(theirs.get(key, "<absent>"), ours.get(key, "<absent>"), f"{at}.{key}")
        ]
    return [] if theirs == ours else [f"{at}: NeMo Gym {theirs!r:.200}, GymBus {ours!r:.200}"]


def unset_in(message: str) -> list[str]:
    """The paths NeMo Gym's `ConfigMissingValuesError` lists."""
    return [line.removeprefix("  - ") for line in message.splitlines() if line.startswith("  - ")]


def test_every_config_resolves_as_nemo_gyms_own_loader_resolves_it(nemo_gym: Path, tmp_path: Path) -> None:
    package = next((nemo_gym / "lib").glob("python3*/site-packages"))
    configs = [
        str(path.relative_to(package)) for path in sorted(package.glob("resources_servers/*/configs/*.yaml"))
    ]
    configs += rule_configs(tmp_path)
    assert len(configs) > 200  # every server's configs, not a few
    seen: dict[str, list[str]] = {}
    whole = set()  # resolved by both, and compared
    for result in by_nemo_gym(nemo_gym, configs, tmp_path):
        root = tmp_path if (tmp_path / result["config"]).exists() else package
        try:
            ours: Any = resolve(root / result["config"], root)
        except BadRequest as exc:
            ours = exc
        if result["config"] in REFUSED_BY_NEMO_GYM_ONLY:
            assert "error" in result and not isinstance(ours, BadRequest), result["config"]
            continue
        seen[result["config"]] = agreement(result, ours)
        if "error" not in result:
            whole.add(result["config"])
    disagreeing = {config: found for config, found in seen.items() if found}
    assert not disagreeing, json.dumps(disagreeing, indent=1)[:6000]
    assert len(whole) > 200
    assert {
        "resources_servers/swe_rebench/configs/swe_rebench_opencode.yaml",  # `_inherit_from` of the agent
        "resources_servers/conversational_tool_use_simulation/configs/conversational_tool_use_simulation.yaml",
        "resources_servers/gymbus_rules/configs/composed.yaml",
        "resources_servers/gymbus_rules/configs/deleted.yaml",
    } <= whole


def agreement(nemo_gym: dict[str, Any], ours: Any) -> list[str]:
    """How GymBus's resolution (or refusal) differs from NeMo Gym's; [] if it does not."""
    if "error" not in nemo_gym:
        if isinstance(ours, BadRequest):
            return [f"GymBus refused ({ours}), NeMo Gym resolved it"]
        return differences(compared(nemo_gym, ours), ours)
    if nemo_gym["error"] == "ConfigMissingValuesError" and not isinstance(ours, BadRequest):
        unset = unset_values(ours)  # GymBus refuses these when it starts a server: `_config._all_set`
        return (
            []
            if unset == unset_in(nemo_gym["message"])
            else [f"unset: NeMo Gym {nemo_gym['message']}, GymBus {unset}"]
        )
    if isinstance(ours, BadRequest):
        return []
    return [f"NeMo Gym refused ({nemo_gym['error']}: {nemo_gym['message'][:300]}), GymBus resolved it"]


def test_the_rules_did_what_their_configs_ask(tmp_path: Path) -> None:
    """What the configs above resolve to, by GymBus alone (runs without NeMo Gym)."""
    rule_configs(tmp_path)
    server = tmp_path / "resources_servers" / "gymbus_rules" / "configs"
    composed = resolve(server / "composed.yaml", tmp_path)
    assert "standalone" not in composed and "gymbus_rules_simple_agent" not in composed
    agent = composed["gymbus_rules_standalone_agent"]["responses_api_agents"]["standalone_agent"]
    assert agent["turns"] == 7 and agent["resources_server"]["name"] == "gymbus_rules"
    assert "max_steps" not in agent and agent["datasets"][0]["name"] == "example"
    assert composed["agent_map"] == {"gymbus_rules_simple_agent": "gymbus_rules_standalone_agent"}
    block = composed["gymbus_rules"]["resources_servers"]["gymbus_rules"]
    assert (block["rate"], block["day"]) == (1e-5, "2024-01-02")  # as OmegaConf reads YAML
    deleted = resolve(server / "deleted.yaml", tmp_path)
    simple = deleted["gymbus_rules_simple_agent"]["responses_api_agents"]["simple_agent"]
    assert (simple["max_steps"], simple["temperature"], simple["seed"]) == (3, 0.5, 1)
    assert simple["skip_verification"] is True and "template" not in deleted
    assert deleted["gymbus_rules"]["resources_servers"]["gymbus_rules"]["side"] == "right"
    assert deleted["copied_limits"] == {"tokens": 100, "steps": 2}
    assert deleted["moved_limits"] == {"steps": 9} and "spare_limits" not in deleted
    assert deleted["trimmed_limits"] == {"note": "kept"}
    assert unset_values(resolve(server / "unset.yaml", tmp_path)) == [
        "gymbus_rules.resources_servers.gymbus_rules.judge.name",
        "gymbus_rules.resources_servers.gymbus_rules.keys[1]",
    ]
    assert MISSING == "???"
    with pytest.raises(BadRequest, match="lost_agent's resources_server names resources_servers/'nobody'"):
        resolve(server / "dangling.yaml", tmp_path)


def test_a_servers_overrides_force_their_versions_as_nemo_gyms_installer_forces_them(
    nemo_gym: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NeMo Gym's installer passes a requirements.txt server's `overrides.txt` to uv
    (`--override`): `wmt_translation` forces protobuf 6 over comet's `<5`, which nemo-gym's
    wandb needs, and cannot be installed without it. Built for real, with a small package."""
    monkeypatch.setenv(HOME_VARIABLE, str(tmp_path / "home"))
    directory = tmp_path / "resources_servers" / "forced"
    directory.mkdir(parents=True)
    (directory / "requirements.txt").write_text("six==1.16.0\n")
    (directory / "overrides.txt").write_text("six==1.17.0\n")

    def six_in(env_python: Path) -> str:
        said = subprocess.run(
            [env_python, "-c", "import six; print(six.__version__)"], capture_output=True, text=True
        )
        return said.stdout.strip()

    forced = virtual_env(["six==1.16.0"], "forced", directory)
    assert six_in(forced.python) == "1.17.0"
    (directory / "overrides.txt").unlink()
    declared = virtual_env(["six==1.16.0"], "forced", directory)
    assert declared.path != forced.path and six_in(declared.python) == "1.16.0"
