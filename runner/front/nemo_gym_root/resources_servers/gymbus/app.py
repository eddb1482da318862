"""GymBus's servers as NeMo Gym servers: NeMo Gym (`RunHelper`, `ng_run`) starts this file
for each of a config's `gymbus` servers, as it starts any server, with the resolved config
in `NEMO_GYM_CONFIG_DICT` and the server's name in `NEMO_GYM_CONFIG_PATH`.

The one whose entry says what to `serve` becomes GymBus's front (`gym-runner front
--from-nemo-gym`): it starts the workers and serves every `gymbus` server of the config
at the port NeMo Gym gave it. Each other one only stays up until NeMo Gym stops it, since
NeMo Gym counts a server whose process ended as failed. Which `gym-runner`: the entry's
`gymbus_runner` (a path), else `$GYMBUS_RUNNER`, else the one on `PATH`.
"""

import os
import shutil
import signal
import sys

import yaml


def main() -> None:
    config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    block = config[os.environ["NEMO_GYM_CONFIG_PATH"]]
    entry = next(iter(next(iter(block.values())).values()))
    if "serve" not in entry:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    runner = entry.get("gymbus_runner") or os.environ.get("GYMBUS_RUNNER") or shutil.which("gym-runner")
    if not runner:
        sys.exit("gymbus: no gym-runner (set gymbus_runner in its config, GYMBUS_RUNNER, or PATH)")
    os.execv(runner, [runner, "front", "--from-nemo-gym"])


if __name__ == "__main__":
    main()
