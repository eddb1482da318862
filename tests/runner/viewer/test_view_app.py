"""The viewer's JSON API and its self-contained page (the browser tests drive both whole:
tests/integration/test_viewer_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gymbus.runner.viewer._app import _make_app, _names_of, _Source
from gymbus.runner.viewer._html import PageTooLarge, render_html
from gymbus.runner.viewer._index import RolloutIndex
from gymbus.runner.viewer._view import view_files
from gymbus.schemas import ViewLimits
from tests.runner.viewer.test_view_index import indexed, rollout, write

LIMITS = ViewLimits(page_rows=2, max_page_rows=3)


@pytest.fixture
def rollouts(tmp_path: Path) -> Path:
    rows = [rollout(0, 0.0), rollout(1, 1.0, agent="b"), rollout(2, 1.0), rollout(3, 0.5)]
    return write(tmp_path / "r.jsonl", *rows, "{broken")


@pytest.fixture
async def client(rollouts: Path) -> AsyncIterator[TestClient]:
    hosts: set[str] = set()
    app = _make_app([_Source(RolloutIndex(rollouts, LIMITS))], hosts, LIMITS)
    server = TestServer(app, host="127.0.0.1")
    async with TestClient(server) as test_client:
        hosts.update(_names_of(server.port))
        yield test_client


async def test_the_list_comes_a_page_at_a_time_with_the_files_facts(
    client: TestClient, rollouts: Path
) -> None:
    answer = await client.get("/api/0/list")
    assert answer.status == 200 and "script-src 'self'" in answer.headers["Content-Security-Policy"]
    body = await answer.json()
    assert (body["rows"], body["total"], body["offset"]) == (4, 4, 0)
    assert [row[1] for row in body["page"]] == [1, 2]  # line numbers; page_rows is 2
    assert body["agents"] == ["weather_agent", "b"] and body["skipped"] == [[5, body["skipped"][0][1]]]
    assert "without a newline" not in body["skipped"][0][1]
    body = await (await client.get("/api/0/list?offset=2&limit=3&reward_min=0.5")).json()
    assert (body["total"], [row[1] for row in body["page"]]) == (3, [4])
    body = await (await client.get("/api/0/list?agent=b")).json()
    assert [row[1] for row in body["page"]] == [2]


async def test_a_rollout_comes_whole_and_a_grown_file_is_seen(client: TestClient, rollouts: Path) -> None:
    body = await (await client.get("/api/0/rollout/3")).json()
    assert body["data"] == rollout(3, 0.5) and body["summary"][1] == 4
    rollouts.write_text(rollouts.read_text() + "\n" + json.dumps(rollout(9, agent="late")) + "\n")
    body = await (await client.get("/api/0/list?agent=late")).json()
    assert (body["rows"], body["total"]) == (5, 1)
    assert (await (await client.get(f"/api/0/rollout/{body['page'][0][0]}")).json())["data"][
        "_ng_task_index"
    ] == 9


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/api/0/list?limit=4", 400, "ViewLimits.max_page_rows"),
        ("/api/0/list?reward_min=high", 400, "reward_min must be a number"),
        ("/api/0/list?reward_max=nan", 400, "reward_max must be a number"),
        ("/api/0/list?outcome=maybe", 400, "outcome must be"),
        ("/api/1/list", 400, "no file 1"),
        ("/api/0/rollout/4", 404, "no row 4"),
        ("/api/0/rollout/x", 400, "row must be an integer"),
    ],
)
async def test_bad_requests_are_refused_with_a_reason(
    client: TestClient, path: str, status: int, says: str
) -> None:
    answer = await client.get(path)
    assert answer.status == status and says in (await answer.json())["error"]


async def test_requests_addressed_to_another_host_are_refused(client: TestClient) -> None:
    answer = await client.get("/api/0/list", headers={"Host": "rebound.example:80"})
    assert answer.status == 403
    answer = await client.get("/", headers={"Host": f"localhost:{client.port}"})
    assert answer.status == 200 and "<title>GymBus rollouts</title>" in await answer.text()


def test_the_failures_sidecar_is_shown_beside_its_rollouts(tmp_path: Path) -> None:
    out = write(tmp_path / "out.jsonl", rollout(0))
    assert view_files(out) == [out]
    sidecar = write(tmp_path / "out_failures.jsonl", rollout(1, _ng_failure_class="no_worker"))
    assert view_files(out) == [out, sidecar]
    assert view_files(sidecar) == [sidecar]


def _embedded(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="gymbus-data">(.*?)</script>', html, re.DOTALL)
    assert found is not None
    return json.loads(found.group(1))


def test_a_self_contained_page_embeds_its_rows_and_no_rollout_text_can_close_its_script(
    tmp_path: Path,
) -> None:
    hostile = rollout(0, _note="</script><script>alert(1)</script><!--")
    page = render_html([indexed(write(tmp_path / "r.jsonl", hostile, rollout(1)))])
    assert "alert(1)</script>" not in page.html and page.notes == []
    data = _embedded(page.html)["sources"][0]
    assert data["rollouts"][0]["_note"] == hostile["_note"] and len(data["summaries"]) == 2
    script = page.html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page.html  # the page runs its own script and no other
    assert "http://" not in page.html.split('id="gymbus-data"')[0] and "https://" not in page.html


def test_a_large_file_embeds_a_bounded_page_or_is_refused_naming_the_limit(tmp_path: Path) -> None:
    index = indexed(write(tmp_path / "r.jsonl", *[rollout(i) for i in range(5)]))
    page = render_html([index], ViewLimits(html_rollouts=2))
    data = _embedded(page.html)["sources"][0]
    assert (len(data["summaries"]), len(data["rollouts"])) == (5, 2)
    assert "first 2 of the 5 rollouts" in page.notes[0] and "ViewLimits.html_rollouts" in page.notes[0]
    row_bytes = len(index.read(0))
    assert (
        len(
            _embedded(render_html([index], ViewLimits(html_rollout_bytes=3 * row_bytes)).html)["sources"][0][
                "rollouts"
            ]
        )
        == 3
    )
    with pytest.raises(PageTooLarge, match=r"has 5 rows; .* at most 4 \(ViewLimits.html_rows\)"):
        render_html([index], ViewLimits(html_rows=4))


def test_no_other_command_loads_the_viewer_or_a_web_server() -> None:
    code = (
        "import sys, gymbus.runner, gymbus.runner.cli; print(sorted(m for m in sys.modules if m == 'aiohttp.web'"
        " or m.startswith('gymbus.runner.viewer.') and m != 'gymbus.runner.viewer._command'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
