"""`gym-runner verify`: re-score stored rollouts with today's verifiers.

`_verify` sends each row to its environment's verify subject and writes the rescored rows in
input order, `_rescore` reads stored rows and compares rewards, `_join` joins rollouts with
the input rows they came from, `_command` is the CLI.
"""

from ._verify import VerifyOptions, VerifyPaths, VerifyReport, verify_rollouts

__all__ = ["VerifyOptions", "VerifyPaths", "VerifyReport", "verify_rollouts"]
