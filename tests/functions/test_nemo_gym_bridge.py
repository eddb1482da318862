"""The NeMo Gym bridge's own logic, without a server: requirements, configs, settings, the
verify requests it sends and the errors it reports. (Hosting real servers:
tests/integration/test_nemo_gym.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gymbus.functions.nemo_gym import (
    NEMO_GYM_VERSION,
    PYTHON_VARIABLE,
    RELEASES,
    VERSION_VARIABLE,
    find_python,
    release,
    requirements_of,
)
from gymbus.functions.nemo_gym._config import agent_config, global_config, read_config, settings_of
from gymbus.functions.nemo_gym._hosted import _tools
from gymbus.functions.nemo_gym._http import unprocessable
from gymbus.functions.nemo_gym._proxy import _completed, _without_echo
from gymbus.functions.nemo_gym._python import Python
from gymbus.functions.nemo_gym._venv import _build_commands, overrides_of
from gymbus.schemas import BadRequest

PIN = f"nemo-gym=={NEMO_GYM_VERSION}"

CONFIG = """
judged_server:
  resources_servers:
    judged:
      entrypoint: app.py
      domain: math
      judge_model_server: {type: responses_api_models, name: policy_model}
      second_opinion: {type: responses_api_models, name: strict_judge}
judged_simple_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: judged_server}
      model_server: {type: responses_api_models, name: policy_model}
      max_steps: 3
judged_game_agent:
  responses_api_agents:
    gymnasium_agent:
      resources_server: {type: resources_servers, name: judged_server}
other_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: someone_else}
someone_else:
  resources_servers:
    elsewhere: {entrypoint: app.py, domain: other}
