"""`gym-runner prepare`: every bad row reported by file:line: field, agent_ref stamped, datasets
blended, balanced, shuffled and split with a seed, and NeMo Gym's dataset metrics."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner, Result

from gymbus.runner.cli import app
from gymbus.runner.preparation._command import prepare_command

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NEMO_GYM_METRICS = Path(__file__).resolve().parent / "nemo_gym_metrics"
DATASET_CONFIG = ("name", "type", "jsonl_fpath", "num_repeats", "source", "gitlab_identifier",
                  "huggingface_identifier", "license")  # fmt: skip


def _row(text: str, **more: object) -> str:
    return json.dumps({"responses_create_params": {"input": text}, **more})


def _prepare(*args: str) -> Result:
    return CliRunner().invoke(app, ["prepare", *args])


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


BAD_ROWS = {
    2: ('{"responses_create_params": {"input": "cut off', "not a JSON object"),
    4: (json.dumps({"question": "no params"}), "field `responses_create_params`: missing"),
    5: (json.dumps({"responses_create_params": {"input": 42}}), "field `responses_create_params.input`"),
    7: (_row("bad ref", agent_ref={"name": "two words"}), "field `agent_ref`: 'two words' is not a valid"),
    8: ('{"responses_create_params": {"input": "deep"}, "x": ' + "[" * 1000 + "]" * 1000 + "}", "nested deeper"),
    9: ("[1, 2, 3]", "not a JSON object (Expected `object`, got `array`)"),
    11: (_row("typo", temprature=1), ""),  # an unknown top-level field passes through: a good row
    12: (json.dumps({"responses_create_params": {"input": "x", "temprature": 1}}),
         "unknown field `temprature`"),
}  # fmt: skip


def test_every_bad_row_is_reported_with_its_line_and_field_and_the_good_ones_are_kept(
    tmp_path: Path,
) -> None:
    lines = {number: _row(f"good {number}") for number in range(1, 14)}
    lines.update({number: text for number, (text, _) in BAD_ROWS.items()})
    lines[3] = ""  # a blank line is no row
    data = tmp_path / "mixed.jsonl"
    data.write_text("\n".join(lines[n] for n in range(1, 14)) + "\n")

    result = _prepare(str(data), "--agent", "mcqa_simple_agent", "--no-shuffle", "-o", str(tmp_path / "out"))

    assert result.exit_code == 1, result.output
    reported = (tmp_path / "out" / "bad_rows.txt").read_text().splitlines()
    bad = {n: why for n, (_, why) in BAD_ROWS.items() if why}
    assert len(reported) == len(bad) == 7
    for (number, why), line in zip(sorted(bad.items()), reported, strict=True):
        assert line.startswith(f"{data}:{number}: ") and why in line, line
        assert line in result.output  # listed on the terminal too
    good = _lines(tmp_path / "out" / "train.jsonl")
    assert [row["responses_create_params"] for row in good] == [
        {"input": f"good {n}"} if n != 11 else {"input": "typo"} for n in (1, 6, 10, 11, 13)
    ]
    assert all(
        row["agent_ref"] == {"type": "responses_api_agents", "name": "mcqa_simple_agent"} for row in good
    )
    assert "5 good rows, 7 bad; 5 used" in result.output


def test_a_row_without_agent_ref_and_no_agent_is_a_bad_row(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(_row("a", agent_ref={"name": "mcqa_simple_agent"}) + "\n" + _row("b") + "\n")
    result = _prepare(str(data), "-o", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert f"{data}:2: field `agent_ref`: missing, and no --agent was given" in result.output
    assert len(_lines(tmp_path / "out" / "train.jsonl")) == 1


@pytest.mark.parametrize("env", sorted(path.stem for path in NEMO_GYM_METRICS.glob("*.json")))
def test_metrics_are_the_ones_nemo_gym_computed_for_its_example_datasets(env: str, tmp_path: Path) -> None:
    # In file order, as NeMo Gym reads it (fields are listed in the order they are first seen).
    result = _prepare(str(EXAMPLES / f"{env}.jsonl"), "-a", "some_agent", "--no-shuffle", "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    ours = json.loads((tmp_path / "train_metrics.json").read_text())
    theirs = json.loads((NEMO_GYM_METRICS / f"{env}.json").read_text())
    assert ours["type"] == "train" and ours["jsonl_fpath"] == str(tmp_path / "train.jsonl")
    for key in DATASET_CONFIG:
        ours.pop(key)
        theirs.pop(key, None)
    assert list(ours) == list(theirs) and ours == theirs


def test_rows_that_need_nothing_keep_their_bytes_and_order_without_shuffle(tmp_path: Path) -> None:
    source = EXAMPLES / "example_single_tool_call.jsonl"
    text = "".join(line.rstrip("\n")[:-1] + ', "agent_ref": {"name": "weather"}}\n' for line in source.open())
    data = tmp_path / "weather.jsonl"
    data.write_text(text)
    assert _prepare(str(data), "--no-shuffle", "-o", str(tmp_path / "out")).exit_code == 0
    assert (tmp_path / "out" / "train.jsonl").read_text() == text


def _numbered(path: Path, count: int, name: str) -> Path:
    path.write_text("".join(_row(f"{name} {n}", _ng_task_index=n) + "\n" for n in range(count)))
    return path


def test_blend_balance_shuffle_and_split_are_seeded_and_lose_no_row(tmp_path: Path) -> None:
    small = _numbered(tmp_path / "small.jsonl", 5, "small")
    big = _numbered(tmp_path / "big.jsonl", 40, "big")

    def run(out: str, seed: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        result = _prepare(f"{small}=small_agent", f"{big}=big_agent", "--balance", "--seed", seed,
                          "--validation-fraction", "0.2", "-o", str(tmp_path / out))  # fmt: skip
        assert result.exit_code == 0, result.output
        return _lines(tmp_path / out / "train.jsonl"), _lines(tmp_path / out / "validation.jsonl")

    train, validation = run("a", "7")
    rows = train + validation
    assert (len(train), len(validation)) == (8, 2)
    texts = [str(row["responses_create_params"]["input"]) for row in rows]  # type: ignore[index]
    assert sorted(t for t in texts if t.startswith("small")) == [f"small {n}" for n in range(5)]
    assert len({t for t in texts if t.startswith("big")}) == 5  # a sample as large as the small one
    for row, text in zip(rows, texts, strict=True):
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": text.split()[0] + "_agent"}
        assert "_ng_task_index" not in row  # each source numbered from 0: collect renumbers the blend
    assert run("b", "7") == (train, validation)
    assert run("c", "8") != (train, validation)
    metrics = json.loads((tmp_path / "a" / "validation_metrics.json").read_text())
    assert metrics["type"] == "validation" and metrics["Number of examples"] == 2


def test_validation_count_and_its_bound(tmp_path: Path) -> None:
    data = _numbered(tmp_path / "d.jsonl", 10, "row")
    result = _prepare(str(data), "-a", "x", "--validation-count", "3", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert len(_lines(tmp_path / "out" / "validation.jsonl")) == 3
    assert len(_lines(tmp_path / "out" / "train.jsonl")) == 7
    assert "_ng_task_index" in _lines(tmp_path / "out" / "train.jsonl")[0]  # one source: indices kept
    too_many = _prepare(str(data), "-a", "x", "--validation-count", "11", "-o", str(tmp_path / "out"))
    assert too_many.exit_code == 1 and "more than the 10 good rows" in too_many.output


def test_a_missing_input_file_is_named(tmp_path: Path) -> None:
    result = _prepare(str(tmp_path / "nope.jsonl"), "-a", "x", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1 and "input file not found" in result.output


def test_an_input_is_never_overwritten(tmp_path: Path) -> None:
    data = _numbered(tmp_path / "train.jsonl", 3, "row")
    before = data.read_bytes()
    result = _prepare(str(data), "-a", "x", "-o", str(tmp_path))
    assert result.exit_code == 1 and "is an input" in result.output
    assert data.read_bytes() == before


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.mark.usefixtures("offline_hub")
def test_a_hugging_face_dataset_is_read_with_the_datasets_library(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.jsonl").write_text(_row("one", expected_answer="A") + "\n" + _row("two", id=3) + "\n")
    result = _prepare("--hf", f"{repo}=mcqa_simple_agent", "--no-shuffle", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _lines(tmp_path / "out" / "train.jsonl")
    ref = {"type": "responses_api_agents", "name": "mcqa_simple_agent"}
    # The columns a row lacks come back from Arrow as nulls; they are dropped again.
    assert rows == [
        {"responses_create_params": {"input": "one"}, "expected_answer": "A", "agent_ref": ref},
        {"responses_create_params": {"input": "two"}, "id": 3, "agent_ref": ref},
    ]
    assert f"hf:{repo}:train: 2 good rows" in result.output


@pytest.mark.usefixtures("offline_hub")
def test_an_unreachable_hub_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    result = _prepare("--hf", "nobody/no-such-dataset:test", "-a", "x", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "hf:nobody/no-such-dataset:test: cannot read the Hugging Face dataset" in result.output
    assert "HF_TOKEN" in result.output


def test_without_the_datasets_library_hf_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    result = _prepare("--hf", "nvidia/some-dataset", "-a", "x", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1 and "pip install 'gymbus[train]'" in result.output


def test_prepared_rows_decode_as_task_rows(tmp_path: Path) -> None:
    from gymbus.schemas import TaskRow

    mcqa = f"{EXAMPLES / 'mcqa.jsonl'}=mcqa_simple_agent"
    result = _prepare(str(EXAMPLES / "tool_environments.jsonl"), mcqa, "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    for line in (tmp_path / "train.jsonl").read_bytes().splitlines():
        assert msgspec.json.decode(line, type=TaskRow).agent_ref


def help_examples(doc: str, program: str = "gym-runner") -> list[list[str]]:
    """The commands a --help text shows, as argument lists (continued lines joined)."""
    commands, pending = [], ""
    for line in doc.splitlines():
        text = line.strip()
        if pending or text.startswith(f"{program} "):
            pending += text.removesuffix("\\").strip() + " "
            if not text.endswith("\\"):
                commands.append(shlex.split(pending)[1:])
                pending = ""
    return commands


def _runs_where_the_examples_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)


def test_every_example_in_the_help_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = help_examples(prepare_command.__doc__ or "")
    local = [args for args in examples if "--hf" not in args]
    assert len(examples) == 3 and len(local) == 2
    _runs_where_the_examples_are(tmp_path, monkeypatch)
    for args in local:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{shlex.join(args)}\n{result.output}"
        out = Path(args[args.index("-o") + 1])
        assert len(_lines(out / "train.jsonl")) >= 5 and "0 used" not in result.output


def test_the_commands_pages_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = (EXAMPLES.parent / "docs" / "commands.md").read_text()
    block = page.split("## prepare:")[1].split("```bash")[1].split("```")[0]
    [local] = [args for args in help_examples(block) if "--hf" not in args]
    _runs_where_the_examples_are(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, local)
    assert result.exit_code == 0, result.output
    assert "5 good rows, 0 bad; 5 used" in result.output


def test_balance_against_a_dataset_without_a_good_row_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "all_bad.jsonl"
    empty.write_text("{oops\n")
    out = tmp_path / "out"
    result = _prepare(f"{EXAMPLES / 'mcqa.jsonl'}=mcqa_simple_agent", str(empty), "--balance", "-o", str(out))
    assert result.exit_code == 1
    assert (
        f"--balance takes as many rows from each dataset as the smallest has, and {empty} has no good row "
        f"(1 bad, listed in {out / 'bad_rows.txt'}): fix its rows, leave it out, or drop --balance"
    ) in result.output
    assert not (out / "train.jsonl").exists()


def test_a_clean_dataset_leaves_no_bad_rows_file_and_one_row_reads_as_one(tmp_path: Path) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(_row("only") + "\n")
    out = tmp_path / "out"
    (out).mkdir()
    (out / "bad_rows.txt").write_text("an earlier run's bad row\n")

    result = _prepare(str(data), "--agent", "mcqa_simple_agent", "-o", str(out))

    assert result.exit_code == 0, result.output
    assert not (out / "bad_rows.txt").exists()
    assert "Stamped agent_ref on 1 row\n" in result.output and "(1 row;" in result.output
    assert "1 rows" not in result.output
