"""NeMo Gym's resources servers and agents, unchanged, as GymBus environments and agents.

`open_server("mcqa", models)` builds (or reuses) the server's virtual environment, starts
it standalone on a loopback port (no head server, no Ray cluster), and yields a
`HostedEnvironment` whose seed, tool and verify functions POST to it, keeping each
rollout's NeMo Gym session on the replica that seeded it (`SessionElsewhere` tells the
host to forward a call there). Its judges reach GymBus models through loopback shims. The
agents its config declares are GymBus's simple agent, or NeMo Gym's own agent servers
(`gymnasium_agent`, `tool_simulation_agent`, ...) run unchanged, whose calls reach the
environment and the models on the bus through loopback shims.
Plain async code: `bus` hosts it like any environment and agent. The release is
`$GYMBUS_NEMO_GYM_VERSION` (`RELEASES`; 0.7.0 by default).
"""

from ._hosted import (
    OWN_AGENTS,
    PREFIX,
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
from ._venv import (
    HOME_VARIABLE,
    NEMO_GYM_VERSION,
    RELEASES,
    VERSION_VARIABLE,
    home,
    release,
    requirements_of,
    virtual_env,
)

__all__ = [
    "HOME_VARIABLE",
    "NEMO_GYM_VERSION",
    "OWN_AGENTS",
    "PREFIX",
    "PYTHON_VARIABLE",
    "RELEASES",
    "VERSION_VARIABLE",
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
    "release",
    "requirements_of",
    "virtual_env",
]
