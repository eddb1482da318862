"""Starts one NeMo Gym server (a resources server or an agent), standalone: no head server,
no Ray cluster.

Run by the server's own virtual environment's Python (NeMo Gym needs a newer one than
GymBus), never imported by GymBus:

    python _launcher.py <app.py> <ready file>

with `NEMO_GYM_CONFIG_DICT` (the global config, as YAML) and `NEMO_GYM_CONFIG_PATH` (the
server's instance name) set, as NeMo Gym sets them for the servers it starts. It runs the
server's own `run_webserver()` unchanged (so everything the release sets up there is set
up: liveness, exception and cancellation middleware, MCP exposure, ...), with three seams:

- `uvicorn.run` serves the app on a loopback socket this launcher bound itself (so no
  other process can take the port in between), always in this one process: an instance
  asking for several uvicorn workers gets one (the bridge scales by replicas);
- Ray is not started (about 1.9 GB the hosted servers do not need; a server that submits
  Ray work starts a local one on first use, as before);
- `dry_run` is off (NeMo Gym's CLI sets it; `run_webserver` reads it).

Before serving, it writes to the ready file what the bridge needs: the port, the server
class and kind, its session cookie's name, its POST routes (a resources server's tools)
and the fields its verify adds to a request. NeMo Gym's internal interfaces change between
releases, hence the pinned releases (`_venv.RELEASES`).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_PR_SET_PDEATHSIG = 1
_KIND_DIRS = ("resources_servers", "responses_api_agents", "responses_api_models")
_KINDS = {
    "SimpleResourcesServer": "resources_servers",
    "SimpleResponsesAPIAgent": "responses_api_agents",
    "SimpleResponsesAPIModel": "responses_api_models",
}


def die_with_parent() -> None:
    """SIGKILL this process when the bridge that started it dies, however it dies."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the bridge stops its servers itself
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def import_app(app_path: Path) -> ModuleType:
    """The server's module, imported the way NeMo Gym's layout expects: as
    `<kind>.<name>.<entrypoint>` when the directory sits in a `resources_servers` or
    `responses_api_agents` folder (the package's own servers, or a user's Gym checkout),
    else from its file."""
    server_dir = app_path.parent
    sys.path.insert(0, str(server_dir))  # as `python app.py` run in the server's directory
    if server_dir.parent.name in _KIND_DIRS:
        root = str(server_dir.parent.parent)
        if root not in sys.path:
            sys.path.insert(1, root)
        return importlib.import_module(f"{server_dir.parent.name}.{server_dir.name}.{app_path.stem}")
    spec = importlib.util.spec_from_file_location(app_path.stem, app_path)
    assert spec is not None and spec.loader is not None, f"cannot import {app_path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[app_path.stem] = module
    spec.loader.exec_module(module)
    return module


def server_class(module: ModuleType) -> Any:
    """The server class `module` runs: the most derived concrete `SimpleServer` subclass
    in its namespace that is not one of NeMo Gym's own."""
    from nemo_gym.server_utils import SimpleServer

    found = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, SimpleServer)
        and not value.__module__.startswith("nemo_gym.")
        and not inspect.isabstract(value)
    ]
    leaves = [cls for cls in found if not any(other is not cls and issubclass(other, cls) for other in found)]
    if len(leaves) != 1:
        names = ", ".join(sorted(cls.__name__ for cls in leaves)) or "none"
        raise SystemExit(f"{module.__file__}: expected one server class, found {names}")
    return leaves[0]


def kind_of(server_cls: Any) -> str:
    """`resources_servers`, `responses_api_agents` or `responses_api_models`."""
    bases = {cls.__name__ for cls in server_cls.__mro__}
    return next((kind for base, kind in _KINDS.items() if base in bases), "unknown")


def bind_loopback() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    return sock


