"""V1-V3: the rollout viewer on a large file.

    python -m bench.viewer [--rows N] [--keep]

V1  indexing N rows (default 100,000): seconds and the peak RSS it adds to a fresh process
V2  from `gym-runner view FILE` start to its URL printed (index + server start), and what the
    page's requests cost: the first page of the list, a filter by agent and reward, and the
    last rollout of the file (milliseconds, bytes sent), against the file's size
V3  with Chromium (Debian's, through Playwright) when it is installed: from opening the page to
    the list shown, and from a click on a rollout to the rollout shown

The file is synthetic: multi-turn rollouts with tool calls of five agents (about 2.6 KB each),
and every 50th row carries training token ids (about 4 KB more).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

AGENTS = [f"bench_agent_{i}" for i in range(5)]
INDEX_RSS = """
import resource, sys, time
from pathlib import Path
from gymbus.runner.viewer._index import RolloutIndex
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
index = RolloutIndex(Path(sys.argv[1]))
index.refresh()
seconds = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(index.rows, index.skipped_count, seconds, (after - before) / 1024)
"""


def rollout_row(task: int, rng: random.Random) -> dict[str, Any]:
    city = rng.choice(["Paris", "Tokyo", "Berlin", "Lima", "Oslo"])
    output: list[dict[str, Any]] = []
    for turn in range(2):
        call = f"call_{task}_{turn}"
        output += [
            {"type": "reasoning", "id": f"rs_{task}_{turn}", "summary": [{"type": "summary_text", "text": "I should look it up. " * 4}]},
            {"type": "function_call", "id": f"fc_{task}_{turn}", "name": "get_weather", "arguments": json.dumps({"city": city}), "call_id": call, "status": "completed"},
            {"type": "function_call_output", "call_id": call, "output": json.dumps({"city": city, "weather_description": f"The weather in {city} is cold."})},
            {"type": "message", "id": f"msg_{task}_{turn}", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": f"It is cold in {city}. " * 6, "annotations": []}]},
        ]  # fmt: skip
        if turn == 0:
            output.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "And tomorrow?"}],
                }
            )
    if task % 50 == 0:
        output[-1].update({"prompt_token_ids": list(range(600)), "generation_token_ids": list(range(40)),
                           "generation_log_probs": [-0.125] * 40})  # fmt: skip
    return {
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "You are a travel assistant. " * 5},
                {"role": "user", "content": f"What is the weather in {city}?"},
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Weather in a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                }
            ],
        },
        "agent_ref": {"type": "responses_api_agents", "name": AGENTS[task % len(AGENTS)]},
        "_ng_task_index": task // 4,
        "_ng_rollout_index": task % 4,
        "reward": rng.choice([0.0, 0.0, 0.5, 1.0]),
        "expected_city": city,
        "response": {
            "id": f"resp_{task}",
            "object": "response",
            "created_at": 0.0,
            "model": "bench",
            "output": output,
            "usage": {"input_tokens": 900, "output_tokens": 120, "total_tokens": 1020},
        },
    }


def write_rows(path: Path, rows: int) -> None:
    rng = random.Random(7)
    with open(path, "w") as file:
        file.writelines(json.dumps(rollout_row(task, rng)) + "\n" for task in range(rows))


def v1_index(path: Path) -> tuple[int, float, float]:
    out = subprocess.run(
        [sys.executable, "-c", INDEX_RSS, str(path)], capture_output=True, text=True, check=True
    )
    rows, _, seconds, mib = out.stdout.split()
    return int(rows), float(seconds), float(mib)


def _get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return (time.perf_counter() - started) * 1000, len(body)


def v2_server(path: Path, rows: int) -> tuple[str, subprocess.Popen[str]]:
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "gymbus.runner", "view", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    print(
        f"V2 `gym-runner view` start to URL printed, {rows:,} rows: {time.perf_counter() - started:.2f} s",
        flush=True,
    )
    for label, query in (
        ("first page of the list (100 rows)", "api/0/list"),
        ("the list filtered by agent and reward", f"api/0/list?agent={AGENTS[2]}&reward_min=0.5&reward_max=1"),
        ("the same filter, next page (kept selection)", f"api/0/list?agent={AGENTS[2]}&reward_min=0.5&reward_max=1&offset=100"),
        ("one rollout (the file's last)", f"api/0/rollout/{rows - 1}"),
    ):  # fmt: skip
        ms, size = _get(url + query)
        print(f"V2 {label}: {ms:.0f} ms, {size:,} bytes", flush=True)
    return url, server


def v3_browser(url: str, rows: int) -> None:
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        print("V3 skipped: Chromium or Playwright not installed (scripts/install-browser.sh)", flush=True)
        return
    args = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-quic"] + (["--no-sandbox"] if os.geteuid() == 0 else [])  # fmt: skip
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(profile, executable_path=chromium, args=args)
        page = context.new_page()
        sent = []
        page.on("response", lambda response: sent.append(len(response.body())))
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("#list tbody tr")
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        page.click("#list tbody tr:nth-child(50)")
        page.wait_for_selector("#rollout .function_call")
        opened = time.perf_counter() - started
        print(f"V3 Chromium, {rows:,} rows: page to list shown {loaded * 1000:.0f} ms, click to rollout shown "
              f"{opened * 1000:.0f} ms, {sum(sent):,} bytes in {len(sent)} responses", flush=True)  # fmt: skip
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true", help="keep the generated file (its path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gymbus-view-bench-"))
    path = work / "rollouts.jsonl"
    try:
        write_rows(path, args.rows)
        print(f"file: {args.rows:,} rows, {path.stat().st_size / 2**20:,.0f} MiB", flush=True)
        rows, seconds, mib = v1_index(path)
        print(f"V1 index {rows:,} rows: {seconds:.2f} s ({rows / seconds:,.0f} rows/s), peak RSS +{mib:.0f} MiB",
              flush=True)  # fmt: skip
        url, server = v2_server(path, args.rows)
        try:
            v3_browser(url, args.rows)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(20)
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
