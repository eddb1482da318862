"""Verifying a rollout of a Gymnasium-style NeMo Gym server: its episode, replayed.

NeMo Gym's `GymnasiumServer`s (`blackjack`, `wordle`, `example_multi_turn_gymnasium`, ...)
have no `/verify`: the reward is the sum of what `/step` returns while `gymnasium_agent`
plays the episode. So a stored rollout is verified again the way it was earned: `/reset`
with its row, in a fresh session, then one `/step` per model turn of its `response.output`
(the agent appended each turn's items, then the tool outputs and observations the step
returned: function-call outputs and user messages, which are not the model's), summing
the rewards until the episode ends. The reply has the fields `gymnasium_agent` returns:
`reward`, `terminated`, `truncated` (also when the turns ran out first) and `info`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gymbus.schemas import BadRequest

from ._http import ServerClient

__all__ = ["RUN_OUTPUTS", "model_turns", "replay"]

RUN_OUTPUTS = frozenset(
    {"response", "reward", "terminated", "truncated", "info", "mask_sample", "failure_kind", "failure_reason"}
)
"""What `gymnasium_agent` adds to a row: none of it goes back to `/reset` or `/step`."""
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode = msgspec.json.Encoder().encode


class _Step(msgspec.Struct):
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = {}


def model_turns(output: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The model's turns in a rollout's output: runs of items the model generated, split
    where the agent appended a tool output or a user message."""
    turns: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for item in output:
        added = item.get("type") == "function_call_output" or (
            item.get("role") == "user" and item.get("type", "message") == "message"
        )
        if added:
            if current:
                turns.append(current)
            current = []
        else:
            current.append(item)
    if current:
        turns.append(current)
    return turns


async def replay(
    client: ServerClient, body: bytes, complete: Any, timeout: float, deadline: float | None
) -> bytes:
    """The reward the server gives `body`'s episode, replayed (see the module).
    `complete(response, params)` fills in what NeMo Gym requires of a response."""
    try:
        fields = _fields.decode(body)
        response = msgspec.json.decode(fields["response"], type=dict[str, Any])
        params = msgspec.json.decode(fields.get("responses_create_params", b"{}"), type=dict[str, Any])
    except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadRequest(f"a Gymnasium rollout to verify needs its row and `response`: {exc}") from None
    row = {key: value for key, value in fields.items() if key not in RUN_OUTPUTS}
    reset = await client.post("/reset", _encode(row), None, timeout, deadline)
    cookie = reset.cookie
    total, step = 0.0, _Step(truncated=True)
    for turn in model_turns(list(response.get("output") or [])):
        played = {**response, "output": turn}
        complete(played, params)
        reply = await client.post("/step", _encode({**row, "response": played}), cookie, timeout, deadline)
        cookie = reply.cookie or cookie
        step = msgspec.json.decode(reply.body, type=_Step)
        total += step.reward
        if step.terminated or step.truncated:
            break
    else:
        step.truncated = True  # the turns ran out before the episode ended, as the agent marks it
    ended = {"terminated": step.terminated, "truncated": step.truncated, "info": step.info}
    return _encode({"reward": total, **ended})
