"""The fast lane's table names test files that exist: a moved file keeps its markers."""

from __future__ import annotations

from pathlib import Path

from tests.lanes import NEEDS, SLOW, markers_of

TESTS = Path(__file__).resolve().parent


def test_every_file_and_test_the_table_names_exists() -> None:
    named = [entry.split("::") for entry in [*NEEDS, *SLOW]]
    assert [entry for entry in named if not (TESTS / entry[0]).is_file()] == []
    missing = [
        "::".join(entry) for entry in named
        if len(entry) == 2 and f"def {entry[1]}(" not in (TESTS / entry[0]).read_text()
    ]  # fmt: skip
    assert missing == []


def test_what_needs_more_than_a_nats_server_is_slow() -> None:
    assert all("slow" in markers_of(path) for path in NEEDS)
    assert markers_of("bus/run/test_run_book.py") == ()
