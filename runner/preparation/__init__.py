"""`gym-runner prepare`: validate, blend, shuffle and split datasets, with NeMo Gym's metrics.

`_sources` reads each dataset (a JSONL or a Hugging Face dataset), `_prepare` blends and
splits them, `_metrics` computes the dataset metrics, `_command` is the CLI.
"""

from ._prepare import PrepareOptions, PrepareReport, prepare

__all__ = ["PrepareOptions", "PrepareReport", "prepare"]
