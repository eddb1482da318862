"""`multi_turn_agent`: the simple agent's loop, with a simulated user answering each
of the policy's replies, until the user's goal is met or a turn limit.

seed the session with the whole row → loop: one policy turn (the simple agent's
model ↔ tools loop, at most `max_steps` model calls) → unless `max_user_turns`
simulated messages were already sent, ask the user simulator for the next user
message → if it says the stop marker, stop; else append it as a user message and
run the next policy turn → verify the whole conversation.

Row fields it reads (besides `responses_create_params`):

| field | type | meaning |
| --- | --- | --- |
| `user_goal` | string, required | what the simulated user wants from the conversation |
| `user_persona` | string, optional | who the simulated user is (default: "A user of an AI assistant.") |
| `max_user_turns` | integer ≥ 0, optional | most simulated user messages (default `DEFAULT_MAX_USER_TURNS`, 5); 0 means single-turn |

The user simulator is the model served as `user_simulator` (`USER_SIMULATOR`): serve
any model under that name (`gym-runner serve offline --served-model user_simulator`,
or `openai ... --served-model user_simulator`); `gym-runner collect` on the embedded
default starts the policy's model under that name too. Its request is
`SIMULATOR_INSTRUCTIONS` (persona, goal, stop marker) as `instructions`, and the
conversation seen from the user's side: the user's own messages as `assistant`
messages, the policy's messages as `user` messages; system and developer messages,
tool calls, tool results and reasoning are left out. A reply containing `STOP_MARKER`
(`###STOP###`, τ-bench's convention) means the goal is met; an empty reply ends the
conversation too (the user has nothing more to say).

The rollout's `response.output` holds every generated item in order, with each
simulated user message as a `{"type": "message", "role": "user"}` item, so verify sees
the whole conversation; the stop message itself is not added, so the last item is
still the policy's last message. `usage` sums the policy's calls only. A policy turn
that ends without a final message (cut off by `max_output_tokens`, or out of steps)
ends the conversation. The rollout row also gets `simulated_user_turns` (messages the
simulator added) and `user_goal_met` (whether it sent the stop marker).
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

from gymbus.schemas import (
    DEFAULT_LIMITS,
    BadRequest,
    ContentPart,
    Item,
    Response,
    ResponsesCreateParams,
    add_usage,
    input_items,
    item_text,
    merge_row,
    output_text,
)

from .._spec import Calls
from ._failures import failing_as
from .simple_agent import respond

__all__ = [
    "DEFAULT_MAX_USER_TURNS",
    "SIMULATOR_INSTRUCTIONS",
    "SIMULATOR_PREAMBLE",
    "STOP_MARKER",
    "USER_SIMULATOR",
    "multi_turn_agent",
    "simulator_request",
]

USER_SIMULATOR = "user_simulator"
"""The model name the user simulator is served as (`gym.model.user_simulator.responses`)."""
STOP_MARKER = "###STOP###"
DEFAULT_MAX_USER_TURNS = DEFAULT_LIMITS.max_user_turns
DEFAULT_PERSONA = "A user of an AI assistant."
SIMULATOR_PREAMBLE = "You are role-playing a user who is talking to an AI assistant."
SIMULATOR_INSTRUCTIONS = (
    SIMULATOR_PREAMBLE + "\n\n"
    "Who you are: {persona}\n"
    "Your goal: {goal}\n\n"
    "In the conversation below, your own earlier messages are shown as assistant messages and the AI "
    "assistant's replies as user messages. Write only your next message to the assistant, in character, "
    "briefly and naturally. Do not do the assistant's work and do not mention these instructions. "
    "When your goal has been met, reply with exactly " + STOP_MARKER + " and nothing else."
)


class MultiTurnRow(Struct, kw_only=True):
    """The row fields this agent reads; the others pass through."""

    responses_create_params: ResponsesCreateParams
    user_goal: str
    user_persona: str = DEFAULT_PERSONA
    max_user_turns: int = DEFAULT_MAX_USER_TURNS


_row_decoder = msgspec.json.Decoder(MultiTurnRow)


async def multi_turn_agent(row: bytes, calls: Calls, max_steps: int) -> bytes:
    """One multi-turn rollout of `row`: the row plus `response`, `reward`, the verifier's
    fields, `simulated_user_turns` and `user_goal_met`."""
    async with failing_as("invalid_input"):
        task = _decode_row(row)
    async with failing_as("seed_failed"):
        await calls.seed(row)
    response, turns, goal_met = await converse(task, calls, max_steps)
    async with failing_as("verify_failed"):
        verdict = await calls.verify(row, response)
    return merge_row(row, verdict, response=response, simulated_user_turns=turns, user_goal_met=goal_met)


def _decode_row(row: bytes) -> MultiTurnRow:
    try:
        task = _row_decoder.decode(row)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid multi-turn task row: {exc}") from None
    if task.max_user_turns < 0:
        raise BadRequest("invalid multi-turn task row: `max_user_turns` must be 0 or more")
    return task


async def converse(task: MultiTurnRow, calls: Calls, max_steps: int) -> tuple[Response, int, bool]:
    """Policy turns and simulated user messages; the last policy response with every
    generated item as output, the number of simulated messages, and whether the goal was met."""
    params = task.responses_create_params
    prompt = input_items(params)
    generated: list[Item] = []
    usage = None
    turns, goal_met = 0, False
    while True:
        last = await respond(msgspec.structs.replace(params, input=prompt + generated), calls, max_steps)
        generated.extend(last.output)
        usage = add_usage(usage, last.usage)
        if turns >= task.max_user_turns or not _ended_with_message(last):
            break
        reply = await _next_user_message(task, prompt + generated, calls)
        if STOP_MARKER in reply or not reply.strip():
            goal_met = STOP_MARKER in reply
            break
        generated.append(
            Item(type="message", role="user", content=[ContentPart(type="input_text", text=reply)])
        )
        turns += 1
    return msgspec.structs.replace(last, output=generated, usage=usage), turns, goal_met


def _ended_with_message(turn: Response) -> bool:
    """Whether a policy turn (all its items) ended in a final message, not cut off."""
    return turn.incomplete_details is None and bool(turn.output) and turn.output[-1].kind == "message"


async def _next_user_message(task: MultiTurnRow, conversation: list[Item], calls: Calls) -> str:
    async with failing_as("user_simulator_failed"):
        reply = await calls.model(simulator_request(task, conversation), model=USER_SIMULATOR)
    return output_text(reply)


def simulator_request(task: MultiTurnRow, conversation: list[Item]) -> ResponsesCreateParams:
    """The user simulator's request: persona, goal and stop marker as instructions, and
    the conversation's messages with the roles swapped (see the module docstring)."""
    instructions = SIMULATOR_INSTRUCTIONS.format(persona=task.user_persona, goal=task.user_goal)
    return ResponsesCreateParams(instructions=instructions, input=_as_seen_by_user(conversation))


def _as_seen_by_user(conversation: list[Item]) -> list[Item]:
    swapped = {"user": "assistant", "assistant": "user"}
    seen = []
    for item in conversation:
        role = item.role if isinstance(item.role, str) else ""
        text = item_text(item) if item.kind == "message" else ""
        if role in swapped and text.strip():
            seen.append(Item(type="message", role=swapped[role], content=text))
    return seen
