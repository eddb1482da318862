"""The fast lane's table names test files that exist: a moved file keeps its markers."""

from __future__ import annotations

from pathlib import Path

from tests.lanes import NEEDS, SLOW, markers_of

TESTS = Path(__file__).resolve().parent


def test_every_file_the_table_names_exists() -> None:
    assert [path for path in [*NEEDS, *SLOW] if not (TESTS / path).is_file()] == []


def test_what_needs_more_than_a_nats_server_is_slow() -> None:
    assert all("slow" in markers_of(path) for path in NEEDS)
    assert markers_of("bus/run/test_run_book.py") == ()
