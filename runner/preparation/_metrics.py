"""NeMo Gym's dataset metrics (`gym dataset collate`'s `<type>_metrics.json`), computed
the same way, with the same names, layout and rounding.

    {
      "name": "train", "type": "train", "jsonl_fpath": "prepared/train.jsonl", "num_repeats": 1,
      "source": null, "gitlab_identifier": null, "huggingface_identifier": null, "license": null,
      "Number of examples": 5,
      "Number of tools": {"Total # non-null values": 5, "Average": 1.0, "Min": 1.0, "Max": 1.0,
                          "Standard deviation": 0.0},
      "Json-dumped number of words (proxy for token count)": {...},
      "Number of turns": {...},
      "Temperature": {...},
      "expected_answer": {"unique_count": 4, "total_count": 5},
      "difficulty": {"Total # non-null values": 5, "Average": 2.4, ...}
    }

Per row: the number of `responses_create_params.tools` (when it has a `tools` list), the
user messages of its `input` (a string input is one), its `temperature` (when set), and the
words of `json.dumps(responses_create_params)` split on whitespace. Every other top-level
field but `response` is summarised too: numbers (and booleans, as 0/1) as above, strings
by how many distinct values there are; a list counts each of its items; objects and
nulls are skipped. Standard deviations are the sample's (n - 1); values of 1 or more are
rounded to 2 decimals, smaller ones to 3.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .._metrics import Spread

__all__ = ["DatasetMetrics"]

_SKIPPED = ("responses_create_params", "response")


def _spread_json(spread: Spread) -> dict[str, Any]:
    n = spread.count
    return {
        "Total # non-null values": n,
        "Average": _round(spread.mean if n else 0.0),
        "Min": _round(spread.low if n else 0.0),
        "Max": _round(spread.high if n else 0.0),
        "Standard deviation": _round(spread.std),
    }


def _round(x: float) -> float:
    x = float(x)
    return round(x, 2) if abs(x) >= 1 else round(x, 3)


@dataclass
class DatasetMetrics:
    """The metrics of one output file; `add(row)` each row (decoded JSON object)."""

    examples: int = 0
    tools: Spread = field(default_factory=Spread)
    words: Spread = field(default_factory=Spread)
    turns: Spread = field(default_factory=Spread)
    temperature: Spread = field(default_factory=Spread)
    others: dict[str, Spread | Counter[str]] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        params = row.get("responses_create_params")
        params = params if isinstance(params, dict) else {}
        self.examples += 1
        if isinstance(params.get("tools"), list):
            self.tools.add(len(params["tools"]))
        users = _user_turns(params.get("input"))
        if users:
            self.turns.add(users)
        if isinstance(params.get("temperature"), int | float):
            self.temperature.add(params["temperature"])
        self.words.add(len(json.dumps(params).split()))
        for name, value in row.items():
            if name not in _SKIPPED:
                self._other(name, value)

    def _other(self, name: str, value: Any) -> None:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool | int | float):
                spread = self.others.setdefault(name, Spread())
                if isinstance(spread, Spread):  # a field seen first as text stays text
                    spread.add(float(item))
            elif isinstance(item, str):
                counts = self.others.setdefault(name, Counter())
                if isinstance(counts, Counter):
                    counts[item] += 1

    def as_json(self, name: str, kind: str, path: str) -> dict[str, Any]:
        """The metrics file's content for the output `path` of type `kind` (train, validation)."""
        described: dict[str, Any] = {
            "name": name, "type": kind, "jsonl_fpath": path, "num_repeats": 1, "source": None,
            "gitlab_identifier": None, "huggingface_identifier": None, "license": None,
            "Number of examples": self.examples,
            "Number of tools": _spread_json(self.tools),
            "Json-dumped number of words (proxy for token count)": _spread_json(self.words),
            "Number of turns": _spread_json(self.turns),
            "Temperature": _spread_json(self.temperature),
        }  # fmt: skip
        for other, summary in self.others.items():
            described[other] = (
                _spread_json(summary)
                if isinstance(summary, Spread)
                else {"unique_count": len(summary), "total_count": sum(summary.values())}
            )
        return described


def _user_turns(value: Any) -> int:
    if isinstance(value, str):
        return 1
    if isinstance(value, list):
        return sum(1 for item in value if isinstance(item, dict) and item.get("role") == "user")
    return 0
