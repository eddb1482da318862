"""Task rows as the dataset a trainer reads, and the way back from a prompt to its row.

`tasks_dataset(path)` makes one dataset row per input line, with four columns:

    prompt  the row's prompt as chat messages (`[{"role": ..., "content": ...}]`), the
            conversational format TRL's GRPOTrainer expects and logs
    task    the whole input row as JSON, which the rollout function sends to an agent
    agent   the agent that runs it (`agent_ref.name`, or the default agent)
    origin  where the row comes from, `file:line`, for messages about it

TRL hands a rollout function only the prompts of a batch. `TaskIndex` finds each
prompt's task row again, by the prompt's exact content. Two rows with the same prompt
but different tasks could not be told apart that way, so such a dataset is refused
when it is made (naming both lines), not sampled wrongly during training.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gymbus.schemas import (
    AGENT_REF,
    InputError,
    Item,
    ResponsesCreateParams,
    TaskRow,
    input_items,
    item_text,
)

from .._input import check_row

__all__ = ["DuplicatePrompt", "TaskIndex", "prompt_key", "prompt_messages", "tasks_dataset"]

Message = dict[str, str]

_encode = msgspec.json.Encoder().encode
_params_decoder = msgspec.json.Decoder(TaskRow)
# Chat roles a chat template knows; the Responses API's `developer` is the system prompt.
_ROLES = {"developer": "system"}


def prompt_messages(params: ResponsesCreateParams) -> list[Message]:
    """A request's prompt as chat messages: `instructions` as the system message, each
    input message with its text, a function call as an assistant message holding the call
    as JSON, a function call's output as a tool message. Reasoning items are left out."""
    messages = [{"role": "system", "content": params.instructions}] if params.instructions else []
    for item in input_items(params):
        message = _message(item)
        if message is not None:
            messages.append(message)
    return messages


def _message(item: Item) -> Message | None:
    kind = item.kind
    if kind == "message":
        role = item.role if isinstance(item.role, str) else "user"
        return {"role": _ROLES.get(role, role), "content": item_text(item)}
    if kind == "function_call":
        call = {"name": item.name or "", "arguments": item.arguments or ""}
        return {"role": "assistant", "content": json.dumps(call)}
    if kind == "function_call_output":
        output = item.output
        text = output if isinstance(output, str) else item_text(Item(content=output or []))
        return {"role": "tool", "content": text}
    return None


def prompt_key(prompt: Any) -> bytes:
    """A digest of a prompt's exact content (chat messages, or text), the same for equal
    prompts whatever the order of their keys."""
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class DuplicatePrompt(ValueError):
    """Rows `first` and `second` (0-based) have the same prompt but different tasks."""

    def __init__(self, first: int, second: int) -> None:
        super().__init__(f"rows {first} and {second} have the same prompt but different tasks")
        self.first = first
        self.second = second


class TaskIndex:
    """Which task row a prompt belongs to. Holds a digest and a position per distinct
    prompt; the task itself stays in the dataset it was built from."""

    def __init__(
        self, prompts: Sequence[Any], tasks: Sequence[str], origins: Sequence[str] | None = None
    ) -> None:
        self.prompts = prompts
        self.tasks = tasks
        self.origins = origins
        self.positions: dict[bytes, int] = {}
        for position, prompt in enumerate(prompts):
            first = self.positions.setdefault(prompt_key(prompt), position)
            if first != position and tasks[first] != tasks[position]:
                raise DuplicatePrompt(first, position)

    @classmethod
    def of_dataset(cls, dataset: Any) -> TaskIndex:
        """The index of a dataset with `prompt` and `task` columns (a `datasets.Dataset`,
        or anything whose `[column]` gives a sequence)."""
        try:
            origins = dataset["origin"] if "origin" in getattr(dataset, "column_names", ()) else None
            return cls(dataset["prompt"], dataset["task"], origins)
        except (KeyError, ValueError) as exc:
            if isinstance(exc, DuplicatePrompt):
                raise
            raise ValueError(
                "the trainer's dataset needs `prompt` and `task` columns: make it with "
                "gymbus.runner.tasks_dataset(path)"
            ) from None

    def find(self, prompt: Any) -> tuple[int, str] | None:
        """`(position, task row JSON)` of `prompt`, or `None` if no row has this prompt."""
        position = self.positions.get(prompt_key(prompt))
        if position is None:
            return None
        return position, self.tasks[position]

    def describe(self, position: int) -> str:
        """How a message names the row at `position`: its file and line where known."""
        where = f" ({self.origins[position]})" if self.origins is not None else ""
        return f"task row {position} of the trainer's dataset{where}"


def read_tasks(path: Path, agent: str | None = None) -> tuple[list[str], list[str], list[int]]:
    """Every row of a NeMo Gym/GymBus JSONL as `(tasks, agents, line numbers)`; a row without
    `agent_ref` gets `agent`'s. A bad row is an `InputError` naming file, line and field."""
    tasks, agents, lines = [], [], []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line:
                continue
            checked = check_row(line, str(path), number)
            name = checked.agent or agent
            if name is None:
                raise InputError(
                    "missing, and no default agent was given", path=str(path), line=number, field=AGENT_REF
                )
            fields = checked.fields
            if checked.agent is None:
                fields[AGENT_REF] = msgspec.Raw(_encode({"type": "responses_api_agents", "name": name}))
            tasks.append(_encode(fields).decode())
            agents.append(name)
            lines.append(number)
    return tasks, agents, lines


Source = Path | str | tuple[Path | str, str | None]
"""A JSONL file, or `(file, agent)`: the agent of that file's rows without `agent_ref`."""


def tasks_dataset(sources: Source | Iterable[Source], agent: str | None = None) -> Any:
    """A `datasets.Dataset` of the rows of one or more JSONL files (several files blend
    several environments), with the columns `prompt`, `task` and `agent` (module
    docstring). A row without `agent_ref` gets its file's agent, else `agent`.

    Raises `InputError` for a bad row, or for two rows with the same prompt but different
    tasks (naming both lines).
    """
    from datasets import Dataset  # the trainer's dependency, not the runner's

    listed = [sources] if isinstance(sources, (str, Path, tuple)) else list(sources)
    tasks: list[str] = []
    agents: list[str] = []
    origins: list[tuple[Path, int]] = []
    for source in listed:
        path, default = (
            (Path(source[0]), source[1] or agent) if isinstance(source, tuple) else (Path(source), agent)
        )
        more, names, lines = read_tasks(path, default)
        tasks += more
        agents += names
        origins += [(path, line) for line in lines]
    prompts = [prompt_messages(_params_decoder.decode(task).responses_create_params) for task in tasks]
    try:
        TaskIndex(prompts, tasks)
    except DuplicatePrompt as exc:
        (first_path, first_line), (path, line) = origins[exc.first], origins[exc.second]
        raise InputError(
            f"same prompt as {first_path}:{first_line} but a different task; the rollout function, "
            "which the trainer gives only prompts, could not tell them apart",
            path=str(path),
            line=line,
            field="responses_create_params.input",
        ) from None
    origin = [f"{path}:{line}" for path, line in origins]
    return Dataset.from_dict({"prompt": prompts, "task": tasks, "agent": agents, "origin": origin})
