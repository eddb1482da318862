"""Python runs this at start-up in a process the tests start with this directory on
`PYTHONPATH` (and the repository root, for `tests`): it installs the tests' stand-ins for
TRL's two CUDA assumptions (`tests/trl_cpu.py`), so an unchanged training script such as
`examples/trl/train_async.py` trains on a CPU. The tests only; nothing else loads it."""

from tests import trl_cpu

trl_cpu.install()
