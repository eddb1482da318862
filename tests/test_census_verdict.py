"""The census's verdict (`scripts/census_verdict.py`): each class it draws, each made by a case
built for it from recorded side results and request logs, with no server run."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from census_verdict import (  # noqa: E402
    CLASSES,
    TIMED_OUT,
    BothWays,
    Side,
    cause,
    compare_requests,
    judge,
    same_cause,
    settle_collected,
    settle_requests,
    settle_reverified,
)

SOKOBAN = "Unable to parse action from response: 'Sokoban board:'"


def _log(path: Path, *records: tuple[str, str, dict[str, object]]) -> Path:
    lines = [json.dumps({"model": model, "api": api, "request": body}) for model, api, body in records]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _census() -> ModuleType:
    """`scripts/nemo_gym_census.py`, imported (its tables)."""
    if "nemo_gym_census" not in sys.modules:
        spec = importlib.util.spec_from_file_location("nemo_gym_census", SCRIPTS / "nemo_gym_census.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["nemo_gym_census"] = module
        spec.loader.exec_module(module)
    return sys.modules["nemo_gym_census"]


def _failed(why: str, cause_: str) -> Side:
    return Side(why=why, cause=cause_, rows=5, failed=5)


def _works(rewards: dict[str, float | None], reverified: int = 0) -> Side:
    return Side(outcome="works", why="collected", rows=len(rewards), ok=len(rewards), rewards=rewards,
                reverified=reverified)  # fmt: skip


# --- causes ---


def test_each_sides_cause_is_the_servers_own_words_from_its_own_log() -> None:
    # NeMo Gym's client logs the server's FastAPI body; GymBus's bridge quotes its detail.
    theirs = cause(
        "ClientResponseError: 500, message='Internal Server Error'\n"
        f'Response content: {{"detail":"{SOKOBAN}"}}',
        "ClientResponseError: 500, message='Internal Server Error'",
    )
    ours = cause(
        f"agent_failed: NeMo Gym server grl_sokoban refused the request to /step (400): {SOKOBAN}",
        "agent_failed",
    )
    # Its own NeMo Gym agent quotes the bridge's error body inside its own: the innermost counts.
    nested = (
        "agent_failed: NeMo Gym server grl_sokoban_gymnasium_agent failed on /run (500): Hit an "
        "exception in GymnasiumAgent___grl_sokoban_gymnasium_agent calling an inner server: "
        'b\'{"error":{"type":"bad_request","message":"NeMo Gym server grl_sokoban refused the '
        "request to /step (400): Unable to parse action from response: \\'Sokoban board:\\'\"}}'"
    )
    assert theirs == ours == cause(nested, "agent_failed") == SOKOBAN
    # Where no server answered, the cause is what `classify` read (its last exception).
    assert cause("Traceback ...\nRuntimeError: no ticker data", "RuntimeError: no ticker data") == (
        "RuntimeError: no ticker data"
    )


def test_causes_match_across_folders_ports_and_a_cut_but_not_across_failures() -> None:
    assert same_cause(
        "FileNotFoundError: /tmp/a/1/resources_servers/x/data/db.json not found",
        "FileNotFoundError: /home/u/census/7/resources_servers/x/data/db.json not found",
    )
    assert same_cause("cannot connect to 127.0.0.1:43211", "cannot connect to 127.0.0.1:51007")
    assert same_cause("RuntimeError: Failed to load SEC ticker data after retries. Server cannot...",
                      "RuntimeError: Failed to load SEC ticker data after retries. Server cannot start")  # fmt: skip
    assert not same_cause("RuntimeError: Process `swe_rebench_resources_server` finished unexpectedly!",
                          "sandbox_timeout")  # fmt: skip
    assert not same_cause("", "")  # no cause read on either side is no match


def test_a_time_out_on_each_side_is_one_cause_and_a_time_out_against_a_failure_is_not() -> None:
    """terminal_bench_4: GymBus's rollouts reach their deadline, NeMo Gym's collection is
    stopped at the census's limit; the policy got no call on either side."""
    theirs = TIMED_OUT.format(limit=540.0)
    assert theirs == "did not finish within the census's 540 s"
    assert same_cause("deadline_exceeded: the rollout did not finish before its deadline", theirs)
    assert not same_cause("RuntimeError: Process `terminal_bench_4` finished unexpectedly!", theirs)
    assert not same_cause(
        "deadline_exceeded: the rollout did not finish before its deadline", "sandbox_timeout"
    )


