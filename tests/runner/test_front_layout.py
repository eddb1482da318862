"""The front's layout: one bound port per server, and the config NeMo Gym's clients read
(each agent fronted by exactly one environment server that names it)."""

from __future__ import annotations

import socket

from gymbus.bus.front import ServedAgent
from gymbus.functions.registry import AGENTS
from gymbus.runner.front._layout import Layout
from gymbus.runner.front._started import policy_of
from gymbus.runner.front._talk import conversation_lines, tools_of
from gymbus.schemas import Item, Response


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_each_server_has_its_own_port_and_each_agent_one_environment_server() -> None:
    agents = [ServedAgent("a_agent", "env_a", "policy"), ServedAgent("b_agent", "env_b", "policy")]
    head = free_port()
    layout = Layout.plan(agents, "127.0.0.1", head)
    try:
        config = layout.config()
        ports = [server.port for server in layout.servers]
        assert len(set(ports)) == len(ports) == 1 + 2 * 3 + 1  # the model is listed once
        assert config["head_server"] == {"host": "127.0.0.1", "port": head}
        relay = config["a_agent_environment_server"]["environment_servers"]["legacy_agent"]
        assert relay["agent_server"] == {"type": "responses_api_agents", "name": "a_agent"}
        agent = config["a_agent"]["responses_api_agents"]["gymbus"]
        assert agent["resources_server"]["name"] == "env_a" and agent["model_server"]["name"] == "policy"
        # As NeMo Gym lists its own, under the server's name (Unsloth's notebooks look there).
        assert config["env_b"]["resources_servers"]["env_b"]["port"] in ports
    finally:
        layout.close()


def test_a_taken_head_port_is_an_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        try:
            Layout.plan([ServedAgent("a_agent", "env_a", "policy")], "127.0.0.1", taken.getsockname()[1])
        except OSError:
            pass
        else:
            raise AssertionError("a head port in use must be refused")


def test_talk_offers_the_environments_tools_and_prints_each_turn() -> None:
    (weather,) = tools_of(AGENTS["example_single_tool_call_simple_agent"])
    assert weather.name == "get_weather" and "city" in weather.parameters["properties"]  # type: ignore[index]
    response = Response(
        id="r", created_at=0.0, model="m", output=[
            Item(type="function_call", name="get_weather", arguments='{"city": "sf"}', call_id="c"),
            Item(type="function_call_output", call_id="c", output="cold"),
            Item(role="assistant", content="It is cold."),
        ],
    )  # fmt: skip
    assert conversation_lines(response) == [
        ("tool call", 'get_weather({"city": "sf"})'), ("tool output", "cold"), ("model", "It is cold.")
    ]  # fmt: skip


def test_started_by_nemo_gym_the_front_binds_the_ports_nemo_gym_gave_its_servers() -> None:
    ports = [free_port() for _ in range(4)]

    def at(port: int, **more: object) -> dict[str, object]:
        return {"host": "127.0.0.1", "port": port, **more}

    config = {
        "head_server": at(11000),
        "gymbus_front": {"resources_servers": {"gymbus": at(ports[0], serve=["x"])}},
        "x_agent": {"responses_api_agents": {"gymbus": at(ports[1])}},
        "x": {"resources_servers": {"gymbus": at(ports[2])}},
        "x_environment_server": {"environment_servers": {"legacy_agent": at(ports[3])}},
        "policy_base_url": ["http://a/v1", "http://b/v1"],
    }
    layout = Layout.from_nemo_gym(config, "gymbus_front")
    try:
        served = [(server.name, server.kind, server.port) for server in layout.servers]
        # NeMo Gym's own relay (legacy_agent) is NeMo Gym's to start, not the front's.
        assert served == [("gymbus_front", "front", ports[0]), ("x_agent", "responses_api_agents", ports[1]),
                          ("x", "resources_servers", ports[2])]  # fmt: skip
    finally:
        layout.close()
    policy = policy_of(config)
    assert policy is not None and policy.base_url == "http://a/v1,http://b/v1" and policy.api == "vllm"
    assert policy_of({}) is None
