"""`gym-runner collect` end to end, against real processes and a real nats-server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gymbus.bus import ServeOptions, serve_functions
from gymbus.runner import CollectOptions, ProgressView, collect
from gymbus.runner._input import UnknownAgent
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT

GYM_RUNNER = [sys.executable, "-m", "gymbus.runner"]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90, feed: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`gym-runner ARGS`; `feed` is piped to its standard input (else it reads nothing)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    return subprocess.run(
        [*GYM_RUNNER, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        input=feed,
        stdin=None if feed is not None else subprocess.DEVNULL,
    )


def left_running(url: str) -> list[psutil.Process]:
    """Processes still using the bus at `url`: the server listening there, or workers told to use it."""
    port = int(url.rsplit(":", 1)[1])
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            listening = any(c.laddr.port == port and c.status == "LISTEN" for c in process.net_connections())
            if listening or process.environ().get("NATS_URL") == url:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_one_command_collects_on_the_embedded_default(tmp_path: Path) -> None:
    out = tmp_path / "results" / "weather.jsonl"
    done = run_cli(
        "collect",
        "-i",
        str(EXAMPLES / f"{WEATHER}.jsonl"),
        "-o",
        str(out),
        "--agent",
        WEATHER_AGENT,
        "--num-repeats",
        "20",
    )
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert len(rows) == 100
    for row in rows:
        assert row["reward"] == 1.0
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": WEATHER_AGENT}
        assert [item["type"] for item in row["response"]["output"]] == [
            "function_call",
            "function_call_output",
            "message",
        ]  # type: ignore[index]
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows) == [
        (t, k) for t in range(5) for k in range(20)
    ]
    assert f"{WEATHER_AGENT}: 100 rollouts, mean reward 1.000" in done.stderr
    assert "Failures:" not in done.stderr  # no failures file was written
    # The summary's rate is the progress's, not one diluted by starting the server and workers.
    progress = re.findall(r"finished 100 / 100 rollouts \(100%\), (\d+) rollouts/s", done.stderr)
    summary = re.search(
        r"Collected 100 rollouts of 100 planned in \S+ s \(([\d,]+) rollouts/s\)", done.stderr
    )
    assert progress and summary, done.stderr
    assert 0.5 < int(summary.group(1).replace(",", "")) / int(progress[0]) < 2
    metrics = json.loads((tmp_path / "results" / "weather_aggregate_metrics.json").read_text())
    assert (
        metrics[0]["agent_ref"]["name"] == WEATHER_AGENT and metrics[0]["key_metrics"]["mean/reward"] == 1.0
    )
    assert len(read_jsonl(tmp_path / "results" / "weather_materialized_inputs.jsonl")) == 100
    workers_log = tmp_path / "results" / "weather_workers.log"
    assert "ready: serving" in workers_log.read_text() and f"Worker log: {workers_log}" in done.stderr
    url = re.search(r"started embedded nats-server at (nats://\S+)", done.stderr)
    assert url is not None
    assert left_running(url.group(1)) == []  # the embedded server and its workers are gone


def test_bad_rows_go_to_failures_and_good_rows_are_still_collected(tmp_path: Path) -> None:
    good = (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()[0]
    unserved = json.dumps({**json.loads(good), "agent_ref": {"name": "nobody_serves_this_agent"}})
    source = tmp_path / "mixed.jsonl"
    source.write_text(
        "\n".join(
            [
                good,
                "{oops",
                '{"expected_answer": 1}',
                '{"responses_create_params": {"input": []}, "_ng_task_index": "x"}',
                unserved,
                good.replace("sf", "nyc"),
            ]
        )
        + "\n"
    )
    out = tmp_path / "mixed_out.jsonl"
    done = run_cli("collect", "-i", str(source), "-o", str(out), "--agent", WEATHER_AGENT)
    assert done.returncode == 3, done.stderr  # some rows failed
    assert len(read_jsonl(out)) == 2
    failures = {
        row.get("_ng_input_line", row.get("_ng_task_index")): row
        for row in read_jsonl(tmp_path / "mixed_out_failures.jsonl")
    }
    messages = [str(row["_ng_failure_message"]) for row in failures.values()]
    assert f"{source}:2: not a JSON object" in messages[0]
    assert f"{source}:3: field `responses_create_params`: missing" in messages[1]
    assert f"{source}:4: field `_ng_task_index`" in messages[2]
    assert messages[3] == (
        f"{source}:5: field `agent_ref`: no worker serves gym.agent.nobody_serves_this_agent.run: "
        "nobody_serves_this_agent is neither a built-in agent nor an installed one"
    )
    assert [row["_ng_failure_class"] for row in failures.values()] == ["invalid_input"] * 3 + ["no_worker"]
    assert "failures" in done.stderr

    resumed = run_cli("collect", "-i", str(source), "-o", str(out), "--agent", WEATHER_AGENT, "--resume")
    assert resumed.returncode == 3, resumed.stderr
    again = read_jsonl(tmp_path / "mixed_out_failures.jsonl")
    assert sorted(r["_ng_input_line"] for r in again if r["_ng_failure_class"] == "invalid_input") == [
        2,
        3,
        4,
    ]
    assert [r["_ng_failure_class"] for r in again].count("no_worker") == 2  # tried again, as it may be
    assert len(read_jsonl(out)) == 2


def test_a_misspelt_agent_is_refused_before_anything_starts_naming_the_nearest(tmp_path: Path) -> None:
    out = tmp_path / "typo.jsonl"
    out.write_text('{"kept": "an earlier run\'s rollout"}\n')
    misspelt = WEATHER_AGENT.replace("simple", "simpel")
    done = run_cli("collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(out), "--agent", misspelt)
    assert done.returncode == 2, done.stderr  # a bad value
    assert f"error: --agent {misspelt}: not an agent (did you mean {WEATHER_AGENT}?)" in done.stderr
    assert "started embedded nats-server" not in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["typo.jsonl"]  # no workers, no sidecar
    assert out.read_text() == '{"kept": "an earlier run\'s rollout"}\n'

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({**_weather_row(), "agent_ref": {"name": misspelt}}) + "\n")
    by_rows = run_cli("collect", "-i", str(rows), "-o", str(tmp_path / "rows_out.jsonl"))
    assert by_rows.returncode == 2, by_rows.stderr  # a bad value, as a misspelt --agent is
    assert (
        f"error: {rows}: no agent its rows name can run here: {misspelt} (1 rollout): not an agent "
        f"(did you mean {WEATHER_AGENT}?)"
    ) in by_rows.stderr


def test_rows_naming_no_agent_without_agent_flag_are_refused_before_anything_starts(tmp_path: Path) -> None:
    rows = tmp_path / "mcqa.jsonl"
    named, unnamed = {**_weather_row(), "agent_ref": {"name": WEATHER_AGENT}}, _weather_row()
    rows.write_text("".join(json.dumps(row) + "\n" for row in (named, unnamed, unnamed)))
    done = run_cli("collect", "-i", str(rows), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 2, done.stderr
    assert (
        f"error: {rows}:2: field `agent_ref`: missing, and no --agent was given (2 rows name no agent): "
        "say which agent runs them with --agent (did you mean mcqa_simple_agent?)"
    ) in done.stderr
    assert "started embedded nats-server" not in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mcqa.jsonl"]


def test_a_settings_typo_is_refused_before_the_first_rollout(tmp_path: Path) -> None:
    out = tmp_path / "mcqa.jsonl"
    done = run_cli("collect", "-i", str(EXAMPLES / "mcqa.jsonl"), "-o", str(out), "--agent", "mcqa_simple_agent",
                   env={"GYMBUS_MCQA": '{"grading_mod": "x"}'})  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert (
        "error: invalid settings in $GYMBUS_MCQA: Object contains unknown field `grading_mod` "
        "(mcqa's settings: grading_mode)"
    ) in done.stderr
    assert "started embedded nats-server" not in done.stderr and sorted(tmp_path.iterdir()) == []


def test_a_worker_with_a_settings_typo_refuses_to_start() -> None:
    done = run_cli(
        "serve", "mcqa", env={"GYMBUS_MCQA": '{"grading_mod": "x"}', "NATS_URL": "nats://127.0.0.1:9"}
    )
    assert done.returncode == 1, done.stderr
    assert (
        "error: invalid settings in $GYMBUS_MCQA: Object contains unknown field `grading_mod`" in done.stderr
    )
    assert "cannot reach NATS" not in done.stderr  # refused before connecting


async def test_an_agent_nobody_serves_on_a_shared_bus_is_refused_with_how_to_serve_it(
    nats_url: str, tmp_path: Path
) -> None:
    options = CollectOptions(
        input=EXAMPLES / f"{WEATHER}.jsonl",
        output=tmp_path / "o.jsonl",
        agent=WEATHER_AGENT,
        nats_url=nats_url,
    )
    with pytest.raises(UnknownAgent) as refused:
        await collect(options, ProgressView(), asyncio.Event())
    assert str(refused.value) == (
        f"--agent {WEATHER_AGENT}: no worker serves it: start one with `gym-runner serve {WEATHER_AGENT}`"
    )
    assert not refused.value.usage and not (tmp_path / "o_failures.jsonl").exists()


def _weather_row() -> dict[str, object]:
    return json.loads((EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize("dash_i", ["-", "/dev/stdin"])
def test_piped_input_is_read_and_its_bad_lines_named_by_stdin_line(tmp_path: Path, dash_i: str) -> None:
    """`jq ... | gym-runner collect -i -`: the rows come once, through a pipe, yet are read twice
    (planned, then run); nothing is left of the copy made to read them again."""
    rows = (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()
    out = tmp_path / "piped" / "out.jsonl"
    done = run_cli(
        "collect", "-i", dash_i, "-o", str(out), "--agent", WEATHER_AGENT, "--num-repeats", "2",
        feed="\n".join([rows[0], "{oops", *rows[1:]]) + "\n", timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert len(read_jsonl(out)) == 10
    [failure] = read_jsonl(tmp_path / "piped" / "out_failures.jsonl")
    name = "<stdin>" if dash_i == "-" else dash_i
    assert str(failure["_ng_failure_message"]).startswith(f"{name}:2: not a JSON object")
    assert len(read_jsonl(tmp_path / "piped" / "out_materialized_inputs.jsonl")) == 10
    assert sorted(path.name for path in out.parent.iterdir()) == [
        "out.jsonl", "out_aggregate_metrics.json", "out_failures.jsonl", "out_materialized_inputs.jsonl",
        "out_plan.json", "out_workers.log",
    ]  # fmt: skip


def test_dash_input_from_a_terminal_is_refused_at_once(tmp_path: Path) -> None:
    import pty

    parent, child = pty.openpty()
    try:
        done = subprocess.run(
            [*GYM_RUNNER, "collect", "-i", "-", "-o", str(tmp_path / "o.jsonl"), "--agent", WEATHER_AGENT],
            stdin=child, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    finally:
        os.close(parent)
        os.close(child)
    assert done.returncode == 2, done.stderr  # bad usage: no rows were given
    assert "<stdin> is a terminal, not rows: pipe them in" in done.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_resume_with_another_plan_is_refused_naming_the_difference(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    source = str(EXAMPLES / f"{WEATHER}.jsonl")
    first = run_cli("collect", "-i", source, "-o", str(out), "--agent", WEATHER_AGENT, "--num-repeats", "2")
    assert first.returncode == 0, first.stderr
    written = out.read_text()
    changed = run_cli(
        "collect", "-i", source, "-o", str(out), "--agent", WEATHER_AGENT, "--num-repeats", "4", "--limit", "3",
        "--resume",
    )  # fmt: skip
    assert changed.returncode == 1, changed.stderr
    assert (
        f"error: --resume: {out} was collected with --num-repeats 2, not 4; --limit (none), not 3, and its "
        "rollouts are numbered by that plan"
    ) in changed.stderr
    assert "started embedded nats-server" not in changed.stderr and out.read_text() == written
    same = run_cli(
        "collect", "-i", source, "-o", str(out), "--agent", WEATHER_AGENT, "--num-repeats", "2", "--resume"
    )
    assert same.returncode == 0, same.stderr
    assert "10 done by an earlier run" in same.stderr and out.read_text() == written


def test_resume_into_a_directory_not_made_yet(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir" / "out.jsonl"
    done = run_cli(
        "collect",
        "-i",
        str(EXAMPLES / f"{WEATHER}.jsonl"),
        "-o",
        str(out),
        "--agent",
        WEATHER_AGENT,
        "--resume",
    )
    assert done.returncode == 0, done.stderr
    assert len(read_jsonl(out)) == 5


def test_worker_flags_on_a_shared_bus_are_refused_not_dropped(nats_url: str, tmp_path: Path) -> None:
    """With NATS_URL set, collect starts no workers: a model or worker count given to it
    would be silently ignored, and the rows would come from whatever serves the bus."""
    out = tmp_path / "mu.jsonl"
    args = ["collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(out), "--agent", WEATHER_AGENT]
    done = run_cli(*args, "--model-url", "http://127.0.0.1:9/v1", "--model", "foo", "--workers", "4",
                   env={"NATS_URL": nats_url})  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert (
        f"error: --model-url, --model, --workers: with NATS_URL set ({nats_url}) collect starts no workers"
    ) in done.stderr
    assert f"`NATS_URL={nats_url} gym-runner serve openai --model-url http://127.0.0.1:9/v1 --model foo" in (
        done.stderr
    )
    assert "unset NATS_URL" in done.stderr and sorted(tmp_path.iterdir()) == []

    alone = run_cli(*args, "--workers", "4", env={"NATS_URL": nats_url})
    assert alone.returncode == 2 and "error: --workers: with NATS_URL set" in alone.stderr, alone.stderr

    # From the environment, the model is the serve processes': collect goes on (to find no agent here).
    from_env = run_cli(*args, env={"NATS_URL": nats_url, "POLICY_BASE_URL": "http://127.0.0.1:9/v1"})
    assert from_env.returncode == 1, from_env.stderr
    assert f"--agent {WEATHER_AGENT}: no worker serves it" in from_env.stderr


async def test_collect_uses_the_workers_already_on_the_bus(nats_url: str, tmp_path: Path) -> None:
    stop = asyncio.Event()
    workers = asyncio.create_task(
        serve_functions(ServeOptions(functions=(WEATHER, WEATHER_AGENT, "offline")), nats_url, stop)
    )
    try:
        out = tmp_path / "bus.jsonl"
        options = CollectOptions(
            input=EXAMPLES / f"{WEATHER}.jsonl",
            output=out,
            agent=WEATHER_AGENT,
            num_repeats=3,
            nats_url=nats_url,
        )
        await asyncio.sleep(0.5)
        result = await collect(options, ProgressView(), asyncio.Event())
    finally:
        stop.set()
        await workers
    assert (result.written, result.failed, result.planned) == (15, 0, 15)
    assert result.metrics.mean_reward == 1.0
    assert len({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_jsonl(out)}) == 15


async def test_an_openai_compatible_endpoint_drives_the_rollout(
    nats_url: str, tmp_path: Path, openai_server
) -> None:  # type: ignore[no-untyped-def]
    from gymbus.functions import ModelOptions

    model = ModelOptions(base_url=openai_server.url, api_key="sk-test", model="served", api="chat")
    stop = asyncio.Event()
    workers = asyncio.create_task(
        serve_functions(
            ServeOptions(functions=(WEATHER, WEATHER_AGENT, "openai"), model=model), nats_url, stop
        )
    )
    try:
        await asyncio.sleep(0.5)
        out = tmp_path / "openai.jsonl"
        options = CollectOptions(
            input=EXAMPLES / f"{WEATHER}.jsonl", output=out, agent=WEATHER_AGENT, limit=2, nats_url=nats_url
        )
        result = await collect(options, ProgressView(), asyncio.Event())
    finally:
        stop.set()
        await workers
    assert result.written == 2
    [row, _] = read_jsonl(out)
    output = row["response"]["output"]  # type: ignore[index]
    assert json.loads(output[1]["output"])["weather_description"] == "The weather in Paris is cold."
    assert output[-1]["content"][0]["text"] == "It is cold in Paris."
    assert "sk-test" not in out.read_text()


def test_no_log_line_per_model_call_in_the_workers_or_the_runner(tmp_path: Path, openai_server) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "logged.jsonl"
    done = run_cli(
        "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(out), "--agent", WEATHER_AGENT,
        "--num-repeats", "20", "--model-url", openai_server.url, "--model", "served", "--model-api", "chat",
        env={"POLICY_API_KEY": "sk-test"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(openai_server.requests) >= 200  # two model calls per rollout
    workers_log = (tmp_path / "logged_workers.log").read_text()
    endpoint = openai_server.url.split("//")[1].split("/")[0]  # host:port
    for log in (workers_log, done.stderr):
        assert "HTTP Request" not in log and endpoint not in log and "sk-test" not in log
    # What is left is start-up and shutdown: a few lines per worker process, not a line a call.
    assert len(workers_log.splitlines()) < 60, workers_log


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version(flag: str) -> None:
    done = run_cli(flag)
    assert done.returncode == 0
    assert (
        ("gym-runner 0.1.0" in done.stdout)
        if flag == "--version"
        else ("collect" in done.stdout and "serve" in done.stdout)
    )


def test_collect_help_has_an_example() -> None:
    done = run_cli("collect", "--help")
    assert done.returncode == 0 and "gym-runner collect -i" in done.stdout


def test_the_readmes_first_command_writes_the_files_its_table_lists(tmp_path: Path) -> None:
    readme = (EXAMPLES.parent / "README.md").read_text()
    table = re.findall(
        r"^\| `results/(weather\S*)` \| (.*) \|$", readme.split("## The first collection")[1], re.M
    )
    assert len(table) >= 5
    results = tmp_path / "results"
    done = run_cli("collect", "--input", str(EXAMPLES / f"{WEATHER}.jsonl"), "--output", str(results / "weather.jsonl"),
                   "--agent", WEATHER_AGENT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr, (
        done.stderr
    )  # a clean run says nothing amiss
    written = [name for name, what in table if not what.startswith("only when something failed")]
    assert len(written) < len(table)  # the failures file is listed, as written only on failure
    assert sorted(path.name for path in results.iterdir()) == sorted(written)


def test_piped_help_keeps_every_option_name_whole() -> None:
    done = run_cli("collect", "--help")  # stdout is a pipe, as in `gym-runner collect --help | grep ...`
    assert done.returncode == 0
    for option in ("--rollout-timeout", "--model-api-key", "--token-capture", "--num-repeats"):
        assert option in done.stdout, done.stdout
    assert "…" not in done.stdout


@pytest.mark.parametrize("command", ["collect", "verify", "serve"])
def test_piped_help_is_as_wide_as_a_page_and_cuts_nothing(command: str) -> None:
    done = run_cli(command, "--help")  # `gym-runner verify --help | less`, or into a file
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 110 and not any("…" in line for line in lines), done.stdout


def test_logs_off_a_terminal_are_whole_lines_never_wrapped_or_padded(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = run_cli(
        "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(out), "--agent", WEATHER_AGENT
    )
    assert done.returncode == 0, done.stderr
    workers_log = (tmp_path / "out_workers.log").read_text()
    subject = f"gym.agent.{WEATHER_AGENT}.run"
    assert f"INFO     serving {WEATHER_AGENT} (agent): {subject}\n" in workers_log, workers_log
    for line in (done.stderr + workers_log).splitlines():
        assert line == line.rstrip(), repr(line)
    assert "no worker serves" not in done.stderr  # its own workers starting are no missing ones


def test_a_missing_input_file_is_a_clear_error(tmp_path: Path) -> None:
    done = run_cli("collect", "-i", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o.jsonl"))
    assert done.returncode == 1 and "input file not found" in done.stderr


def test_status_with_an_unreachable_nats_url_is_a_clear_error() -> None:
    done = run_cli("status", env={"NATS_URL": "nats://127.0.0.1:9"})
    assert done.returncode == 1
    assert "cannot reach NATS at nats://127.0.0.1:9" in done.stderr and "Traceback" not in done.stderr


def test_serving_the_openai_adapter_without_a_model_name_is_a_clear_error() -> None:
    done = run_cli("serve", "openai", "--model-url", "http://127.0.0.1:9/v1", env={"POLICY_MODEL": ""})
    assert done.returncode == 1
    assert "needs a model name: --model NAME or POLICY_MODEL" in done.stderr
    assert "Traceback" not in done.stderr


def test_modules_in_the_working_directory_shadow_nothing_of_ours(tmp_path: Path) -> None:
    """A trainer's or a user's own `runner.py`, `schemas.py` (or `nats.py`) beside the data:
    `gym-runner collect` and the workers it starts import none of them."""
    work = tmp_path / "project"
    work.mkdir()
    for name in ("runner", "schemas", "bus", "functions", "gymbus", "nats", "msgspec"):
        (work / f"{name}.py").write_text(
            f"raise SystemExit('shadowed by the working directory: {name}.py')\n"
        )
    clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL", "PYTHONPATH")}
    gym_runner = Path(sys.executable).with_name("gym-runner")
    done = subprocess.run(
        [str(gym_runner), "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", "out/weather.jsonl",
         "--agent", WEATHER_AGENT],
        cwd=work, env=clean, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    workers_log = (work / "out" / "weather_workers.log").read_text()
    assert done.returncode == 0, done.stderr[-2000:] + workers_log[-2000:]
    assert "shadowed" not in done.stdout + done.stderr + workers_log
    assert len(read_jsonl(work / "out" / "weather.jsonl")) == 5