def test_a_download_refused_on_each_side_is_one_cause_once_uv_writes_it_unwrapped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aviary: uv wraps its message at the width `COLUMNS` names, and the line read as
    GymBus's cause was the wrapped sentence's end (`host: github.com`), too short to match."""
    census = _census()
    monkeypatch.setenv("COLUMNS", "100")
    census._unwrapped_logs()
    assert "COLUMNS" not in census.os.environ
    fatal = (
        "fatal: unable to access 'https://github.com/org/hypotest.git/': Could not resolve host: github.com"
    )
    ours = "could not install NeMo Gym server aviary; see its log:\n  cause: Git operation failed\n" + (
        f"         --- stderr\n         {fatal}"
    )
    outcome, why = census.classify(ours)
    assert (outcome, cause(ours, why)) == ("downloads at start", fatal)
    assert same_cause(f"(gsm8k_aviary_resources_server) {fatal}", cause(ours, why))
    assert not same_cause(f"(gsm8k_aviary_resources_server) {fatal}", "host: github.com")


def test_an_install_log_listing_a_sandbox_extra_is_read_for_its_failure_not_the_extra() -> None:
    """legal_agent_bench's Harbor agent: GymBus's install log lists `nemo-gym[sandbox]` among
    the requirements, and that line, read as "needs containers", hid the github.com fetch
    that failed, as it fails on NeMo Gym's side."""
    census = _census()
    fatal = "fatal: unable to access 'https://github.com/org/harbor.git/': Could not resolve host: github.com"
    ours = (
        "could not install NeMo Gym server legal_agent_bench_harbor_agent; see its log:\n"
        "nemo-gym[sandbox]==0.7.0\nharbor @ git+https://github.com/org/harbor.git@abc\n"
        f"error: Failed to download and build `harbor`\n  cause: Git operation failed\n         {fatal}"
    )
    outcome, why = census.classify(ours)
    assert (outcome, cause(ours, why)) == ("downloads at start", fatal)
    assert same_cause(f"(legal_agent_bench_harbor_agent) {fatal}", cause(ours, why))
    assert (
        census.classify("RuntimeError: Sandbox not ready after waiting 240s")[0] == "needs containers or GPUs"
    )


def test_the_census_gives_what_it_starts_no_terminal_to_wrap_at() -> None:
    """Started from a terminal, the census's children inherit it as their standard input,
    and uv wraps at its width even without `COLUMNS`: the census detaches it first."""
    import pty
    import subprocess

    script = Path(__file__).resolve().parents[1] / "scripts" / "nemo_gym_census.py"
    check = (
        "import importlib.util, os, sys\n"
        f"spec = importlib.util.spec_from_file_location('census', {str(script)!r})\n"
        "census = importlib.util.module_from_spec(spec); sys.modules['census'] = census\n"
        "spec.loader.exec_module(census)\n"
        "before = os.isatty(0); census._unwrapped_logs(); print(before, os.isatty(0))\n"
    )
    terminal, other_end = pty.openpty()
    try:
        said = subprocess.run([sys.executable, "-c", check], stdin=other_end, capture_output=True,
                              text=True, timeout=60, check=True).stdout.split()  # fmt: skip
    finally:
        os.close(terminal)
        os.close(other_end)
    assert said == ["True", "False"]


def test_nemo_gyms_installer_refusing_before_its_named_lines_is_its_cause_not_the_process_ending() -> None:
    """code_fim: a server with a pyproject.toml has `nemo-gym` installed alone first, and
    those lines carry no server name; what ends the log is `ng_run`'s "finished unexpectedly"."""
    _census()
    from census_nemo_gym import _server_failure
    from nemo_gym_census import classify

    python = (
        "Because the current Python version (3.13) does not satisfy Python>=3.13.14 and "
        "nemo-gym==0.7.0 depends on Python>=3.13.14, we can conclude that nemo-gym==0.7.0 cannot be used."
    )
    log = "\n".join([
        "(code_fim) Using CPython 3.13.0 interpreter at: /usr/bin/python3.13",
        "Using Python 3.13.0 environment at: venvs/resources_servers/code_fim/.venv",
        "error: No solution found when resolving dependencies",
        f"  cause: {python}",
        "         And because only nemo-gym<=0.7.0 is available, your requirements are unsatisfiable.",
        "Sending interrupt signals to servers...",
        "Traceback (most recent call last):",
        "KeyboardInterrupt",
        "RuntimeError: Process `code_fim` finished unexpectedly!",
    ])  # fmt: skip
    outcome, why = classify(f"ng_run exited with code 1: {_server_failure(log)}")
    assert outcome == "fails"
    assert why == f"error: No solution found when resolving dependencies: {python}"[:200]
    assert "Python>=3.13.14" in why
    # GymBus's own install met that Python's requirement and stopped at the download: a
    # different cause, and it stays one.
    download = (
        "fatal: unable to access 'https://github.com/o/infilling.git/': Could not resolve host: github.com"
    )
    assert not same_cause(cause(why, why), download)


