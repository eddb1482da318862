"""`gym-runner new-environment`: the package it writes passes its own tests (which run
`gym-runner check` on it), and `examples/shopping_list` is exactly what it writes."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gymbus.runner.scaffold import write_package

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "gymbus.runner"]


def test_the_written_package_passes_its_own_tests(tmp_path: Path) -> None:
    made = subprocess.run([*RUNNER, "new-environment", "shelf_tally", "--into", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    root = tmp_path / "shelf_tally"
    assert made.stdout.split() == [str(root / name) for name in (
        "pyproject.toml", "README.md", "shelf_tally/__init__.py", "shelf_tally/environment.py",
        "data/example.jsonl", "tests/test_environment.py",
    )]  # fmt: skip
    assert "pip install -e" in made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root, env=env, capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "5 passed" in tested.stdout


def test_a_bad_or_taken_name_or_an_existing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lowercase letters"):
        write_package("Shelf-Tally", tmp_path)
    with pytest.raises(ValueError, match="'mcqa' exists already, from GymBus's built-ins"):
        write_package("mcqa", tmp_path)
    (tmp_path / "shelf").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        write_package("shelf", tmp_path)


def test_the_example_in_the_repository_is_what_the_command_writes(tmp_path: Path) -> None:
    written = write_package("shopping_list", tmp_path)
    example = REPO / "examples" / "shopping_list"
    for path in written.files:
        relative = path.relative_to(written.root)
        assert (example / relative).read_text() == path.read_text(), (
            f"regenerate examples/shopping_list: {relative}"
        )
    kept = {
        p.relative_to(example) for p in example.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert kept == {p.relative_to(written.root) for p in written.files}


def test_files_and_modules_are_told_from_function_names() -> None:
    from gymbus.runner._sources import is_source

    assert [is_source(a) for a in ("mcqa", "my_env.py", "pkg.env", "dir/env", "nemo-gym:mcqa/x")] == [
        False, True, True, True, False,
    ]  # fmt: skip


GUIDE = REPO / "docs" / "own-environment.md"


def test_the_guides_install_brings_pytest_before_its_test_command(tmp_path: Path) -> None:
    guide = GUIDE.read_text()
    install, test = "pip install -e 'my_env[test]'", "python -m pytest my_env"
    assert install in guide and guide.index(install) < guide.index(test)
    pyproject = tomllib.loads(write_package("my_env", tmp_path).root.joinpath("pyproject.toml").read_text())
    assert any(dep.startswith("pytest") for dep in pyproject["project"]["optional-dependencies"]["test"])


def test_the_guide_says_how_cpu_bound_work_runs_as_the_field_does() -> None:
    guide = " ".join(GUIDE.read_text().split())
    assert "cpu_bound=True" in guide and "runs each of its calls in a thread of its own" in guide
    assert "process pool" not in guide  # cpu_bound's calls run in threads (functions/_spec.py), not processes


def test_the_guides_settings_are_read_as_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    import msgspec

    from gymbus.functions import settings

    class MyEnvSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        strict: bool = False

    assert 'settings(MyEnvSettings, "my_env")' in GUIDE.read_text()
    assert settings(MyEnvSettings, "my_env").strict is False
    monkeypatch.setenv("GYMBUS_MY_ENV", '{"strict": true}')
    assert settings(MyEnvSettings, "my_env").strict is True
