"""What an inference server's error status means, the same for every model adapter.

408, 409, 429 and every 5xx are transient: the agent's call layer retries them with
backoff. A 400 whose message says the prompt does not fit (the context length, or the
room left for `max_tokens`) is a context overflow: the rollout ends as an incomplete
response that is still verified, as NeMo Gym's adapters do. Any other 4xx is the
request's own fault.
"""

from __future__ import annotations

__all__ = ["is_context_overflow", "is_transient"]

_TRANSIENT = frozenset({408, 409, 429})
_CONTEXT_OVERFLOW = ("context length", "context_length", "maximum context", "too many tokens", "max_tokens")


def is_transient(status: int) -> bool:
    """Whether a request that got `status` may succeed if sent again later."""
    return status in _TRANSIENT or status >= 500


def is_context_overflow(status: int, message: str) -> bool:
    """Whether `status` and its error `message` say the prompt does not fit the model's context."""
    text = message.lower()
    return status == 400 and any(marker in text for marker in _CONTEXT_OVERFLOW)
