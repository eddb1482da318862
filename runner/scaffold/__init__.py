"""`gym-runner new-environment`: a new environment package to start from."""

from ._command import new_environment_command
from ._scaffold import Scaffold, write_package

__all__ = ["Scaffold", "new_environment_command", "write_package"]
