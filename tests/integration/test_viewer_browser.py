"""`gym-runner view` in a real headless Chromium (Debian's), driven by Playwright.

The rollouts come from a real collection (multi-turn rows with tool calls and a simulated
user, weather rows, and an input line that cannot run, so there is a failures sidecar).
To them the test adds what a collection does not make on demand: a model message that
tries to inject markup, a rollout with reasoning and training token ids, a corrupt line
in the middle and a truncated last line.

Both ways of viewing are checked: the server (`gym-runner view FILE`) and the
self-contained page (`--html`). Without Chromium the test is skipped, except in CI
(`CI=true`), where that is a failure.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, WEATHER_AGENT

GYM_RUNNER = [sys.executable, "-m", "gymbus.runner"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MULTI_TURN_AGENT = "example_multi_turn_agent"
INJECTION = '<img src=x onerror="window.__injected=1"><script>window.__injected=2</script><b>bold?</b>'
INJECTION_REWARD = 0.25
TOKEN_IDS = {
    "prompt_token_ids": [101, 102, 103],
    "generation_token_ids": [7, 8],
    "generation_log_probs": [-0.5, -0.25],
}


def _require_browser() -> None:
    missing = [
        what
        for what, ok in (("chromium", Path(CHROMIUM).exists()), ("playwright", _has_playwright()))
        if not ok
    ]
    if not missing:
        return
    message = (
        f"{' and '.join(missing)} not installed (sh scripts/install-browser.sh; pip install -e '.[test]')"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the browser tests: {message}")
    pytest.skip(message)


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    return subprocess.run(
        [*GYM_RUNNER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


class Rollouts:
    """The viewed file, what the test added to it, and the rows as written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failures = path.with_name(f"{path.stem}_failures.jsonl")
        self.rows: list[dict[str, Any]] = []
        self.corrupt_line = 0
        self.truncated_line = 0

    def line_of(self, predicate: Any) -> int:
        """The 1-based line of the first row `predicate` accepts."""
        lines = self.path.read_text().splitlines()
        for number, text in enumerate(lines, 1):
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if predicate(row):
                return number
        raise AssertionError("no such row")


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Rollouts:
    folder = tmp_path_factory.mktemp("view")
    source = folder / "tasks.jsonl"
    lines = (EXAMPLES / "example_multi_turn.jsonl").read_text().splitlines()
    lines += (EXAMPLES / "example_single_tool_call.jsonl").read_text().splitlines()[:3]
    lines.append('{"responses_create_params": {"input": 5}}')  # cannot run: goes to the failures sidecar
    source.write_text("\n".join(lines) + "\n")
    out = folder / "rollouts.jsonl"
    done = _run_cli("collect", "-i", str(source), "-o", str(out), "--agent", WEATHER_AGENT)
    assert done.returncode == 3, done.stderr  # 3: some rows failed (the bad one, on purpose)
    collected = [json.loads(line) for line in out.read_text().splitlines()]
    assert any(row["agent_ref"]["name"] == MULTI_TURN_AGENT for row in collected)
    made = Rollouts(out)
    made.rows = collected + _crafted(collected)
    texts = [json.dumps(row) for row in made.rows]
    corrupt = '{"reward": 1.0, "response": {"output": [}'
    texts.insert(2, corrupt)
    made.corrupt_line = 3
    made.truncated_line = len(texts) + 1
    out.write_text("\n".join(texts) + "\n" + texts[0][: len(texts[0]) // 2])
    return made


def _crafted(collected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = next(row for row in collected if row["agent_ref"]["name"] == WEATHER_AGENT)
    injected = copy.deepcopy(base)
    injected["reward"] = INJECTION_REWARD
    injected["_ng_task_index"] = 900
    for item in injected["response"]["output"]:
        if item["type"] == "message":
            item["content"][0]["text"] = INJECTION
    with_tokens = copy.deepcopy(base)
    with_tokens["_ng_task_index"] = 901
    output = with_tokens["response"]["output"]
    output.insert(
        0, {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think first."}]}
    )
    output[-1].update(TOKEN_IDS)
    return [injected, with_tokens]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    _require_browser()
    from playwright.sync_api import sync_playwright

    args = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-quic"] + (["--no-sandbox"] if os.geteuid() == 0 else [])  # fmt: skip
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True, args=args,
            viewport={"width": 1600, "height": 1000},
        )  # fmt: skip
        yield context
        context.close()


class Server:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [*GYM_RUNNER, "view", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.process.stdout.readline()))
        reader.start()
        reader.join(60)
        assert found and found[0].startswith("http://127.0.0.1:"), f"no URL printed; stderr: {self._stderr()}"
        self.url = found[0].strip()

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        return self.process.stderr.read() if self.process.stderr else ""

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C, as a terminal sends it; the exit code and what it printed."""
        self.process.send_signal(signal.SIGINT)
        _, stderr = self.process.communicate(timeout=20)
        return self.process.returncode, stderr


@pytest.fixture(params=["server", "html"])
def page(request: pytest.FixtureRequest, rollouts: Rollouts, browser: Any, tmp_path: Path) -> Iterator[Any]:
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    server = Server(rollouts.path) if request.param == "server" else None
    try:
        if server is not None:
            tab.goto(server.url)
        else:
            out = tmp_path / "rollouts.html"
            done = _run_cli("view", str(rollouts.path), "--html", str(out))
            assert done.returncode == 0, done.stderr
            tab.goto(out.as_uri())
        tab.wait_for_selector("#list tbody tr")
        _settled(tab)
        yield tab
    finally:
        tab.close()
        if server is not None:  # Ctrl-C stops it, cleanly
            code, stderr = server.interrupt()
            assert code == 0 and "Stopped." in stderr, stderr
    assert errors == [], errors


def _listed(page: Any) -> list[dict[str, str]]:
    columns = ["line", "reward", "agent", "task", "rollout", "turns", "tool_calls", "failure"]
    rows = page.eval_on_selector_all(
        "#list tbody tr", "trs => trs.map(tr => [...tr.children].map(td => td.textContent))"
    )
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _filter(page: Any, **fields: str) -> None:
    """Set the filter form's fields and apply them; wait until the list shows the result."""
    for selector, value in fields.items():
        target = page.locator(f"#f-{selector.replace('_', '-')}")
        if target.evaluate("e => e.tagName") == "SELECT":
            target.select_option(label=value)
        else:
            target.fill(value)
    page.click("#filters button[type=submit]")
    _settled(page)


def _settled(page: Any) -> None:
    page.wait_for_function("() => !document.body.hasAttribute('aria-busy')")


def _open(page: Any, line: int) -> str:
    page.click(f"#list tbody tr:has(td:first-child:text-is('{line}'))")
    page.wait_for_selector("#rollout h2")
    page.wait_for_function(
        "line => document.querySelector('#rollout h2').textContent === `line ${line}`", arg=line
    )
    return str(page.inner_text("#rollout"))


def test_the_list_shows_every_good_row_and_names_the_skipped_lines(page: Any, rollouts: Rollouts) -> None:
    listed = _listed(page)
    assert len(listed) == len(rollouts.rows)
    assert {row["agent"] for row in listed} == {MULTI_TURN_AGENT, WEATHER_AGENT}
    notice = page.inner_text("#skipped")
    assert f"line {rollouts.corrupt_line}:" in notice and f"line {rollouts.truncated_line}:" in notice
    assert "truncated" in notice
    histograms = page.inner_text("#histograms")
    assert MULTI_TURN_AGENT in histograms and WEATHER_AGENT in histograms


def test_a_rollout_with_tool_calls_shows_each_call_with_its_arguments_and_output(
    page: Any, rollouts: Rollouts, tmp_path: Path
) -> None:
    row = next(
        r for r in rollouts.rows if r["agent_ref"]["name"] == MULTI_TURN_AGENT and r["simulated_user_turns"]
    )
    line = rollouts.line_of(lambda r: r == row)
    shown = _open(page, line)
    calls = [item for item in row["response"]["output"] if item["type"] == "function_call"]
    outputs = [item for item in row["response"]["output"] if item["type"] == "function_call_output"]
    assert len(calls) >= 2 and len(outputs) == len(calls)
    heads = page.eval_on_selector_all(
        "#rollout .function_call .item-head", "es => es.map(e => e.textContent)"
    )
    assert [head.split(" (")[0] for head in heads] == [f"tool call {call['name']}" for call in calls]
    arguments = page.eval_on_selector_all(
        "#rollout .function_call pre.arguments", "es => es.map(e => e.textContent)"
    )
    assert [json.loads(text) for text in arguments] == [json.loads(call["arguments"]) for call in calls]
    results = page.eval_on_selector_all(
        "#rollout .function_call_output pre.output", "es => es.map(e => e.textContent)"
    )
    assert [json.loads(text) for text in results] == [json.loads(out["output"]) for out in outputs]
    assert "user (simulated)" in shown and "\nnull\n" not in shown
    simulated = next(item for item in row["response"]["output"] if item.get("role") == "user")
    assert simulated["content"][0]["text"] in shown
    assert "Verifier and task fields" in shown and "looked_up_cities" in shown and "user_goal_met" in shown
    assert "Token usage" in shown and "input_tokens" in shown
    assert f"reward {row['reward']:g}" in shown
    shot = tmp_path / f"rollout-{'server' if page.url.startswith('http') else 'html'}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_filters_by_agent_reward_and_failure(page: Any, rollouts: Rollouts) -> None:
    _filter(page, agent=MULTI_TURN_AGENT)
    listed = _listed(page)
    assert len(listed) == sum(r["agent_ref"]["name"] == MULTI_TURN_AGENT for r in rollouts.rows)
    assert {row["agent"] for row in listed} == {MULTI_TURN_AGENT}
    _filter(page, agent="all agents", reward_min=str(INJECTION_REWARD), reward_max=str(INJECTION_REWARD))
    assert [row["task"] for row in _listed(page)] == ["900"]
    _filter(page, reward_min="", reward_max="", failure="any failure")
    assert page.inner_text("#range") == "no rows match"
    page.click("#sources button:nth-child(2)")
    _settled(page)
    failures = [json.loads(line) for line in rollouts.failures.read_text().splitlines()]
    assert [row["failure"] for row in _listed(page)] == [row["_ng_failure_class"] for row in failures]
    shown = _open(page, 1)
    assert "invalid_input" in shown and failures[0]["_ng_failure_message"] in shown


def test_markup_in_a_model_message_is_shown_as_text(page: Any, rollouts: Rollouts) -> None:
    shown = _open(page, rollouts.line_of(lambda r: r.get("_ng_task_index") == 900))
    assert INJECTION in shown
    assert page.evaluate("window.__injected") is None
    assert page.locator("#rollout img, #rollout script, #rollout b").count() == 0


def test_reasoning_and_token_ids_are_shown_and_token_ids_start_folded(page: Any, rollouts: Rollouts) -> None:
    shown = _open(page, rollouts.line_of(lambda r: r.get("_ng_task_index") == 901))
    assert "reasoning" in shown and "Think first." in shown
    tokens = page.locator("#rollout details.tokens")
    assert tokens.count() == 1 and tokens.evaluate("d => d.open") is False
    assert "prompt token ids: 3, generation token ids: 2, generation log probs: 2" in tokens.inner_text()
    tokens.locator("summary").click()
    tokens.locator("pre").first.wait_for()  # the ids are built when the fold opens
    opened = tokens.inner_text()
    assert "101 102 103" in opened and "7 8" in opened and "-0.5 -0.25" in opened


def _covered_cells(page: Any) -> list[str]:
    """The list's header and cells that something else is drawn over at their centre (or beside
    their right edge), each as `column: text`; empty when the whole table can be seen."""
    return list(
        page.eval_on_selector_all(
            "#list th, #list td",
            """cells => cells.flatMap(cell => {
                const box = cell.getBoundingClientRect();
                cell.scrollIntoView({block: "center", inline: "nearest"});
                const now = cell.getBoundingClientRect();
                const y = now.top + now.height / 2;
                const seen = [now.left + now.width / 2, now.right - 2].every(x => {
                    const top = document.elementFromPoint(x, y);
                    return top !== null && cell.contains(top);
                });
                const column = document.querySelectorAll("#list th")[cell.cellIndex].textContent;
                return seen && box.width > 0 ? [] : [`${column}: ${cell.textContent}`];
            })""",
        )
    )


def test_at_1400_pixels_the_whole_list_is_beside_the_rollout_not_under_it(page: Any) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    _open(page, 1)  # the rollout pane has content, as when someone reads the list beside it
    assert _covered_cells(page) == []
    list_right = page.eval_on_selector("#list", "e => e.getBoundingClientRect().right")
    rollout_left = page.eval_on_selector("#rollout", "e => e.getBoundingClientRect().left")
    assert list_right <= rollout_left
    page.click("#sources button:nth-child(2)")  # the failures sidecar: every failure cell has text
    _settled(page)
    failures = page.eval_on_selector_all("#list td:last-child", "tds => tds.map(td => td.textContent)")
    assert failures and all(failures)
    assert _covered_cells(page) == []
