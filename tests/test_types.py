"""The type checker runs as part of the suite (`py.typed` packages must type-check).

mypy reads modules by their path, and the repository's folders are installed under one
name (`gymbus.schemas` is `schemas/`, ...), which the editable install maps with an import
hook mypy cannot follow. So the check runs over a `gymbus/` tree of links to the folders:
the layout a built wheel has.
"""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "functions", "bus", "runner")


@pytest.mark.timeout(300)
def test_packages_type_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "gymbus"
    tree.mkdir()
    for package in PACKAGES:
        (tree / package).symlink_to(ROOT / package, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MYPYPATH", str(tmp_path))
    targets = [flag for package in PACKAGES for flag in ("-p", f"gymbus.{package}")]
    out, err, status = mypy_api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"), *targets]
    )
    assert status == 0, out + err