def test_nemo_gyms_cli_refusing_an_unset_key_is_the_same_cause_as_omegaconfs_error() -> None:
    """browsecomp_advanced_harness: NeMo Gym's CLI rewords omegaconf's `InterpolationKeyError`
    and Rich wraps it at 80 columns, folding the config value's long dotted name."""
    _census()
    from census_nemo_gym import _server_failure
    from nemo_gym_census import classify

    log = "\n".join([
        "⚠  `ng_run` is deprecated and will be removed in a future release; use `gym env start` instead.",
        "Error: Config value ",
        "'browsecomp_advanced_harness_resources_server.resources_servers.browsecomp_advan",
        "ced_harness.exclude_domains_file_path' references 'exclude_domains_file_path', ",
        "which is not set after merging.",
        "",
        "Provide it via a CLI override, in env.yaml, or in a config you pass via ",
        "config_paths.",
        "  ++exclude_domains_file_path=<value>",
    ])  # fmt: skip
    outcome, why = classify(f"ng_run exited with code 1: {_server_failure(log)}")
    theirs = cause(why, why)
    assert outcome == "fails" and theirs.startswith(
        "Error: Config value 'browsecomp_advanced_harness_resources_server.resources_servers."
        "browsecomp_advanced_harness.exclude_domains_file_path' references 'exclude_domains_file_path'"
    )
    ours = "InterpolationKeyError: Interpolation key 'exclude_domains_file_path' not found"
    assert same_cause(theirs, ours) and same_cause(ours, theirs)
    # Another unset key is another cause, and so is a cause naming none.
    assert not same_cause(theirs, "InterpolationKeyError: Interpolation key 'judge_base_url' not found")
    assert not same_cause(theirs, "ValidationError: 2 validation errors for HarnessExaSearchConfig")
    # With nothing before it, the refusal follows what quotes it.
    alone = classify(f"ng_run exited with code 1: {_server_failure(chr(10).join(log.splitlines()[1:]))}")
    assert alone == (outcome, why)


def test_a_server_whose_sides_fail_differently_is_its_own_class_listed_first(tmp_path: Path) -> None:
    result = BothWays(
        "swe_rebench/swe_rebench_opencode",
        nemo_gym=_failed(
            "start: RuntimeError",
            "RuntimeError: Process `swe_rebench_resources_server` finished unexpectedly!",
        ),  # fmt: skip
        gymbus=_failed(
            "start: ValidationError", "ValidationError: 7 validation errors for OpencodeAgentConfig"
        ),
    )
    judge(result, tmp_path)
    assert result.klass == "fails on both, different causes"
    assert result.why == (
        "NeMo Gym: RuntimeError: Process `swe_rebench_resources_server` finished unexpectedly!; "
        "GymBus: ValidationError: 7 validation errors for OpencodeAgentConfig"
    )
    same = BothWays(
        "grl_sokoban", nemo_gym=_failed("collect: 500", SOKOBAN), gymbus=_failed("collect", SOKOBAN)
    )
    judge(same, tmp_path)
    assert (same.klass, same.why) == ("fails on both, same cause", SOKOBAN)
    # The table lists the class first, each side's cause beside the server.
    table = _census().table([json.loads(json.dumps(one, default=vars)) for one in (same, result)])
    rows = table.splitlines()
    assert rows[2].startswith(
        "| fails on both, different causes (1) | `swe_rebench/swe_rebench_opencode` (NeMo"
    )
    assert rows[-1].startswith("| fails on both, same cause (1) | `grl_sokoban` (Unable to parse action")
    assert CLASSES[0] == "fails on both, different causes"


# --- evidence ---


def test_a_server_whose_policy_got_no_call_runs_but_is_not_evidenced(tmp_path: Path) -> None:
    # Every request went to the user simulator, on both sides: rows collected, rewards 1.0.
    for side in ("nemo_gym", "gymbus"):
        _log(tmp_path / f"{side}.requests.jsonl", ("user_simulator", "responses", {"input": "hi"}))
    result = BothWays(
        "conversational_tool_use_simulation", nemo_gym=_works({"0": 1.0}), gymbus=_works({"0": 1.0})
    )
    judge(result, tmp_path)
    assert result.klass == "runs, not evidenced"
    assert result.why == "NeMo Gym: the policy got no call; GymBus: the policy got no call"
    assert result.request_mismatches == [] and result.reward_mismatches == []


def test_all_rewards_zero_and_nothing_re_verified_is_not_evidenced(tmp_path: Path) -> None:
    for side in ("nemo_gym", "gymbus"):
        _log(tmp_path / f"{side}.requests.jsonl", ("policy", "responses", {"input": "hi"}))
    zeros = BothWays(
        "wordle_like", nemo_gym=_works({"0": 0.0, "1": 0.0}), gymbus=_works({"0": 0.0, "1": 0.0})
    )
    judge(zeros, tmp_path)
    assert zeros.klass == "runs, not evidenced"
    assert zeros.why.startswith("NeMo Gym: no reward is non-zero and nothing was re-verified; GymBus: ")
    assert zeros.nemo_gym.policy_calls == zeros.gymbus.policy_calls == 1
    # A non-zero reward on each side is evidence.
    scored = BothWays("mcqa", nemo_gym=_works({"0": 0.0, "1": 1.0}), gymbus=_works({"0": 0.0, "1": 1.0}))
    judge(scored, tmp_path)
    assert scored.klass == "works on both"