"""


def server(tmp_path: Path, requirements: str = "", config: str = CONFIG) -> Path:
    directory = tmp_path / "resources_servers" / "judged"
    (directory / "configs").mkdir(parents=True)
    (directory / "configs" / "judged.yaml").write_text(config)
    if requirements:
        (directory / "requirements.txt").write_text(requirements)
    return directory


def test_the_line_naming_nemo_gym_itself_becomes_the_pinned_release(tmp_path: Path) -> None:
    requirements = "-e nemo-gym[dev] @ ../../\n# a comment\ntiktoken  # for tokens\n\nmath-verify==0.8.0\n"
    assert requirements_of(server(tmp_path, requirements)) == [PIN, "tiktoken", "math-verify==0.8.0"]
    other = tmp_path / "other"
    (other / "resources_servers" / "x").mkdir(parents=True)
    (other / "resources_servers" / "x" / "requirements.txt").write_text("-e ../../\npandas\n")
    assert requirements_of(other / "resources_servers" / "x") == [PIN, "pandas"]


def test_a_config_names_the_server_its_simple_agents_and_the_models_it_calls(tmp_path: Path) -> None:
    config = read_config(server(tmp_path))
    assert (config.name, config.instance) == ("judged", "judged_server")
    assert [(a.name, a.kind, a.max_steps) for a in config.agents] == [
        ("judged_simple_agent", "simple_agent", 3),
        ("judged_game_agent", "gymnasium_agent", None),
    ]
    assert config.models == ("policy_model", "strict_judge")
    started_with = global_config(config, config.block, {"policy_model": 4001, "strict_judge": 4002})
    assert started_with["policy_base_url"] == "http://127.0.0.1:4001/v1"
    judge = started_with["strict_judge"]["responses_api_models"]["openai_model"]
    assert (judge["host"], judge["port"]) == ("127.0.0.1", 4002)
    assert started_with["judged_server"]["resources_servers"]["judged"]["domain"] == "math"


def test_an_agent_that_names_no_resources_server_is_its_configs(tmp_path: Path) -> None:
    """NeMo Gym calls such an agent self-contained (legal_agent_bench's Harbor agent grades
    its own tasks): it is collected with the rows of its config, so it is served with it.
    An agent bound to another server's instance stays that server's."""
    harbor = "judged_harbor_agent:\n  responses_api_agents:\n    harbor_agent:\n      concurrency: 1\n"
    config = read_config(server(tmp_path, config=CONFIG + harbor))
    assert [agent.name for agent in config.agents] == [
        "judged_simple_agent",
        "judged_game_agent",
        "judged_harbor_agent",
    ]


def test_a_configs_own_config_paths_are_merged_under_it_as_nemo_gym_merges_them(tmp_path: Path) -> None:
    """`toolsandbox`'s config takes its agent's entrypoint and model server from the agent's
    own config, which it names in `config_paths` (relative to NeMo Gym's root)."""
    agent = tmp_path / "responses_api_agents" / "talker" / "configs"
    agent.mkdir(parents=True)
    (agent / "talker.yaml").write_text(
        "judged_talker:\n  responses_api_agents:\n    talker:\n      entrypoint: app.py\n"
        "      model_server: {type: responses_api_models, name: policy_model}\n"
        "      resources_server: {type: resources_servers, name: nobody}\n      max_steps: 9\n"
    )
    config = (
        "config_paths:\n  - responses_api_agents/talker/configs/talker.yaml\n"
        + CONFIG
        + (
            "judged_talker:\n  responses_api_agents:\n    talker:\n      resources_server: {name: judged_server}\n"
        )
    )
    talker = {agent.name: agent for agent in read_config(server(tmp_path, config=config)).agents}[
        "judged_talker"
    ]
    assert (talker.name, talker.kind, talker.max_steps) == ("judged_talker", "talker", 9)
    assert talker.block["entrypoint"] == "app.py"
    assert talker.block["resources_server"] == {"type": "resources_servers", "name": "judged_server"}
    loop = server(
        tmp_path / "loop", config="config_paths: [resources_servers/judged/configs/judged.yaml]\n" + CONFIG
    )
    assert read_config(loop).instance == "judged_server"  # a file already read is not read again


def test_a_copy_of_the_policy_is_the_policy_and_a_block_that_is_no_server_reaches_the_server(
    tmp_path: Path,
) -> None:
    """conversational_tool_use_simulation's `simulator_model: {_copy: policy_model}` reaches
    the policy's endpoint under NeMo Gym; the SWE servers' `sandbox_provider: sandbox` names
    the top-level block `sandbox`."""
    config = read_config(server(tmp_path, config=(
        "judged_server:\n  resources_servers:\n    judged:\n      entrypoint: app.py\n      domain: math\n"
        "      sandbox_provider: sandbox\n      user_model: {type: responses_api_models, name: simulator_model}\n"
        "simulator_model: {_copy: policy_model}\nsandbox: {docker: {image: python}}\n"
    )))  # fmt: skip
    assert (config.policy_aliases, config.models) == (("simulator_model",), ("policy_model",))
    started_with = global_config(config, config.block, {"policy_model": 4001})
    assert started_with["simulator_model"] == started_with["policy_model"]
    assert started_with["sandbox"] == {"docker": {"image": "python"}}


def test_a_value_left_unset_is_refused_when_the_server_starts(tmp_path: Path) -> None:
    config = read_config(server(tmp_path, config=CONFIG.replace("name: strict_judge", "name: '???'")))
    with pytest.raises(
        BadRequest, match=r"unset \(\?\?\?\): judged_server\..*second_opinion\.name.*GYMBUS_JUDGED"
    ):
        global_config(config, config.block, {"policy_model": 4001})


def test_a_config_without_a_resources_server_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match=r"judged\.yaml must declare one resources server"):
        read_config(server(tmp_path, config="just_an_agent: {responses_api_agents: {simple_agent: {}}}\n"))
    with pytest.raises(BadRequest, match="has no config nope.yaml; it has: judged"):
        read_config(server(tmp_path / "again"), "nope")


def test_settings_change_the_config_block_from_a_json_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = read_config(server(tmp_path))
    monkeypatch.setenv("GYMBUS_JUDGED", json.dumps({"should_use_judge": True}))
    assert settings_of(config, "GYMBUS_JUDGED")["should_use_judge"] is True
    monkeypatch.setenv("GYMBUS_JUDGED", "[1, 2]")
    with pytest.raises(BadRequest, match=r"\$GYMBUS_JUDGED must be a JSON object"):
        settings_of(config, "GYMBUS_JUDGED")


