"""`gym-runner check`: does an environment keep the protocol? For its author.

`_contract` is what an environment declares, `_check` calls it and judges each answer,
`_run` starts what a check needs (a bus, a worker) and reads the sample row, `_command` is
the CLI.
"""

from ._check import CheckItem, check_environment
from ._contract import EnvironmentContract

__all__ = ["CheckItem", "EnvironmentContract", "check_environment"]