def test_re_verified_rewards_are_evidence_and_are_compared_with_the_stored_ones(tmp_path: Path) -> None:
    for side in ("nemo_gym", "gymbus"):
        _log(tmp_path / f"{side}.requests.jsonl", ("policy", "responses", {"input": "hi"}))
    rewards = {"0": 0.0, "r1": 0.0, "r2": 1.0, "r3": 1.0}
    result = BothWays("mcqa", nemo_gym=_works(dict(rewards), 3), gymbus=_works(dict(rewards), 3),
                      stored={"r1": 0.0, "r2": 1.0, "r3": 0.0})  # fmt: skip
    judge(result, tmp_path)
    assert result.klass == "works on both"
    # r3: 1.0 re-verified on both sides where the example rollouts store 0.0.
    assert result.nemo_gym.reproduced == result.gymbus.reproduced == 2
    assert "3 re-verified (2 as stored)" in _census().details([json.loads(json.dumps(result, default=vars))])


# --- unsettled rows: NeMo Gym's own two tries ---


def test_a_collected_row_is_unsettled_only_where_nemo_gyms_own_two_collections_differ_on_it(
    tmp_path: Path,
) -> None:
    result = BothWays("blackjack", nemo_gym=_works({"0": 1.0, "1": 1.0, "2": 0.0}),
                      gymbus=_works({"0": -1.0, "1": -1.0, "2": 0.0}))  # fmt: skip
    judge(result, tmp_path)
    assert result.reward_mismatches == [
        "row 0: NeMo Gym 1.0, GymBus -1.0",
        "row 1: NeMo Gym 1.0, GymBus -1.0",
    ]
    # NeMo Gym's second collection deals row 0 differently, and row 2 (which both sides
    # agreed on); row 1 it scores as before, so GymBus's -1.0 there stands.
    settle_collected(result, {"0": -1.0, "1": 1.0, "2": 1.0})
    assert result.unsettled == [
        "row 0: NeMo Gym 1.0 then -1.0, GymBus -1.0 (NeMo Gym's own two collections differ on this row)"
    ]
    assert result.reward_mismatches == ["row 1: NeMo Gym 1.0, GymBus -1.0"]


def test_a_request_is_unsettled_only_where_nemo_gyms_own_two_collections_sent_it_differently(
    tmp_path: Path,
) -> None:
    dealt = {"input": "you hold 7 and 9"}
    other = {"input": "you hold 10 and 3"}
    asked = {"input": "hit or stand?"}
    _log(tmp_path / "nemo_gym.requests.jsonl", ("policy", "responses", dealt), ("policy", "responses", asked))
    _log(
        tmp_path / "gymbus.requests.jsonl",
        ("policy", "responses", other),
        ("policy", "responses", {"input": "x"}),
    )
    result = BothWays("blackjack", nemo_gym=_works({"0": 1.0}), gymbus=_works({"0": 1.0}))
    judge(result, tmp_path)
    assert len(result.request_mismatches) == 2
    # NeMo Gym's second collection dealt another hand, and asked the same question again.
    again = _log(tmp_path / "again.jsonl", ("policy", "responses", other), ("policy", "responses", asked))
    settle_requests(result, tmp_path, again)
    assert result.request_mismatches == ['policy: .input: "hit or stand?" != "x" (NeMo Gym != GymBus)']
    assert result.unsettled == [
        'request policy: .input: "you hold 7 and 9" != "you hold 10 and 3" (NeMo Gym != GymBus) '
        "(NeMo Gym's own two collections differ on it)"
    ]


def test_a_re_verified_row_one_side_scores_differently_when_tried_again_is_unsettled(tmp_path: Path) -> None:
    result = BothWays(
        "math_with_judge",
        nemo_gym=_works({"0": 0.0, "r1": 0.0, "r2": 0.0, "r3": 1.0, "r4": 1.0}, 4),
        gymbus=_works({"0": 0.0, "r1": 0.0, "r2": 1.0, "r3": 0.0, "r4": 0.0}, 4),
    )
    judge(result, tmp_path)
    assert [said.partition(":")[0] for said in result.reward_mismatches] == ["row r2", "row r3", "row r4"]
    # Tried again: r2's GymBus reward changes, r3's two sides each say the same again, r4's
    # second try on NeMo Gym's side gave no reward.
    settle_reverified(result, {"r2": 0.0, "r3": 1.0}, {"r2": 0.0, "r3": 0.0, "r4": 0.0})
    assert result.unsettled == [
        "row r2: NeMo Gym 0.0 then 0.0, GymBus 1.0 then 0.0 (the same request scored differently by GymBus)"
    ]
    assert result.reward_mismatches == [
        "row r3: NeMo Gym 1.0 then 1.0, GymBus 0.0 then 0.0",
        "row r4: NeMo Gym 1.0 then None, GymBus 0.0 then 0.0",
    ]
    # A side that ran no rows (it did not start) has nothing to differ by: its class says why.
    idle = BothWays("spartqa", nemo_gym=Side(why="start: refused"), gymbus=_works({"0": 1.0}))
    judge(idle, tmp_path / "none")
    assert (idle.klass, idle.reward_mismatches, idle.request_mismatches) == ("works on GymBus only", [], [])