def test_a_catch_all_route_offers_the_tools_its_example_rows_name(tmp_path: Path) -> None:
    directory = server(tmp_path)
    (directory / "data").mkdir()
    rows = [
        {"responses_create_params": {"input": "x", "tools": [{"type": "function", "name": name}]}}
        for name in ("add", "sin")
    ]
    (directory / "data" / "example.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert _tools(["/{path}"], directory) == ("add", "sin")
    assert _tools(["/lookup", "/mcp", "/seed_session", "/verify", "/close_session"], directory) == ("lookup",)
    assert _tools(["/reset", "/step", "/close", "/aggregate_metrics"], directory) == ("close", "step")


def test_a_422_names_each_field_the_server_refused() -> None:
    body = {
        "detail": [
            {"type": "bool_type", "loc": ["body", "responses_create_params", "parallel_tool_calls"],
             "msg": "Input should be a valid boolean"},
            {"type": "missing", "loc": ["body", "expected_count"], "msg": "Field required"},
        ]
    }  # fmt: skip
    assert unprocessable(json.dumps(body).encode()) == (
        "field `responses_create_params.parallel_tool_calls`: Input should be a valid boolean; "
        "field `expected_count`: Field required"
    )


def test_a_verify_request_goes_as_nemo_gyms_agent_sends_it() -> None:
    stored = {
        "responses_create_params": {
            "input": "q",
            "parallel_tool_calls": False,
            "tools": [{"type": "function"}],
        },
        "response": {"id": "r", "output": [], "usage": {"total_tokens": 3}},
        "reward": 1.0,
        "extracted_answer": "B",
        "expected_answer": "B",
    }
    sent = json.loads(_completed(json.dumps(stored).encode(), frozenset({"reward", "extracted_answer"})))
    assert "reward" not in sent and "extracted_answer" not in sent and sent["expected_answer"] == "B"
    response = sent["response"]
    assert (response["parallel_tool_calls"], response["tool_choice"]) == (False, "auto")
    assert response["tools"] == [{"type": "function"}]
    assert response["usage"]["total_tokens"] == 3 and response["usage"]["input_tokens_details"] == {
        "cached_tokens": 0
    }
    complete = json.dumps({"response": {**response}, "expected_answer": "B"}).encode()
    assert _completed(complete, frozenset({"reward"})) == complete  # nothing to change: sent as it came


def test_the_verify_reply_leaves_out_what_the_server_echoes() -> None:
    reply = {"responses_create_params": {}, "response": {}, "reward": 0.5, "extracted_answer": "C"}
    assert json.loads(_without_echo(json.dumps(reply).encode())) == {"reward": 0.5, "extracted_answer": "C"}


def test_a_judge_failure_the_server_reports_carries_the_judges_error_as_its_message() -> None:
    reply = {"reward": 0.0, "_ng_failure_class": "judge_failed", "failure_reason": "judge said nothing",
             "_ng_failure_judge_error": "no model serves `judge_model`"}  # fmt: skip
    said = json.loads(_without_echo(json.dumps(reply).encode()))
    assert said["_ng_failure_message"] == "no model serves `judge_model`"


def test_a_named_python_older_than_the_release_needs_is_refused_saying_what_is_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PYTHON_VARIABLE, sys.executable)
    for wanted in ((3, 12, 0), (3, 13, 14)):
        find_python.cache_clear()
        try:
            if sys.version_info[:2] >= wanted[:2]:
                assert find_python(wanted).path == sys.executable
            else:
                minor = rf"{wanted[0]}\.{wanted[1]}"
                with pytest.raises(
                    BadRequest, match=rf"\${PYTHON_VARIABLE}=.* is Python 3\.11.*needs Python {minor}"
                ):
                    find_python(wanted)
        finally:
            find_python.cache_clear()


def test_the_release_is_a_setting_and_an_unknown_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERSION_VARIABLE, raising=False)
    assert release().version == NEMO_GYM_VERSION == "0.7.0"
    monkeypatch.setenv(VERSION_VARIABLE, "0.4.0")
    assert release() == RELEASES["0.4.0"] and requirements_of(None) == ["nemo-gym==0.4.0"]
    monkeypatch.setenv(VERSION_VARIABLE, "0.5.1")
    with pytest.raises(BadRequest, match=r"GYMBUS_NEMO_GYM_VERSION=0\.5\.1.*runs releases 0\.7\.0, 0\.4\.0"):
        release()


