"""`shopping_list`: a shopping list the model keeps for the user.

Tools (each takes a JSON object, answers one):

- `add_item {"item": "milk"}` → `{"items": [...]}`: puts an item on this rollout's list
- `list_items {}` → `{"items": [...]}`: the list so far

Reward: 1.0 iff the list holds exactly the row's `expected_items` (in any order, case
ignored) when the rollout ends, else 0.0.

The list is per-session state (`Session.load`/`save`): on the bus it lives in a key-value
store keyed by the rollout's session, so any replica of this environment serves any call of
any rollout. Seeding starts an empty list (or the row's `initial_items`).

Verify reads the list from the rollout's `response` (each tool answers the whole list), not
from the session: the session is gone once a rollout is stored, and `gym-runner verify`
re-scores stored rollouts, each in a fresh session, to the same reward.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

from gymbus.functions import (
    BadRequest,
    Environment,
    SeedRequest,
    Session,
    VerifyRequest,
    VerifyResult,
    tool,
)


class ShoppingList(Struct, kw_only=True):
    """What a session keeps."""

    items: list[str]


class ListSeedRequest(SeedRequest, kw_only=True):
    """The row's fields the seed reads (the rest of the row passes through untouched)."""

    initial_items: list[str] = []


class AddItem(Struct, kw_only=True):
    """The arguments of `add_item`: its JSON Schema is what the model is offered."""

    item: str


class NoArguments(Struct, kw_only=True):
    pass


class ListVerifyRequest(VerifyRequest, kw_only=True):
    """The row (with the rollout's `response`) fields verify reads."""

    expected_items: list[str]
    initial_items: list[str] = []


class ListVerdict(VerifyResult, kw_only=True):
    """The reward, and what the list held: it goes into the rollout row beside `reward`."""

    final_items: list[str]


async def seed(request: ListSeedRequest, session: Session) -> None:
    """Start this rollout's list (a seed called again for one session keeps what it has)."""
    if await session.load(ShoppingList) is None:
        await session.save(ShoppingList(items=list(request.initial_items)))


async def current(session: Session) -> ShoppingList:
    return await session.load(ShoppingList) or ShoppingList(items=[])


async def add_item(args: AddItem, session: Session) -> ShoppingList:
    """Put `args.item` on the list. An empty item is refused: the model reads the error."""
    item = args.item.strip()
    if not item:
        raise BadRequest("item must not be empty")
    shopping = await current(session)
    shopping.items.append(item)
    await session.save(shopping)
    return shopping


async def list_items(args: NoArguments, session: Session) -> ShoppingList:
    """The list so far."""
    return await current(session)


def _normalised(items: list[str]) -> list[str]:
    return sorted(item.strip().lower() for item in items)


def final_list(request: ListVerifyRequest) -> list[str]:
    """The list as the rollout left it, rebuilt from its `response`: the last tool output
    that is a list, else the row's `initial_items`. A tool's error (`{"error": ...}`)
    changed nothing, so it is passed over."""
    for item in reversed(request.response.output):
        if item.type == "function_call_output" and isinstance(item.output, str):
            try:
                return msgspec.json.decode(item.output, type=ShoppingList).items
            except msgspec.DecodeError:
                continue
    return list(request.initial_items)


async def verify(request: ListVerifyRequest, session: Session) -> ListVerdict:
    """Reward 1.0 iff the final list equals `expected_items`, ignoring order and case. It
    reads no session state: a stored rollout re-verifies (`gym-runner verify`)."""
    final = final_list(request)
    reward = float(_normalised(final) == _normalised(request.expected_items))
    return ListVerdict(reward=reward, final_items=final)


ENVIRONMENT = Environment(
    name="shopping_list",
    tools=(tool(add_item), tool(list_items)),
    seed=seed,
    seed_request=ListSeedRequest,
    verify=verify,
    verify_request=ListVerifyRequest,
    # The agent datasets name in `agent_ref`: GymBus's simple agent (NeMo Gym's loop) over
    # this environment, for at most `max_steps` model calls a rollout.
    agents=("shopping_list_simple_agent",),
    max_steps=8,
    description="A shopping list the model keeps: add_item, list_items; rewarded for the right items.",
)
