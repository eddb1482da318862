"""TRL's rollout function, over the bus: a trainer is one more client of the task queue.

    from trl import GRPOConfig, GRPOTrainer
    from gymbus.runner import BusRollouts, environment_reward, tasks_dataset

    rollouts = BusRollouts("nats://127.0.0.1:4222")
    trainer = GRPOTrainer(
        model=..., args=GRPOConfig(...), train_dataset=tasks_dataset(["weather.jsonl", "mcqa.jsonl"]),
        reward_funcs=environment_reward, rollout_func=rollouts,
    )

For each prompt of a batch (TRL repeats each `num_generations` times, consecutively) the
function finds the prompt's task row in the trainer's dataset, writes the trainer's
complete sampling parameters into its `responses_create_params` (`Sampling`: no
inference server's default may apply), and publishes it to its agent's durable task
queue (rows of several environments in one batch, each routed by its `agent_ref`). The
rewarded rollouts come back one per prompt, in order, as TRL 1.16's contract wants:
`prompt_ids`, `completion_ids` (model and environment tokens interleaved), `env_mask`
(1 for a model token, 0 for an environment token), `logprobs`, and for the reward
functions `env_reward` and `num_turns`.

A rollout that failed (the agent's failure row, no token ids, a prompt that does not
extend the previous turn) trains as a masked placeholder whose `env_reward` is `None`:
TRL leaves a row for which every reward function returns `None` out of its group's mean
and standard deviation and gives it no advantage, so the rollouts that succeeded get the
advantages their group alone would give (a reward function of your own must return
`None` where `env_reward` is `None`). Failures are counted: a warning per batch, the
metric `gymbus/failed_rollouts` in the trainer's logs, and `BusRollouts.failures`.

A batch in which every rollout failed, or any error in the rollout function, stops
every training process together: under `accelerate launch` the processes (ranks)
exchange their outcome after each batch, and all raise with the first failing rank's
reason, where otherwise the others would wait for it in a collective forever.

Before the first rollouts, the function checks where TRL's weight sync goes: with
`use_vllm` in server mode, `vllm_server_base_url` must be the one inference server of
every policy model the batch's agents call (as their model services list them), since
TRL's NCCL transfer reaches that one server only; colocated vLLM is refused (the bus's
rollouts never run on the trainer's own engine).

The policy's model function must capture token ids (the `vllm` function does); TRL and
torch are the trainer's dependencies and are never imported by this module.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import msgspec

from gymbus.bus import Bus, connect_bus, nats_url_from_env
from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    BusUnavailable,
    Limits,
    Rollout,
    Timeouts,
)

from ._batches import BatchTask, TaskBatches
from ._data import TaskIndex
from ._loop import LoopThread
from ._sampling import Sampling
from ._task_rows import task_for
from ._tokens import StitchError, TokenSequence, stitch

__all__ = ["BusRollouts", "Sampling", "environment_reward"]

log = logging.getLogger("gymbus.trainer")

_T = TypeVar("_T")
_rollout_decoder = msgspec.json.Decoder(Rollout)


def environment_reward(
    completions: list[Any], env_reward: list[float | None], **kwargs: Any
) -> list[float | None]:
    """A TRL reward function: each rollout's reward from its environment's verifier, `None`
    for a rollout that failed (TRL then leaves it out of its group's statistics)."""
    return [None if reward is None else float(reward) for reward in env_reward]


@dataclass(frozen=True)
class _Placeholder:
    failure_class: str
    message: str


class BusRollouts:
    """TRL's `rollout_func(prompts, trainer) -> dict`, running each rollout on the bus.

    `nats_url` defaults to `NATS_URL`; the agent workers, environments and policy model
    serve on that bus. `rollout_timeout` bounds each rollout (from its publish); a rollout
    still missing `grace` seconds later fails. Close it (or use it as a context manager)
    to drop the connection and its thread.
    """

    def __init__(
        self,
        nats_url: str | None = None,
        *,
        rollout_timeout: float = DEFAULT_TIMEOUTS.rollout,
        grace: float = DEFAULT_TIMEOUTS.result_grace,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        url = nats_url or nats_url_from_env()
        if url is None:
            raise BusUnavailable("no bus to send rollouts to: pass nats_url or set NATS_URL")
        self.url = url
        self.rollout_timeout = rollout_timeout
        self.grace = grace
        self.limits = limits
        self.timeouts = timeouts
        self.rollouts = 0
        """Rollouts run so far."""
        self.failures: Counter[str] = Counter()
        """Failed rollouts so far, by failure class."""
        self.last_rows: list[bytes] = []
        """The rollout rows of the last batch as the agents returned them, in prompt order
        (failure rows included), for logging or saving them."""
        self._loop: LoopThread | None = None
        self._bus: Bus | None = None
        self._batches: TaskBatches | None = None
        self._indexes: dict[int, tuple[Any, TaskIndex]] = {}
        self._sync_checked = False

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        outputs: dict[str, list[Any]] = {}
        error: Exception | None = None
        try:
            outputs = self._batch(prompts, trainer)
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it before any raises
            error = exc
        _stop_together(trainer, error)
        return outputs

    def _batch(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        training = _training(trainer)
        tasks = self._tasks(prompts, trainer, Sampling.of(trainer.args), training)
        batches = self._batches_of()
        if not self._sync_checked:
            servers = self._run(batches.model_servers({task.agent for task in tasks}))
            self._sync_checked = check_weight_sync(trainer.args, servers)
        rows = self._run(batches.run(tasks))
        return self._outputs(rows, trainer)

    def close(self) -> None:
        """Drain the connection and stop the thread that carries it."""
        if self._loop is None:
            return
        if self._bus is not None:
            self._loop.run(self._bus.close(self.timeouts))
        self._loop.stop()
        self._loop = self._bus = self._batches = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The task rows of a batch

    def _tasks(
        self, prompts: Sequence[Any], trainer: Any, sampling: Sampling, training: bool
    ) -> list[BatchTask]:
        repeats: Counter[int] = Counter()
        tasks = []
        for prompt in prompts:
            index, position, task = self._find(prompt, trainer)
            label = index.describe(position)
            tasks.append(task_for(task, label, position, repeats[position], sampling, training))
            repeats[position] += 1
        return tasks

    def _find(self, prompt: Any, trainer: Any) -> tuple[TaskIndex, int, str]:
        for dataset in _datasets(trainer):
            index = self._index(dataset)
            found = index.find(prompt)
            if found is not None:
                return index, *found
        raise ValueError(f"no task row in the trainer's datasets has the prompt {prompt!r:.200}")

    def _index(self, dataset: Any) -> TaskIndex:
        # Keyed by identity, holding the dataset so its id is not reused while indexed.
        entry = self._indexes.get(id(dataset))
        if entry is None:
            entry = self._indexes[id(dataset)] = (dataset, TaskIndex.of_dataset(dataset))
        return entry[1]

    # Running them

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:
            self._loop = LoopThread()
        return self._loop.run(work)

    def _batches_of(self) -> TaskBatches:
        if self._batches is None:
            self._bus = self._run(connect_bus(self.url, name="gymbus trainer", timeouts=self.timeouts))
            self._batches = TaskBatches(
                self._bus,
                rollout_timeout=self.rollout_timeout,
                grace=self.grace,
                limits=self.limits,
                timeouts=self.timeouts,
            )
        return self._batches

    # What TRL gets

    def _outputs(self, rows: list[bytes], trainer: Any) -> dict[str, list[Any]]:
        self.last_rows = rows
        sequences = [_sequence(row) for row in rows]
        failed = [one for one, _ in sequences if isinstance(one, _Placeholder)]
        self.rollouts += len(rows)
        self.failures.update(one.failure_class for one in failed)
        _report(failed, len(rows))
        _record(trainer, "gymbus/failed_rollouts", float(len(failed)))
        eos = _eos_id(trainer)
        out: dict[str, list[Any]] = {key: [] for key in _KEYS}
        for sequence, reward in sequences:
            if isinstance(sequence, _Placeholder):
                # One end-of-sequence token, masked: it adds no loss and no gradient.
                sequence = TokenSequence([eos], [eos], [0], [0.0], 0)
            out["prompt_ids"].append(sequence.prompt_ids)
            out["completion_ids"].append(sequence.completion_ids)
            out["env_mask"].append(sequence.env_mask)
            out["logprobs"].append(sequence.logprobs)
            out["env_reward"].append(reward)
            out["num_turns"].append(sequence.num_turns)
        _record(trainer, "gymbus/num_turns", sum(out["num_turns"]) / max(1, len(rows)))
        return out


_KEYS = ("prompt_ids", "completion_ids", "env_mask", "logprobs", "env_reward", "num_turns")


def _sequence(row: bytes) -> tuple[TokenSequence | _Placeholder, float | None]:
    """A rollout row as a token sequence and its reward; a failure as a placeholder with
    no reward."""
    try:
        rollout = _rollout_decoder.decode(row)
    except msgspec.DecodeError as exc:
        return _Placeholder("bad_result", f"the rollout row does not decode: {exc}"), None
    if isinstance(rollout.failure_class, str):
        message = rollout.failure_message if isinstance(rollout.failure_message, str) else ""
        return _Placeholder(rollout.failure_class, message), None
    if isinstance(rollout.response, msgspec.UnsetType):
        return _Placeholder("bad_result", "the rollout row has no response"), None
    try:
        return stitch(rollout.response.output), float(rollout.reward)
    except StitchError as exc:
        return _Placeholder(exc.failure_class, exc.message), None


def _report(failed: list[_Placeholder], total: int) -> None:
    """Warn about a batch's failed rollouts; raise if none succeeded."""
    if not failed:
        return
    counts = Counter(one.failure_class for one in failed)
    summary = ", ".join(f"{count} {name}" for name, count in counts.most_common())
    if len(failed) == total:
        # Nothing to learn from: TRL would divide the loss by zero masked-in tokens.
        raise RuntimeError(f"every rollout of the batch failed ({summary}); first: {failed[0].message}")
    log.warning(
        "%d of %d rollouts failed (%s) and train as masked placeholders, left out of their "
        "groups' statistics; first: %s",
        len(failed), total, summary, failed[0].message,
    )  # fmt: skip


def _stop_together(trainer: Any, error: Exception | None) -> None:
    """Raise on every training process if the rollout function failed on any, all with the
    first failing rank's reason (alone, its own error). A rank that raised alone would
    leave the others waiting for it in the step's collectives forever."""
    accelerator = getattr(trainer, "accelerator", None)
    processes = int(getattr(accelerator, "num_processes", 1) or 1)
    reason = None if error is None else f"{type(error).__name__}: {error}"
    if processes == 1:
        reasons = [reason]
    else:
        from accelerate.utils import gather_object  # the trainer's dependency (TRL's)

        reasons = gather_object([reason])
    failing = [(rank, text) for rank, text in enumerate(reasons) if text is not None]
    if not failing:
        return
    if error is not None and processes == 1:
        raise error
    rank, text = failing[0]
    raise RuntimeError(f"rank {rank} of {processes} stopped the rollouts: {text}") from error


def check_weight_sync(args: Any, servers: dict[str, set[str]]) -> bool:
    """Refuse (`ValueError`) a TRL weight sync that would miss a server the policy
    generates on; `servers` maps each policy model to its inference servers. Returns
    whether the check could be made (every model's servers were listed)."""
    if not getattr(args, "use_vllm", False):
        return True  # no sync: the servers keep the weights they started with
    if getattr(args, "vllm_mode", "server") != "server":
        raise ValueError(
            "vllm_mode='colocate' syncs the weights into the trainer's own vLLM engine, which the bus's "
            "rollouts never run on: serve the policy with vLLM and use vllm_mode='server'"
        )
    synced = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    target = _server_root(synced)
    for model, urls in sorted(servers.items()):
        roots = sorted({_server_root(url) for url in urls})
        if target not in roots:
            listed = ", ".join(roots) or "no inference server (its adapter calls none)"
            raise ValueError(
                f"the trainer syncs its weights to {synced} (vllm_server_base_url), but model `{model}`, "
                f"the policy its agents call, generates on {listed}: its rollouts would never see the "
                "trained weights"
            )
        if len(roots) > 1:
            others = ", ".join(root for root in roots if root != target)
            raise ValueError(
                f"TRL's NCCL weight sync reaches one server ({synced}), but model `{model}` also generates "
                f"on {others}, whose rollouts would come from the old weights: serve the policy from that "
                "one server (--model-url), or train asynchronously (BusRolloutWorker), whose LoRA adapters "
                "reach every server through the bus"
            )
    if not servers:
        log.warning("could not check where the weights go: no live service serves the agents' models yet")
    return bool(servers)


def _server_root(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


def _training(trainer: Any) -> bool:
    return bool(getattr(getattr(trainer, "model", None), "training", True))


def _datasets(trainer: Any) -> list[Any]:
    """The trainer's datasets, the one of its current mode first."""
    train = getattr(trainer, "train_dataset", None)
    evals = getattr(trainer, "eval_dataset", None)
    evals = list(evals.values()) if isinstance(evals, dict) else [evals]
    ordered = [train, *evals] if _training(trainer) else [*evals, train]
    return [dataset for dataset in ordered if dataset is not None]


def _eos_id(trainer: Any) -> int:
    processing = getattr(trainer, "processing_class", None)
    tokenizer = getattr(processing, "tokenizer", processing)
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


def _record(trainer: Any, name: str, value: float) -> None:
    """Add `value` to the trainer's metrics of this step. TRL averages each of its
    `_metrics` lists into its next log line; `trainer.log()` here would flush TRL's own
    metrics of the step early."""
    metrics = getattr(trainer, "_metrics", None)
    if isinstance(metrics, dict):
        mode = "train" if _training(trainer) else "eval"
        metrics[mode][name].append(value)