# --- requests, as NeMo Gym sent them ---

JUDGE = {
    "messages": [{"role": "user", "content": "Grade."}],
    "seed": 42,
    "model": "bbq_judge_model",
    "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}},
}
POLICY_CALL = {"input": [{"role": "user", "content": "hi", "type": "message"}], "model": "policy", "top_p": None,
               "stream": False}  # fmt: skip


def _compared(tmp_path: Path, ours: list[tuple[str, str, dict[str, object]]],
              theirs: list[tuple[str, str, dict[str, object]]]) -> tuple[dict[str, int], list[str]]:  # fmt: skip
    compared = compare_requests(
        [_log(tmp_path / "ours.jsonl", *ours)], [_log(tmp_path / "theirs.jsonl", *theirs)]
    )
    return compared.counts, compared.differences


def test_the_same_requests_spelled_each_sides_way_do_not_differ(tmp_path: Path) -> None:
    # GymBus's policy call: no nulls, its cache key; its judge call at the policy's name went
    # over Responses (GymBus serves the policy over one API), put into Chat Completions by
    # GymBus's own adapter conversion to be compared with what NeMo Gym sent.
    same = {"input": [{"role": "user", "content": "hi"}], "model": "policy", "prompt_cache_key": "s1"}
    judged = {
        "input": [{"role": "user", "content": "Grade."}],
        "model": "policy",
        "metadata": {"extra_body": '{"seed": 42}'},
        "tools": [],
        "text": {"format": {"type": "json_schema", "name": "v", "schema": {"type": "object"}}},
    }
    theirs = [
        ("policy", "responses", POLICY_CALL),
        ("policy", "chat", JUDGE),
        ("bbq_judge_model", "chat", JUDGE),
    ]
    ours = [
        ("policy", "responses", same),
        ("policy", "responses", judged),
        ("bbq_judge_model", "chat", JUDGE),
    ]
    assert _compared(tmp_path, ours, theirs) == ({"nemo_gym": 3, "gymbus": 3}, [])
    # Without its seed, the judge's request differs, and says where.
    unseeded = {key: value for key, value in JUDGE.items() if key != "seed"}
    _, differences = _compared(tmp_path, [*ours[:2], ("bbq_judge_model", "chat", unseeded)], theirs)
    assert differences == ["bbq_judge_model: .seed: 42 != null (NeMo Gym != GymBus)"]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    ],
)
def test_a_request_differing_only_in_an_image_or_audio_part_differs(
    tmp_path: Path, part: dict[str, object]
) -> None:
    text = {"type": "text", "text": "What is drawn?"}
    seen = {"messages": [{"role": "user", "content": [text, part]}]}
    blind = {"messages": [{"role": "user", "content": [text]}]}
    _, differences = _compared(tmp_path, [("policy", "chat", blind)], [("policy", "chat", seen)])
    assert len(differences) == 1 and differences[0].startswith("policy: .messages[0].content: [")
    assert str(part["type"]) in differences[0] and differences[0].endswith(" (NeMo Gym != GymBus)")
    # GymBus's shim reads a chat request as Responses parameters with the text alone: what it
    # then sent over Responses, put back into NeMo Gym's API, lacks the image too.
    read = {"input": [{"role": "user", "content": "What is drawn?"}]}
    _, differences = _compared(tmp_path, [("policy", "responses", read)], [("policy", "chat", seen)])
    assert len(differences) == 1 and differences[0].startswith("policy: .messages[0].content: [")


def test_a_request_differing_only_in_an_unknown_field_differs(tmp_path: Path) -> None:
    kept = {
        **POLICY_CALL,
        "input": [{"role": "user", "content": "hi", "x_trace": {"id": 7}}],
        "x_priority": 3,
    }
    _, differences = _compared(
        tmp_path, [("policy", "responses", POLICY_CALL)], [("policy", "responses", kept)]
    )
    assert differences == ['policy: .input[0].x_trace: {"id": 7} != null (NeMo Gym != GymBus)']
    plain = {**POLICY_CALL, "x_priority": 3}
    _, differences = _compared(
        tmp_path, [("policy", "responses", POLICY_CALL)], [("policy", "responses", plain)]
    )
    assert differences == ["policy: .x_priority: 3 != null (NeMo Gym != GymBus)"]


