"""The google_search and example_multi_turn example rows, collected through the real bus:
with the offline policy (as both policy and user simulator) by one `gym-runner collect`,
and with an OpenAI-compatible endpoint. Search goes to a local fake provider."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gymbus.bus import ServeOptions, serve_functions
from gymbus.functions import ModelOptions
from gymbus.runner import CollectOptions, ProgressView, collect
from tests.conftest import EXAMPLES
from tests.fake_openai import FakeOpenAI
from tests.fake_web import ARTICLE_TEXT, KEY, FakeWeb
from tests.integration.test_collect import left_running, read_jsonl, run_cli

SEARCH_ROWS = EXAMPLES / "google_search.jsonl"
SEARCH_AGENT = "google_search_simple_agent"
MULTI_TURN_ROWS = EXAMPLES / "example_multi_turn.jsonl"
MULTI_TURN_AGENT = "example_multi_turn_agent"


def outputs(row: dict[str, Any]) -> list[dict[str, Any]]:
    return row["response"]["output"]  # type: ignore[no-any-return]


def test_google_search_rows_collect_with_the_fake_provider(fake_web: FakeWeb, tmp_path: Path) -> None:
    out = tmp_path / "search.jsonl"
    done = run_cli("collect", "-i", str(SEARCH_ROWS), "-o", str(out), "--agent", SEARCH_AGENT)
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert len(rows) == 5 and read_jsonl(tmp_path / "search_failures.jsonl") == []
    queries = []
    for row in rows:
        calls = [
            item for item in outputs(row) if item["type"] == "function_call" and item["name"] == "search"
        ]
        queries += [json.loads(call["arguments"])["query"] for call in calls]
        for result in (item for item in outputs(row) if item["type"] == "function_call_output"):
            found = json.loads(json.loads(result["output"])["search_results"])
            assert found["items"][0]["snippet"] == ARTICLE_TEXT
        assert row["reward"] == float(row["parsed_option"] == row["expected_answer"])
    assert queries and sorted(s.query for s in fake_web.searches) == sorted(queries)  # each search reached it
    assert {s.key_header for s in fake_web.searches} == {KEY}
    for path in tmp_path.iterdir():
        assert KEY not in path.read_text()
    assert KEY not in done.stderr + done.stdout


def test_without_a_key_search_answers_a_readable_error_and_the_policy_still_guesses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GOOGLE_API_KEY", "GOOGLE_CX", "GOOGLE_SEARCH_URL", "SEARCH_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "nokey.jsonl"
    done = run_cli("collect", "-i", str(SEARCH_ROWS), "-o", str(out), "--agent", SEARCH_AGENT, "--limit", "2")
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert len(rows) == 2 and read_jsonl(tmp_path / "nokey_failures.jsonl") == []
    for row in rows:
        results = [item for item in outputs(row) if item["type"] == "function_call_output"]
        assert results and json.loads(results[0]["output"]) == {
            "search_results": "Error: search is not configured on this server (GOOGLE_API_KEY and GOOGLE_CX not set)"
        }
        assert outputs(row)[-1]["role"] == "assistant" and row["parsed_option"] in (None, *"ABCD")


def test_multi_turn_rows_collect_with_the_offline_policy_as_policy_and_user(tmp_path: Path) -> None:
    out = tmp_path / "multi.jsonl"
    done = run_cli("collect", "-i", str(MULTI_TURN_ROWS), "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert len(rows) == 4 and read_jsonl(tmp_path / "multi_failures.jsonl") == []
    for row in rows:
        users = [item["content"][0]["text"] for item in outputs(row) if item.get("role") == "user"]
        assert users == [row["user_goal"]] * row["simulated_user_turns"]  # the scripted user says its goal
        assert (
            row["simulated_user_turns"] <= row["max_user_turns"] and outputs(row)[-1]["role"] == "assistant"
        )
        assert row["reward"] == float(row["missing_cities"] == [])
    url = re.search(r"started embedded nats-server at (nats://\S+)", done.stderr)
    assert url is not None
    assert left_running(url.group(1)) == []  # the server, the workers and the simulator's worker are gone


async def test_an_openai_compatible_endpoint_drives_both_environments(
    nats_url: str, tmp_path: Path, fake_web: FakeWeb, openai_server: FakeOpenAI
) -> None:
    """The fake endpoint calls the first tool with `{"city": "Paris"}` and then answers
    "It is cold in Paris.", as policy and as user simulator."""
    model = ModelOptions(base_url=openai_server.url, api_key="sk-test", model="served", api="responses")
    functions = ("google_search", SEARCH_AGENT, "example_multi_turn", MULTI_TURN_AGENT, "openai")
    stop = asyncio.Event()
    workers = [
        asyncio.create_task(serve_functions(ServeOptions(functions=functions, model=model), nats_url, stop)),
        asyncio.create_task(
            serve_functions(
                ServeOptions(functions=("openai",), model=model, served_model="user_simulator"),
                nats_url,
                stop,
            )
        ),
    ]
    try:
        await asyncio.sleep(1.0)
        search = await _collect(nats_url, SEARCH_ROWS, tmp_path / "s.jsonl", SEARCH_AGENT)
        multi = await _collect(nats_url, MULTI_TURN_ROWS, tmp_path / "m.jsonl", None)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    [row] = search
    _, result, _ = outputs(row)
    assert "query" in json.loads(result["output"])["error"]  # wrong arguments: readable, not a crash
    assert (row["reward"], row["parsed_option"]) == (0.0, None)
    [row] = multi
    users = [item for item in outputs(row) if item.get("role") == "user"]
    assert len(users) == row["simulated_user_turns"] == 3  # the fake never says the stop marker
    assert row["user_goal_met"] is False and row["reward"] == 0.0  # only Paris was looked up


async def _collect(nats_url: str, rows: Path, out: Path, agent: str | None) -> list[dict[str, Any]]:
    options = CollectOptions(input=rows, output=out, agent=agent, limit=1, nats_url=nats_url)
    result = await collect(options, ProgressView(), asyncio.Event())
    assert (result.written, result.failed) == (1, 0)
    return read_jsonl(out)