def configure(port: int) -> None:
    """Put this server's host and port into its config block, as `ng_run` would; one
    worker; no dry run."""
    from omegaconf import OmegaConf

    name = os.environ["NEMO_GYM_CONFIG_PATH"]
    config = OmegaConf.create(os.environ["NEMO_GYM_CONFIG_DICT"])
    block = next(iter(next(iter(config[name].values())).values()))
    block["host"], block["port"] = "127.0.0.1", port
    # 1, not None: what every config class accepts (`TerminalBench4Config` declares
    # `num_workers: Literal[1] = 1`, and refuses None).
    block["num_workers"] = 1
    config["dry_run"] = False
    os.environ["NEMO_GYM_CONFIG_DICT"] = OmegaConf.to_yaml(config)


def post_routes(app: Any) -> list[str]:
    """The paths of the app's POST routes. A path with a parameter (`/{path}`) is a
    catch-all: any tool name reaches it."""
    return [
        route.path
        for route in app.routes
        if "POST" in (getattr(route, "methods", None) or set()) and hasattr(route, "path")
    ]


def verify_outputs(server_cls: Any) -> list[str]:
    """The fields the server's verify adds to a request (its response model's fields that
    its request model lacks, `reward` among them): a verify request carries none of them,
    and servers that build their reply as `Response(**body, field=...)` fail on one that does
    (a stored rollout sent back to be verified again)."""
    import typing

    from pydantic import BaseModel

    try:
        hints = typing.get_type_hints(inspect.unwrap(server_cls.verify))
    except (NameError, TypeError, AttributeError):  # unresolvable annotations: nothing to learn
        return ["reward"]
    models = {
        name: hint for name, hint in hints.items() if inspect.isclass(hint) and issubclass(hint, BaseModel)
    }
    reply = models.pop("return", None)
    request = next(iter(models.values()), None)
    if reply is None or request is None:
        return ["reward"]
    return sorted(set(reply.model_fields) - set(request.model_fields) | {"reward"})


def log_refusals(app: Any) -> None:
    """Log each refused request's fields, bounded (the bridge reads them from the 422 body)."""
    from fastapi import Request
    from fastapi.exception_handlers import request_validation_exception_handler
    from fastapi.exceptions import RequestValidationError

    async def validation_failed(request: Request, exc: Any) -> Any:
        print(f"422 on {request.url.path}: {json.dumps(exc.errors(), default=str)[:2000]}", flush=True)
        return await request_validation_exception_handler(request, exc)

    app.add_exception_handler(RequestValidationError, validation_failed)


def serve_on(sock: socket.socket, server_cls: Any, ready: Path) -> Any:
    """A stand-in for `uvicorn.run`: serves the app `run_webserver` built on `sock`, after
    writing the ready file. uvicorn's own event loop (uvloop, as NeMo Gym runs it: on plain
    asyncio a keep-alive connection to a passed socket waits 40 ms per reply for delayed ACKs)."""
    import uvicorn

    def run(app: Any, **settings: Any) -> None:
        if isinstance(app, str):
            raise SystemExit(f"{server_cls.__name__} asked uvicorn for several worker processes")
        for key in ("host", "port", "workers", "fd", "uds"):
            settings.pop(key, None)
        settings.setdefault("log_level", "warning")
        log_refusals(app)
        name = os.environ["NEMO_GYM_CONFIG_PATH"]
        info = {
            "port": int(sock.getsockname()[1]),
            "pid": os.getpid(),
            "class": server_cls.__name__,
            "kind": kind_of(server_cls),
            "cookie": f"{server_cls.__name__}___{name}",  # `get_session_middleware_key()`
            "routes": post_routes(app),
            "verify_outputs": verify_outputs(server_cls),
        }
        partial = ready.with_suffix(".partial")
        partial.write_text(json.dumps(info))
        partial.rename(ready)  # whole or absent: the bridge never reads half a file
        uvicorn.Server(uvicorn.Config(app, **settings)).run(sockets=[sock])

    return run


def main() -> None:
    die_with_parent()
    app_path, ready = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    sock = bind_loopback()
    configure(int(sock.getsockname()[1]))
    server_cls = server_class(import_app(app_path))
    import uvicorn
    from nemo_gym import server_utils

    server_utils.initialize_ray = lambda *args, **kwargs: None
    uvicorn.run = serve_on(sock, server_cls, ready)
    server_cls.run_webserver()


if __name__ == "__main__":
    main()
