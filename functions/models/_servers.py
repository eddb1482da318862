"""Several inference servers behind one model function: each rollout sticks to one of them
(its prompt prefix stays in that server's cache), rollouts spread over all of them, and a
server that stops answering hands its rollouts to the others until it is back.

Rendezvous hashing: a rollout's servers, in order, are sorted by a hash of (rollout key,
server URL). Every rollout's first choice is spread evenly, and when a server is skipped
only its own rollouts move, each to its own second choice.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

__all__ = ["Servers"]


class Servers:
    """Base URLs, in the order a rollout should try them, and which ones failed recently."""

    def __init__(self, urls: list[str], cooldown: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ValueError("no model server URL given")
        self.urls = urls
        self.cooldown = cooldown
        self.clock = clock
        self.down_until: dict[str, float] = {}

    def order(self, key: str) -> list[str]:
        """Every server, in the order the rollout `key` tries them: its own ranking, servers
        that failed within the cooldown last."""
        ranked = sorted(self.urls, key=lambda url: _score(key, url), reverse=True)
        now = self.clock()
        return sorted(ranked, key=lambda url: self.down_until.get(url, 0.0) > now)

    def failed(self, url: str, cooldown: float | None = None) -> None:
        """`url` did not answer (or cannot serve the call): send rollouts elsewhere for
        `cooldown` seconds (by default the one the servers were made with)."""
        self.down_until[url] = self.clock() + (self.cooldown if cooldown is None else cooldown)

    def answered(self, url: str) -> None:
        self.down_until.pop(url, None)


def _score(key: str, url: str) -> bytes:
    return hashlib.blake2b(f"{key}\n{url}".encode(), digest_size=8).digest()
