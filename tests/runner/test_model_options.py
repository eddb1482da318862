"""How the command line picks and configures the policy's model function."""

from __future__ import annotations

from typer.testing import CliRunner

from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.runner._workers import worker_command
from gymbus.runner.cli import app


def test_a_worker_gets_the_vllm_servers_and_the_capture_setting() -> None:
    model = ModelOptions(base_url="http://a:8000/v1,http://b:8000/v1", api="vllm", token_capture=False)
    command = worker_command(ServeOptions(functions=("vllm",), model=model))
    assert command[command.index("--model-url") + 1] == "http://a:8000/v1,http://b:8000/v1"
    assert command[command.index("--model-api") + 1] == "vllm" and "--no-token-capture" in command


def test_serving_vllm_needs_its_servers_and_unknown_apis_are_refused() -> None:
    result = CliRunner().invoke(app, ["serve", "vllm"], env={"POLICY_BASE_URL": ""})
    assert result.exit_code == 1 and "needs its servers" in result.output
    result = CliRunner().invoke(app, ["serve", "vllm", "--model-url", "http://a/v1", "--model-api", "grpc"])
    assert result.exit_code == 2 and "--model-api" in result.output
    result = CliRunner().invoke(
        app, ["serve", "openai", "--model-url", "http://a/v1", "--model", "m", "--model-api", "vllm"]
    )
    assert result.exit_code == 1 and "served by the vllm model function" in " ".join(result.output.split())
