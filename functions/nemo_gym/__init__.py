"""NeMo Gym's resources servers, unchanged, as GymBus environments.

`open_server("mcqa", models)` builds (or reuses) the server's virtual environment, starts
it standalone on a loopback port (no head server, no Ray cluster), and yields a
`HostedEnvironment` whose seed, tool and verify functions POST to it, keeping each
rollout's NeMo Gym session on the replica that seeded it (`SessionElsewhere` tells the
host to forward a call there). Its judges reach GymBus models through loopback shims.
Plain async code: `bus` hosts it like any environment.
"""

from ._hosted import (
    PREFIX,
    SUPPORTED_AGENTS,
    HostedEnvironment,
    ServerOutline,
    environment_name,
    is_nemo_gym,
    locate,
    open_server,
    outline,
    prepare,
)
from ._proxy import SessionElsewhere, SessionRecord
from ._python import PYTHON_VARIABLE, find_python
from ._venv import HOME_VARIABLE, NEMO_GYM_VERSION, home, requirements_of, virtual_env

__all__ = [
    "HOME_VARIABLE",
    "NEMO_GYM_VERSION",
    "PREFIX",
    "PYTHON_VARIABLE",
    "SUPPORTED_AGENTS",
    "HostedEnvironment",
    "SessionElsewhere",
    "ServerOutline",
    "SessionRecord",
    "environment_name",
    "find_python",
    "home",
    "is_nemo_gym",
    "locate",
    "open_server",
    "outline",
    "prepare",
    "requirements_of",
    "virtual_env",
]