async def test_rows_that_name_no_agent_are_one_cause_in_each_sides_words(tmp_path: Path) -> None:
    """gdpval: its rows name no agent and its config declares none. NeMo Gym's
    `ng_collect_rollouts` refuses them with a `ValueError`; GymBus's `collect` with its own
    check, made here by that check on the same kind of rows."""
    from gymbus.runner._input import UnknownAgent
    from gymbus.runner.collection._collect import _check_named
    from gymbus.runner.collection._plan import Plan

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"responses_create_params": {"input": "hi"}}\n' * 5)
    with pytest.raises(UnknownAgent) as refused:
        _check_named(await Plan.scan(rows, limit=None, num_repeats=1, default_agent=None, name=str(rows)))
    ours = cause(str(refused.value), str(refused.value))
    theirs = (
        "ValueError: No agent specified for rows [0, 0, 0, 0, 0]. Provide +agent_name (or +agent_map "
        "with a _default entry), or include agent_ref or task_source in the data."
    )
    assert same_cause(theirs, ours) and same_cause(ours, theirs)
    # Rows that name an agent nobody serves are another cause.
    assert not same_cause(
        theirs, "rows.jsonl: no agent its rows name can run here: gdpval_agent (5 rollouts)"
    )


def _each_sides_reading(
    tmp_path: Path, server: str, own_log: list[str], ng_run: str, quoted: str = ""
) -> tuple[str, str]:
    """(NeMo Gym's, GymBus's) reason for one server's failed start: `ng_run`'s log read as
    the census reads it, and GymBus's worker message naming the server's own log (`own_log`),
    after which the worker may quote some of it (`quoted`)."""
    _census()
    from census_nemo_gym import _server_failure
    from nemo_gym_census import _log_text, classify

    _, theirs = classify(f"ng_run exited with code 1: {_server_failure(ng_run)}")
    log = tmp_path / f"{server}-1-2.log"
    log.write_text("\n".join(own_log) + "\n")
    _, ours = classify(
        _log_text(f"error: NeMo Gym server {server} exited with code 1; its log is {log}:{quoted}")
    )
    return theirs, ours


def test_a_servers_own_download_failing_as_it_starts_is_one_cause_on_both_sides(tmp_path: Path) -> None:
    """bigcodebench: as it starts, the server runs `uv venv --python 3.10`, whose download
    fails; uv says why, then the server raises `CalledProcessError`. NeMo Gym's `ng_run`
    and GymBus's server log both hold those lines; GymBus's worker also quotes the
    traceback's end. Both are read up to the server's first failure."""
    command = (
        "Command '['uv', 'venv', '--seed', '--python', '3.10', '.bcb_venv']' returned non-zero exit status 2."
    )
    server = [
        "error: Request failed after 3 retries in 9.5s",
        "  cause: Failed to download `https://github.com/astral-sh/python-build-standalone/cpython-3.10.tar.gz`",
        "  cause: dns error",
        "  cause: failed to lookup address information: Name or service not known",
        "Traceback (most recent call last):",
        '  File "setup_bcb_venv.py", line 56, in ensure_bcb_venv',
        f"subprocess.CalledProcessError: {command}",
    ]  # fmt: skip
    ng_run = "\n".join([
        "(bigcodebench_simple_agent) INFO:     Application startup complete.",
        *server,
        "Sending interrupt signals to servers...",
        "RuntimeError: Process `bigcodebench` finished unexpectedly!",
    ])  # fmt: skip
    theirs, ours = _each_sides_reading(tmp_path, "bigcodebench", server, ng_run, f" {' '.join(server[-3:])}")
    assert theirs == ours == "cause: failed to lookup address information: Name or service not known"
    assert same_cause(cause(theirs, theirs), cause(ours, ours))


def test_a_servers_exception_under_its_name_is_its_cause_not_ng_runs_process_ending(tmp_path: Path) -> None:
    """competitive_coding_challenges: `ng_run` prefixes each line of the server's with its
    name; the server's own exception under that name is the cause, not `ng_run`'s "finished
    unexpectedly" that follows. GymBus's server log has the same exception unprefixed."""
    server = [
        "CCC: pre-loading metadata (~27 GB, ~46s) before first request...",
        "Traceback (most recent call last):",
        '  File "ccc_eval.py", line 238, in wait_for_sandbox',
        "RuntimeError: Sandbox not ready after waiting 240s",
        "",
        "ERROR:    Application startup failed. Exiting.",
    ]
    name = "(competitive_coding_challenges_resources_server) "
    ng_run = "\n".join([
        *(name + line for line in server),
        "Sending interrupt signals to servers...",
        "Traceback (most recent call last):",
        "RuntimeError: Process `competitive_coding_challenges_resources_server` finished unexpectedly!",
    ])  # fmt: skip
    theirs, ours = _each_sides_reading(tmp_path, "competitive_coding_challenges", server, ng_run)
    assert theirs == ours == "RuntimeError: Sandbox not ready after waiting 240s"


