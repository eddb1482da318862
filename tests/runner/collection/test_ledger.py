"""The ledger's window: a slot taken is always given back, whatever order results come in."""

from __future__ import annotations

import asyncio
import time

from gymbus.runner.collection._ledger import Ledger


async def test_a_seq_settled_before_its_launch_is_not_launched_and_keeps_no_slot() -> None:
    ledger = Ledger(total=3, concurrency=1)
    assert ledger.settle(1)  # a result an interrupted run left on the bus
    assert await ledger.launch(1, 0, 1, "agent", timeout=60) is None
    entry = await asyncio.wait_for(ledger.launch(2, 0, 2, "agent", timeout=60), 1)
    assert entry is not None and ledger.in_flight == {2: entry}


async def test_settling_a_seq_twice_frees_its_slot_once_its_row_is_safe() -> None:
    ledger = Ledger(total=2, concurrency=1)
    await ledger.launch(0, 0, 0, "agent", timeout=60)
    assert ledger.settle(0) and not ledger.settle(0)
    assert ledger.in_flight == {}
    waiting = asyncio.create_task(ledger.launch(1, 0, 1, "agent", timeout=60))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # its result is still on the bus until its row is written
    ledger.free_settled()
    assert await asyncio.wait_for(waiting, 1) is not None


async def test_the_deadline_starts_when_the_slot_is_free() -> None:
    ledger = Ledger(total=2, concurrency=1)
    await ledger.launch(0, 0, 0, "agent", timeout=10)
    waiting = asyncio.create_task(ledger.launch(1, 0, 1, "agent", timeout=10))
    await asyncio.sleep(0.3)
    freed = time.time()
    ledger.settle(0)
    ledger.free_settled()
    entry = await asyncio.wait_for(waiting, 1)
    assert entry is not None and entry.deadline >= freed + 10


async def test_all_settled_once_every_seq_is() -> None:
    ledger = Ledger(total=2, concurrency=2)
    await ledger.launch(0, 0, 0, "agent", timeout=60)
    ledger.settle(0)
    assert not ledger.all_settled.is_set()
    ledger.settle(1)
    ledger.settle(1)
    assert ledger.all_settled.is_set() and ledger.settled == 2
