"""`secure init` in a git working tree: its private keys never reach a commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gymbus.runner.security._secure import secure_init


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True).stdout


def test_git_add_all_in_a_working_tree_commits_no_key(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    layout = secure_init(tmp_path / "bus-secrets", ["example_single_tool_call"], [], ["policy"])
    assert layout.credentials, "secure init wrote no credentials to test"
    _git(tmp_path, "add", ".")
    staged = _git(tmp_path, "diff", "--cached", "--name-only")
    assert staged == "", f"git add . staged what secure init wrote: {staged}"
    assert (tmp_path / "bus-secrets" / ".gitignore").read_text().splitlines()[-1] == "*"