def test_what_a_nemo_gym_server_raised_is_its_answer_and_folders_do_not_make_a_cause(tmp_path: Path) -> None:
    """gdp_pdf: its agent raises on `/run`; NeMo Gym's client logs only the 500, and the
    agent's handler logs the `repr(e)` it answers with. GymBus's failure row carries the
    same words, with the path of its own copy of the server, cut at another length."""
    _census()
    from census_both_ways import _server_answer

    said = "FileNotFoundError('Document manifest not found: {}/resources_servers/gdp_pdf/data/documents/9ef247ac-8da4-484b-9496-4569302f97f5/manifest.json\\nSource documents are not committed.')"  # noqa: E501
    log = tmp_path / "ng_run.log"
    log.write_text("\n".join([
        "(gdp_pdf_simple_agent) FileNotFoundError: Document manifest not found: ...",
        f"(gdp_pdf_simple_agent) repr(e): {said.format('/tmp/gymbus-census-x/1/venvs/responses_api_agents/gdp_pdf_agent/.venv/lib/python3.13/site-packages')}",  # noqa: E501
        "(gdp_pdf_simple_agent) 🚨 Caught an exception printed above in gdp_pdf_simple_agent (GdpPdfAgent).",
    ]))  # fmt: skip
    answer = _server_answer(log)
    theirs = cause(answer, answer)
    ours = said.format("/root/.cache/gymbus/nemo-gym/venvs/5d15c19258f87aa4/lib/python3.13/site-packages")
    assert theirs.startswith("FileNotFoundError('Document manifest not found: manifest.json")
    assert same_cause(theirs, cause(ours, ours))
    assert not same_cause(theirs, cause("FileNotFoundError('db.json not found')", "FileNotFoundError"))


def test_gymbus_request_in_place_of_one_nemo_gym_sends_differently_each_time_is_unsettled_with_it(
    tmp_path: Path,
) -> None:
    """indirect_prompt_injection: each collection makes a random appointment id, so NeMo
    Gym's two collections send different requests, and GymBus's matches neither. It is
    unsettled with the one it stands in for; a steady request that differs still stands."""
    asked = {"input": "confirm?"}
    _log(tmp_path / "nemo_gym.requests.jsonl", ("policy", "responses", {"input": "id 17"}),
         ("policy", "responses", asked), ("judge", "responses", {"input": "grade"}))  # fmt: skip
    _log(tmp_path / "gymbus.requests.jsonl", ("policy", "responses", {"input": "id 42"}),
         ("policy", "responses", asked), ("judge", "responses", {"input": "mark"}))  # fmt: skip
    result = BothWays("indirect_prompt_injection", nemo_gym=_works({"0": 1.0}), gymbus=_works({"0": 1.0}))
    judge(result, tmp_path)
    again = _log(tmp_path / "again.jsonl", ("policy", "responses", {"input": "id 5"}),
                 ("policy", "responses", asked), ("judge", "responses", {"input": "grade"}))  # fmt: skip
    settle_requests(result, tmp_path, again)
    assert result.request_mismatches == ['judge: .input: "grade" != "mark" (NeMo Gym != GymBus)']
    assert result.unsettled == [
        'request policy: .input: "id 17" != "id 42" (NeMo Gym != GymBus) (NeMo Gym\'s own two collections differ on it)'
    ]


def test_an_entrypoint_that_defines_no_server_is_one_cause_in_each_sides_words(tmp_path: Path) -> None:
    """gymnasium: its config's entrypoint is `base.py`, a library. NeMo Gym runs it, it
    returns at once without a word, and `ng_run` says the process finished; GymBus's
    launcher finds no server class in it. A process that finished after its server raised
    is read as that exception instead, and is another cause."""
    ng_run = "\n".join([
        "Starting `gymnasium` from venv venvs/resources_servers/gymnasium/.venv",
        "0 / 4 servers ready. Waiting for servers to spin up: ['gymnasium', 'policy_model']",
        "Sending interrupt signals to servers...",
        "Traceback (most recent call last):",
        "RuntimeError: Process `gymnasium` finished unexpectedly!",
    ])  # fmt: skip
    own = [f"{tmp_path}/resources_servers/gymnasium/base.py: expected one server class, found none"]
    theirs, ours = _each_sides_reading(tmp_path, "gymnasium", own, ng_run)
    assert ours.endswith("gymnasium/base.py: expected one server class, found none")
    assert same_cause(cause(theirs, theirs), cause(ours, ours))
    from census_nemo_gym import _server_failure
    from nemo_gym_census import classify

    crashed = ng_run.replace("Sending", "(gymnasium) ImportError: cannot import name 'Env'\nSending")
    _, raised = classify(f"ng_run exited with code 1: {_server_failure(crashed)}")
    assert raised == "ImportError: cannot import name 'Env'"
    assert not same_cause(cause(raised, raised), cause(ours, ours))


