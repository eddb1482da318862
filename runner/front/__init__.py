"""NeMo Gym's HTTP API in front of the bus (`gym-runner front`), and one conversation with
an agent (`gym-runner talk`)."""

from ._command import front_command, talk_command

__all__ = ["front_command", "talk_command"]