def test_an_older_patch_release_installs_resolving_for_the_one_the_release_declares(tmp_path: Path) -> None:
    older = Python("/usr/bin/python3.13", (3, 13, 0), (3, 13, 14))
    install = _build_commands(older, tmp_path / "venv", tmp_path / "r.txt")[-1]
    if "uv" in Path(install[0]).name:
        assert install[install.index("--python-version") + 1] == "3.13.14"
    else:
        assert "--ignore-requires-python" in install
    recent = Python("/usr/bin/python3.13", (3, 13, 15), (3, 13, 14))
    assert not recent.needs_override
    install = _build_commands(recent, tmp_path / "venv", tmp_path / "r.txt")[-1]
    assert "--python-version" not in install and "--ignore-requires-python" not in install


def test_a_requirements_servers_overrides_go_to_uv_as_nemo_gyms_installer_passes_them(tmp_path: Path) -> None:
    directory = server(tmp_path, "-e nemo-gym[dev] @ ../../\nunbabel-comet>=2.2\n")
    assert overrides_of(directory) == []
    (directory / "overrides.txt").write_text("# comet says <5; wandb needs 5\nprotobuf==6.33.6  # forced\n\n")
    assert overrides_of(directory) == ["protobuf==6.33.6"]
    python = Python("/usr/bin/python3.13", (3, 13, 15), (3, 13, 14))
    install = _build_commands(python, tmp_path / "venv", tmp_path / "r.txt", tmp_path / "o.txt")[-1]
    if "uv" in Path(install[0]).name:
        assert install[install.index("--override") + 1] == str(tmp_path / "o.txt")
    pyproject = (
        tmp_path / "pyproject_server"
    )  # NeMo Gym's installer reads overrides beside requirements.txt only
    pyproject.mkdir()
    (pyproject / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = []\n')
    (pyproject / "overrides.txt").write_text("protobuf==6.33.6\n")
    assert overrides_of(pyproject) == []


def test_nemo_gyms_extras_but_dev_are_kept_and_git_sources_become_git_requirements(tmp_path: Path) -> None:
    assert requirements_of(server(tmp_path, "-e nemo-gym[dev,sandbox] @ ../..\nboto3\n")) == [
        PIN.replace("nemo-gym==", "nemo-gym[sandbox]=="),
        "boto3",
    ]
    directory = tmp_path / "pyproject_server"
    directory.mkdir()
    (directory / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["nemo-gym[dev]", "human-eval-infilling", "numpy"]\n'
        "[tool.uv.sources]\n"
        'nemo-gym = { path = "../..", editable = true }\n'
        'human-eval-infilling = { git = "https://example.org/h.git", rev = "abc" }\n'
    )
    assert requirements_of(directory) == [
        PIN,
        "human-eval-infilling @ git+https://example.org/h.git@abc",
        "numpy",
    ]


TWO_SERVERS = """
bench_resources_server:
  resources_servers:
    judged: {entrypoint: app.py, is_golden: false}
bench_golden_resources_server:
  resources_servers:
    judged: {entrypoint: app.py, is_golden: true}
"""


def test_of_two_instances_of_the_server_the_agents_one_or_the_first_is_served(tmp_path: Path) -> None:
    assert read_config(server(tmp_path / "a", config=TWO_SERVERS)).instance == "bench_resources_server"
    driven = TWO_SERVERS + (
        "golden_agent:\n  responses_api_agents:\n    simple_agent:\n"
        "      resources_server: {type: resources_servers, name: bench_golden_resources_server}\n"
    )
    assert read_config(server(tmp_path / "b", config=driven)).instance == "bench_golden_resources_server"


def test_an_agent_starts_with_its_resources_server_and_models_at_the_shims(tmp_path: Path) -> None:
    config = read_config(server(tmp_path))
    game = next(agent for agent in config.agents if agent.kind == "gymnasium_agent")
    assert game.models == ()
    simple = next(agent for agent in config.agents if agent.kind == "simple_agent")
    assert simple.models == ("policy_model",)
    started_with = agent_config(config, simple, {"policy_model": 4001, "strict_judge": 4002}, 4100)
    assert started_with["judged_server"]["resources_servers"]["judged"]["port"] == 4100
    assert started_with["observability_enabled"] is True  # the rollout in every call's path
    assert started_with["policy_base_url"] == "http://127.0.0.1:4001/v1"
    assert started_with["observability_enabled"] is True  # the rollout in every call's path
    block = started_with["judged_simple_agent"]["responses_api_agents"]["simple_agent"]
    assert block["max_steps"] == 3 and block["model_server"]["name"] == "policy_model"