def test_two_downloads_from_one_unreachable_host_are_one_cause_whichever_source_came_first() -> None:
    """longmt_eval needs two git sources on GitHub: NeMo Gym's installer failed on one first,
    GymBus's on the other. Another host is another cause."""
    theirs = "(longmt_eval) fatal: unable to access 'https://github.com/jeffwillette/SEGALE.git/': Could not resolve host: github.com"  # noqa: E501
    ours = "fatal: unable to access 'https://github.com/jeffwillette/LongMT.git/': Could not resolve host: github.com"
    assert same_cause(cause(theirs, theirs), cause(ours, ours))
    assert same_cause(cause(ours, ours), cause(theirs, theirs))
    elsewhere = "fatal: unable to access 'https://gitlab.com/o/r.git/': Could not resolve host: gitlab.com"
    assert not same_cause(cause(theirs, theirs), elsewhere)


def test_a_failed_command_is_one_cause_whichever_folder_each_side_ran_it_into() -> None:
    """newton_bench clones its benchmark at start, into its own copy of the server: a path
    relative to NeMo Gym's run folder on one side, absolute on the other, each cut at 200
    characters where it stood."""
    _census()
    from nemo_gym_census import classify

    command = "subprocess.CalledProcessError: Command '['git', 'clone', '--depth=1', 'https://github.com/HKUST-KnowComp/NewtonBench', '{}/resources_servers/newton_bench/NewtonBench']' returned non-zero exit status 128."  # noqa: E501
    _, theirs = classify(
        command.format("venvs/resources_servers/newton_bench/.venv/lib/python3.13/site-packages")
    )
    _, ours = classify(
        command.format("/root/.cache/gymbus/nemo-gym/venvs/6fdbd5de2ffa7b98/lib/python3.13/site-packages")
    )
    assert "https://github.com/HKUST-KnowComp/NewtonBench" in theirs  # a URL keeps its folders
    assert same_cause(cause(theirs, theirs), cause(ours, ours))
    assert not same_cause(cause(theirs, theirs), command.replace("NewtonBench", "Other").format("/x/y"))


async def test_an_agent_its_config_declares_that_could_not_start_is_its_own_logs_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deepsearchqa: its agent's config fails NeMo Gym's validation on both sides. GymBus's
    worker serves the environment without the agent and logs why; `collect`, asking the bus,
    knows the agent no better than a misspelt name. The worker's log is GymBus's cause,
    unless the name is one the config does not declare."""
    _census()
    import census_both_ways
    from census_both_ways import BothWays, _gymbus_collect, _Plan
    from nemo_gym_census import classify

    from gymbus.runner._input import UnknownAgent

    async def refused(*_: object) -> None:
        raise UnknownAgent("--agent deepsearchqa_example_agent: not an agent (the agents: a, b)", usage=True)

    monkeypatch.setattr(census_both_ways, "collect", refused)
    raised = "pydantic_core._pydantic_core.ValidationError: 2 validation errors for HarnessExaSearchConfig"
    worker_log = "\n".join([
        "WARNING  deepsearchqa: not serving its agent deepsearchqa_example_agent (harness_exa_search), which "
        "could not start: NeMo Gym server deepsearchqa_example_agent exited with code 1; its log is "
        f"{tmp_path}/deepsearchqa_example_agent-1-2.log:",
        "    server_config = server_config_cls.model_validate(",
        raised,
        "agent",
        "  Field required [type=missing, input_value={'datasets': [{'jsonl_fpa...'}, input_type=dict]",
        "ready: serving nemo-gym:deepsearchqa on nats://127.0.0.1:4222",
    ])  # fmt: skip

    class Running:
        def text(self) -> str:
            return worker_log

    plan = _Plan("deepsearchqa", "nats://127.0.0.1:4222", None, "", tmp_path, tmp_path / "rows.jsonl", None,
                 lambda: None, None, classify, None, frozenset({"deepsearchqa_example_agent"}))  # fmt: skip
    result = BothWays("deepsearchqa", agent="deepsearchqa_example_agent")
    ours = (await _gymbus_collect(plan, result, Running())).cause
    _, theirs = classify(f"ng_run exited with code 1: {raised}")
    assert same_cause(cause(theirs, theirs), ours), ours
    # Rows naming an agent the config does not declare: collect's own words are the cause.
    result.agent = "deepsearchqa_agent"
    misnamed = (await _gymbus_collect(plan, result, Running())).cause
    assert misnamed.startswith("--agent deepsearchqa_example_agent: not an agent")
