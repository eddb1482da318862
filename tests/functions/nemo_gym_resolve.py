"""Resolves NeMo Gym configs with NeMo Gym's own loader; run by the Python of NeMo Gym's
environment, never imported by GymBus's tests (tests/functions/test_nemo_gym_config.py).

    python nemo_gym_resolve.py CONFIG...

prints one JSON list: per config, its resolution (`OmegaConf.to_container`, interpolations
left as written, as the loader leaves them) or the loader's error. Each config is resolved
as `gym env start --config CONFIG` would, offline (no port probed), with NeMo Gym's own
placeholder policy (`NO_MODEL_GLOBAL_CONFIG_DICT`), and, where the loader stops for
something a user supplies beside the config, with a placeholder for it, listed in the
result: a model server the config names but does not define (a judge), a value an
interpolation reads (an API key), an environment variable it reads.
"""

import json
import os
import re
import sys

from nemo_gym.config_types import ServerRefNotFoundError
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError

_MODEL = re.compile(r"references responses_api_models/'([^']+)'")
_KEY = re.compile(r"Interpolation key '([^']+)' not found")
_VARIABLE = re.compile(r"Environment variable '([^']+)' not found")
PLACEHOLDER_MODEL = {"responses_api_models": {"dummy_model": {"entrypoint": "app.py"}}}


def parse(config: str, supplied: dict) -> dict:
    initial = {
        **OmegaConf.to_container(GlobalConfigDictParserConfig.NO_MODEL_GLOBAL_CONFIG_DICT),
        "config_paths": [config],
        # Checked apart: GymBus leaves a block's validation to the server that reads it.
        "error_on_almost_servers": False,
        **supplied,
    }
    parsed = GlobalConfigDictParser().parse(
        GlobalConfigDictParserConfig(
            initial_global_config_dict=OmegaConf.create(initial),
            skip_load_from_cli=True,
            skip_load_from_dotenv=True,
            offline=True,
        )
    )
    return OmegaConf.to_container(parsed, resolve=False)


def placeholder_for(exc: Exception, supplied: dict) -> bool:
    """Supply what `exc` says is missing; False if it names nothing suppliable."""
    text = str(exc)
    for pattern, value in ((_MODEL, PLACEHOLDER_MODEL), (_KEY, "placeholder")):
        match = pattern.search(text)
        if match and match.group(1) not in supplied and "." not in match.group(1):
            supplied[match.group(1)] = value
            return True
    match = _VARIABLE.search(text)
    if match and match.group(1) not in os.environ:
        os.environ[match.group(1)] = "placeholder"
        return True
    return False


def resolve(config: str) -> dict:
    supplied: dict = {}
    while True:
        try:
            return {"config": config, "supplied": sorted(supplied), "resolved": parse(config, supplied)}
        except (ServerRefNotFoundError, InterpolationKeyError, InterpolationResolutionError) as exc:
            if not placeholder_for(exc, supplied):
                return {"config": config, "error": type(exc).__name__, "message": str(exc)}
        except Exception as exc:  # the loader's refusal is the result
            return {"config": config, "error": type(exc).__name__, "message": str(exc)}


if __name__ == "__main__":
    print(json.dumps([resolve(config) for config in sys.argv[1:]], default=str))
