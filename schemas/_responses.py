"""The subset of the OpenAI Responses API that GymBus reads and writes.

Items are one flat struct (`Item`) rather than a tagged union because NeMo Gym rows
may omit `"type"` on input messages (it then means `"message"`), and msgspec's tagged
unions need the tag. Every optional field defaults to `UNSET`, which is never encoded,
so a decoded item re-encodes to the same keys it came with.

Wire structs are `gc=False` (msgspec): they never form reference cycles, and a worker
holding thousands of rollouts in flight would otherwise spend much of its time in the
garbage collector walking them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

__all__ = [
    "ContentPart",
    "IncompleteDetails",
    "InputTokensDetails",
    "Item",
    "OutputTokensDetails",
    "Reasoning",
    "Response",
    "ResponsesCreateParams",
    "SummaryPart",
    "Tool",
    "Usage",
    "add_usage",
    "function_calls",
    "input_items",
    "item_text",
    "output_text",
]


class ContentPart(Struct, kw_only=True, gc=False):
    """One part of a message's content (`input_text`, `output_text`, `refusal`, images, files)."""

    type: str
    text: str | UnsetType = UNSET
    annotations: list[Any] | UnsetType = UNSET
    logprobs: list[Any] | None | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    image_url: str | None | UnsetType = UNSET
    file_id: str | None | UnsetType = UNSET
    file_url: str | UnsetType = UNSET
    file_data: str | UnsetType = UNSET
    filename: str | UnsetType = UNSET
    detail: str | UnsetType = UNSET


class SummaryPart(Struct, kw_only=True, gc=False):
    """One paragraph of a reasoning item's summary."""

    type: str = "summary_text"
    text: str


class Item(Struct, kw_only=True, gc=False):
    """Any conversation item: message, function_call, function_call_output or reasoning.

    `type` unset means a message (NeMo Gym's "easy input message"). `arguments` of a
    function call is a JSON *string*, as in the OpenAI API.

    The three token fields are NeMo Gym's training extension, all three or none, on the
    last output item of each model call (a model function with token capture sets them):
    `prompt_token_ids` is that call's whole prompt, `generation_token_ids` what it
    generated and `generation_log_probs` one logprob per generated token. Each call's
    prompt starts with the previous call's prompt + generation, so a rollout stitches
    into one sequence: the first prompt, then per call the prompt's new tokens (tool
    outputs, user turns, template markup; not trained) and its generation (trained).
    Items sent back as input keep them; tool outputs carry none. `policy_version`, beside
    them, is the version of the policy under training that generated the call (asynchronous
    training); NeMo Gym's models ignore it.
    """

    type: str | UnsetType = UNSET
    id: str | None | UnsetType = UNSET
    status: str | None | UnsetType = UNSET
    # message
    role: str | UnsetType = UNSET
    content: str | list[ContentPart] | None | UnsetType = UNSET
    # function_call
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET
    call_id: str | UnsetType = UNSET
    # function_call_output
    output: str | list[ContentPart] | UnsetType = UNSET
    # reasoning
    summary: list[SummaryPart] | UnsetType = UNSET
    encrypted_content: str | None | UnsetType = UNSET
    # training token ids (NeMo Gym `TokenIDLogProbMixin`)
    prompt_token_ids: list[int] | UnsetType = UNSET
    generation_token_ids: list[int] | UnsetType = UNSET
    generation_log_probs: list[float] | UnsetType = UNSET
    routed_experts: Any | UnsetType = UNSET
    # GymBus's training extension, beside the token ids: the policy version (the trainer's
    # adapter, `schemas._policy`) that generated this call; absent for a call that named none.
    policy_version: int | UnsetType = UNSET

    @property
    def kind(self) -> str:
        """The item type, with an absent type read as `"message"`."""
        return self.type if isinstance(self.type, str) else "message"


class Tool(Struct, kw_only=True, gc=False):
    """A tool offered to the model; function tools are flat as in the Responses API."""

    type: str = "function"
    name: str | UnsetType = UNSET
    description: str | None | UnsetType = UNSET
    parameters: dict[str, Any] | None | UnsetType = UNSET
    strict: bool | None | UnsetType = UNSET


class Reasoning(Struct, kw_only=True, gc=False):
    """Reasoning settings of a request."""

    effort: str | None | UnsetType = UNSET
    summary: str | None | UnsetType = UNSET
    generate_summary: str | None | UnsetType = UNSET


