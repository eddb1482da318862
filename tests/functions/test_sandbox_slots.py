"""Fair turns at a worker's sandbox slots (no sandbox needed: the scheduler alone)."""

from __future__ import annotations

import asyncio

from gymbus.functions.environments._sandbox_slots import Account, Slots


async def test_a_free_slot_goes_to_whoever_had_least_then_to_whoever_asked_first() -> None:
    slots = Slots(1, quantum=0.0)
    holder, veteran, first, second = Account(), Account(served=5.0), Account(), Account()
    order: list[str] = []

    async def wait(name: str, account: Account) -> None:
        async with slots.turn(account):
            order.append(name)

    async with slots.turn(holder):
        waiting = [asyncio.create_task(wait(n, a)) for n, a in [("veteran", veteran), ("first", first)]]
        waiting.append(asyncio.create_task(wait("second", second)))
        await asyncio.sleep(0.01)
        assert order == []  # one slot, held
    await asyncio.gather(*waiting)
    assert order == ["first", "second", "veteran"]


async def test_a_turn_is_handed_over_only_after_a_quantum_and_only_to_someone_who_had_less() -> None:
    slots = Slots(1, quantum=0.05)
    running, newcomer = Account(), Account()
    async with slots.turn(running) as turn:
        assert not turn.should_yield()  # nobody waits
        waiter = asyncio.create_task(slots.turn(newcomer).__aenter__())
        await asyncio.sleep(0)
        assert not turn.should_yield()  # someone waits, but the quantum has not passed
        await asyncio.sleep(0.06)
        assert turn.should_yield()
    await waiter
    assert running.served >= 0.05 and running.turns == 1


async def test_a_waiter_that_gives_up_leaves_no_slot_taken() -> None:
    slots = Slots(1, quantum=0.0)
    async with slots.turn(Account()):
        gives_up = asyncio.create_task(slots.turn(Account()).__aenter__())
        await asyncio.sleep(0)
        gives_up.cancel()
        await asyncio.gather(gives_up, return_exceptions=True)
    async with asyncio.timeout(1):
        async with slots.turn(Account()):
            assert slots.free == 0
    assert slots.free == 1
