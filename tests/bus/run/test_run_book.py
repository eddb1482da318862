"""The run's bookkeeping: each submitted task ends once, and each end is named once."""

from __future__ import annotations

import msgspec

from gymbus.bus import RunBook, unserved_row
from gymbus.schemas import FAILURE_CLASS, FAILURE_MESSAGE, REWARD, TASK_INDEX


def _fields(row: bytes) -> dict[str, object]:
    return msgspec.json.decode(row)


def test_a_result_settles_its_task_once() -> None:
    book = RunBook(grace=5)
    entry = book.submitted(3, deadline=100.0)
    assert book.settle(3) == entry
    assert book.settle(3) is None  # a redelivered task that ran twice
    assert book.given_up(3, deliveries=4) is None and book.expired(now=1e9) == []


def test_a_task_never_submitted_has_no_end() -> None:
    book = RunBook(grace=5)
    assert book.settle(7) is None and book.given_up(7, deliveries=2) is None


def test_a_given_up_task_ends_as_a_failure_that_names_it_and_its_deliveries() -> None:
    book = RunBook(grace=5)
    book.submitted(0, deadline=100.0, row=b'{"x": 1}', **{TASK_INDEX: 9})
    row = book.given_up(0, deliveries=4)
    assert row is not None
    fields = _fields(row)
    assert fields[FAILURE_CLASS] == "deliveries_exhausted" and fields[REWARD] == 0.0
    assert "delivered 4 times" in str(fields[FAILURE_MESSAGE])
    assert fields["x"] == 1 and fields[TASK_INDEX] == 9
    assert book.settle(0) is None  # its result, if it comes after all, is a duplicate


def test_a_task_expires_only_after_its_deadline_and_the_grace() -> None:
    book = RunBook(grace=5)
    book.submitted(0, deadline=100.0)
    book.submitted(1, deadline=200.0)
    assert book.expired(now=104.0) == []
    ended = book.expired(now=106.0)
    assert [seq for seq, _ in ended] == [0]
    assert _fields(ended[0][1])[FAILURE_CLASS] == "deadline_exceeded"
    assert list(book.in_flight) == [1]
    assert [seq for seq, _ in book.expire_all()] == [1] and not book.in_flight


def test_an_unserved_task_names_its_subject_and_how_to_serve_it() -> None:
    fields = _fields(unserved_row(b'{"x": 1}', "weather_agent"))
    assert fields[FAILURE_CLASS] == "no_worker"
    assert fields[FAILURE_MESSAGE] == (
        "no worker serves gym.agent.weather_agent.run: start one with `gym-runner serve weather_agent`"
    )