class ResponsesCreateParams(Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """NeMo Gym's `responses_create_params`: exactly the keys NeMo Gym accepts, no others.

    `input` is a string (one user message) or a list of items.
    """

    input: str | list[Item]
    instructions: str | None | UnsetType = UNSET
    max_output_tokens: int | None | UnsetType = UNSET
    max_tool_calls: int | None | UnsetType = UNSET
    metadata: dict[str, str] | None | UnsetType = UNSET
    model: str | None | UnsetType = UNSET
    parallel_tool_calls: bool | None | UnsetType = UNSET
    previous_response_id: str | None | UnsetType = UNSET
    prompt: dict[str, Any] | None | UnsetType = UNSET
    reasoning: Reasoning | None | UnsetType = UNSET
    service_tier: str | None | UnsetType = UNSET
    store: bool | None | UnsetType = UNSET
    temperature: float | None | UnsetType = UNSET
    text: dict[str, Any] | None | UnsetType = UNSET
    tool_choice: str | dict[str, Any] | None | UnsetType = UNSET
    tools: list[Tool] | UnsetType = UNSET
    top_logprobs: int | None | UnsetType = UNSET
    top_p: float | None | UnsetType = UNSET
    truncation: str | None | UnsetType = UNSET
    user: str | None | UnsetType = UNSET
    background: bool | None | UnsetType = UNSET
    include: list[str] | None | UnsetType = UNSET
    stream: Literal[False] | None | UnsetType = UNSET
    # Accepted by recent NeMo Gym releases (the Responses API's newer options). Objects are
    # kept as plain JSON: their shape changes between API versions and GymBus only forwards them.
    context_management: list[dict[str, Any]] | None | UnsetType = UNSET
    conversation: str | dict[str, Any] | None | UnsetType = UNSET
    moderation: dict[str, Any] | None | UnsetType = UNSET
    prompt_cache_key: str | None | UnsetType = UNSET
    prompt_cache_retention: str | None | UnsetType = UNSET
    safety_identifier: str | None | UnsetType = UNSET
    stream_options: dict[str, Any] | None | UnsetType = UNSET


class InputTokensDetails(Struct, kw_only=True, gc=False):
    cached_tokens: int | None = 0
    """`None` where a server left it null (some of NeMo Gym's stored rollouts); sums read it as 0."""


class OutputTokensDetails(Struct, kw_only=True, gc=False):
    reasoning_tokens: int | None = 0
    """`None` where a server left it null; sums read it as 0."""


class Usage(Struct, kw_only=True, gc=False):
    """Token counts of one model call, or summed over a rollout."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails = field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = field(default_factory=OutputTokensDetails)


class IncompleteDetails(Struct, kw_only=True, gc=False):
    """Why generation stopped early (`max_output_tokens`, `content_filter`)."""

    reason: str | None = None


class Response(Struct, kw_only=True, gc=False):
    """A Responses API response object.

    In a rollout, `output` holds only the generated items (not the prompt) and `usage`
    is summed over every model call of the rollout.
    """

    id: str
    object: str = "response"
    created_at: float
    model: str
    output: list[Item]
    status: str | None | UnsetType = UNSET
    incomplete_details: IncompleteDetails | None = None
    usage: Usage | None = None
    error: dict[str, Any] | None | UnsetType = UNSET
    instructions: str | None | UnsetType = UNSET
    max_output_tokens: int | None | UnsetType = UNSET
    parallel_tool_calls: bool | None | UnsetType = UNSET
    temperature: float | None | UnsetType = UNSET
    tool_choice: str | dict[str, Any] | None | UnsetType = UNSET
    tools: list[Tool] | UnsetType = UNSET
    top_p: float | None | UnsetType = UNSET


def input_items(params: ResponsesCreateParams) -> list[Item]:
    """The request's input as items: a string input is one user message."""
    if isinstance(params.input, str):
        return [Item(role="user", content=params.input)]
    return params.input


def item_text(item: Item) -> str:
    """The text of a message item: its string content or its text parts joined."""
    content = item.content
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(part.text for part in content if isinstance(part.text, str))


def output_text(response: Response) -> str:
    """Like the SDK's `Response.output_text`: all assistant `output_text` parts, joined."""
    return "".join(
        part.text
        for item in response.output
        if item.kind == "message" and isinstance(item.content, list)
        for part in item.content
        if part.type == "output_text" and isinstance(part.text, str)
    )


def function_calls(items: list[Item]) -> list[Item]:
    """The `function_call` items among `items`, in order."""
    return [item for item in items if item.kind == "function_call"]


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """The sum of two usages; `None` counts as zero."""
    if more is None:
        return total
    if total is None:
        return msgspec.structs.replace(more)
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        total_tokens=total.total_tokens + more.total_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=(total.input_tokens_details.cached_tokens or 0)
            + (more.input_tokens_details.cached_tokens or 0)
        ),
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=(total.output_tokens_details.reasoning_tokens or 0)
            + (more.output_tokens_details.reasoning_tokens or 0)
        ),
    )
