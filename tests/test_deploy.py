"""The files in deploy/ agree with the code: names, subjects, limits, commands, variables.

Only parses files (YAML, the Dockerfile, nats.conf) and the CLI's arguments: no Docker,
no cluster, no network. A rename in `bus` or `functions` that the deployment files do not
follow fails here rather than in a cluster.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
import yaml

from gymbus.bus import ENV_VARS, BusAuth, nats_url_from_env, subjects
from gymbus.bus.cluster import replicas_from_env
from gymbus.bus.hosting._task_consumer import agent_consumer
from gymbus.functions.registry import AGENTS, ENVIRONMENTS, MODELS, names
from gymbus.runner.cli import app
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")
CLI = typer.main.get_command(app)


# ---- loading -------------------------------------------------------------------------


def _yaml_files() -> list[Path]:
    """Ours: the vendored NATS chart (`kubernetes/charts/`, Go templates) is
    tests/test_helm_chart.py's."""
    return sorted(
        p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and not p.is_relative_to(K8S / "charts")
    )


def _load(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _defaults(value: Any) -> Any:
    """`value` with compose's `${NAME:-default}` replaced by its default (no .env file)."""
    if isinstance(value, str):
        return INTERPOLATION.sub(lambda m: m[2] or "", value)
    if isinstance(value, list):
        return [_defaults(item) for item in value]
    if isinstance(value, dict):
        return {key: _defaults(item) for key, item in value.items()}
    return value


@cache
def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = _defaults(_load(DEPLOY / "compose.yaml")[0])
    return loaded


def _compose_workers() -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in _compose()["services"].items() if svc["command"][0] == "serve"}


@cache
def _kustomization(folder: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = _load(folder / "kustomization.yaml")[0]
    return loaded


def _resources(folder: Path) -> list[dict[str, Any]]:
    return [doc for name in _kustomization(folder)["resources"] for doc in _load(folder / name)]


def _all_resources() -> list[dict[str, Any]]:
    return _resources(K8S) + _resources(K8S / "collect")


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in _all_resources() if doc["kind"] == kind]


def _config_maps() -> dict[str, dict[str, str]]:
    return {doc["metadata"]["name"]: doc["data"] for doc in _of_kind("ConfigMap")}


def _pod_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, container) of every Deployment and Job, init containers too."""
    for doc in _of_kind("Deployment") + _of_kind("Job"):
        spec = doc["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield doc["metadata"]["name"], container


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    """The variables a container gets: `env` entries and the ConfigMaps of `envFrom`."""
    env = {}
    for source in container.get("envFrom", []):
        env.update(_config_maps()[source["configMapRef"]["name"]])
    for entry in container.get("env", []):
        env[entry["name"]] = entry.get("value", "<from a Secret>")
    return env


def _k8s_args(container: dict[str, Any]) -> list[str]:
    """The container's arguments with `$(VAR)` expanded as the kubelet does."""
    env = _container_env(container)
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in container.get("args", [])]


def _deployment_args() -> dict[str, list[str]]:
    return {
        doc["metadata"]["name"]: _k8s_args(doc["spec"]["template"]["spec"]["containers"][0])
        for doc in _of_kind("Deployment")
    }


def _parse_cli(args: list[str]) -> dict[str, Any]:
    """The options `gym-runner <args>` would run with; raises if the CLI rejects them."""
    command = CLI.get_command(None, args[0])  # type: ignore[attr-defined]
    assert command is not None, f"gym-runner has no command {args[0]!r}"
    params: dict[str, Any] = command.make_context(args[0], list(args[1:])).params
    return params


def _service_name(args: list[str]) -> str:
    """The Services API name a `gym-runner serve` worker registers (what probes look for)."""
    params = _parse_cli(args)
    (function,) = params["functions"]
    return str(params["served_model"]) if function in MODELS else function


def _probe_script(check: dict[str, Any]) -> str:
    command = check["test"] if "test" in check else check["exec"]["command"]
    assert command[0] in ("CMD-SHELL", "sh"), command
    return str(command[-1])


def _probed_name(script: str) -> str:
    found = re.findall(r"\"name\": \"([^\"]+)\"", script)
    assert len(found) == 1 and "gym-runner status --json" in script, script
    return found[0]


def _size(value: str) -> int:
    """A nats-server size (`8MB`, `8388608`; the chart's `<< 8MB >>` unquoted) in bytes."""
    size = re.fullmatch(r"(?:<< )?(\d+)(MB|KB)?(?: >>)?", value.strip())
    assert size is not None, value
    return int(size[1]) * {"MB": 1024**2, "KB": 1024, None: 1}[size[2]]


def _conf_value(text: str, key: str) -> str:
    """The value of a top-level `key: value` line of a nats-server config file."""
    found = re.search(rf"^{key}:\s*(\S+)\s*$", text, re.MULTILINE)
    assert found is not None, f"no {key}"
    return found[1]


def _seconds(duration: str) -> float:
    """A compose duration such as `45s` or `2m`."""
    number, unit = re.fullmatch(r"(\d+)([sm])", duration).groups()  # type: ignore[union-attr]
    return int(number) * {"s": 1, "m": 60}[unit]


def _env_vars_the_code_reads(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    monkeypatch.setenv("NATS_URL", "nats://bus.example:4222")
    assert nats_url_from_env() == "nats://bus.example:4222"
    monkeypatch.setenv("GYMBUS_REPLICAS", "3")
    assert replicas_from_env() == 3
    options = [p for command in CLI.commands.values() for p in command.params]  # type: ignore[attr-defined]
    # The credentials' variables: `BusAuth.from_env`, the one place every process reads them.
    return {"NATS_URL", "GYMBUS_REPLICAS", *ENV_VARS} | {
        p.envvar for p in options if isinstance(p.envvar, str)
    }


# ---- tests ---------------------------------------------------------------------------


def test_every_yaml_file_parses_and_every_manifest_is_applied() -> None:
    files = _yaml_files()
    assert {DEPLOY / "compose.yaml", K8S / "kustomization.yaml", K8S / "nats-values.yaml"} <= set(files)
    for path in files:
        assert _load(path), f"{path} is empty"
    applied = {
        folder / name for folder in (K8S, K8S / "collect") for name in _kustomization(folder)["resources"]
    }
    manifests = {p for p in files if p.parent != DEPLOY and p.name != "kustomization.yaml"}
    assert manifests == applied | {K8S / "nats-values.yaml"}, "a manifest no kustomization lists"


def test_every_worker_serves_known_functions_with_arguments_the_cli_accepts() -> None:
    known = set(names())
    commands = [svc["command"] for svc in _compose_workers().values()] + list(_deployment_args().values())
    assert len(commands) >= 6
    for args in commands:
        params = _parse_cli(args)
        assert args[0] == "serve" and set(params["functions"]) <= known, args
        assert params["replicas"] == 1, "scale with replicas of the worker, not child processes"
    # The image's entrypoint is gym-runner; nothing replaces it for a worker.
    assert not any("entrypoint" in svc for svc in _compose()["services"].values())
    assert not any(
        "command" in c
        for doc in _of_kind("Deployment")
        for c in doc["spec"]["template"]["spec"]["containers"]
    )


def test_the_parser_rejects_what_the_cli_would() -> None:
    # The check above is worth something only if a wrong option fails it.
    with pytest.raises(Exception, match="--replica"):
        _parse_cli(["serve", "example_single_tool_call", "--replica", "2"])


def test_compose_and_kubernetes_each_run_a_whole_example() -> None:
    for functions in (
        [_parse_cli(svc["command"])["functions"] for svc in _compose_workers().values()],
        [_parse_cli(args)["functions"] for args in _deployment_args().values()],
    ):
        assert all(len(served) == 1 for served in functions), "one function per worker"
        served = {name for (name,) in functions}
        deployed_agents = served & set(AGENTS)
        assert deployed_agents and served & set(MODELS)
        assert {AGENTS[agent].environment for agent in deployed_agents} <= served & set(ENVIRONMENTS)


def test_probes_look_for_the_service_each_worker_registers() -> None:
    for svc in _compose_workers().values():
        assert _probed_name(_probe_script(svc["healthcheck"])) == _service_name(svc["command"])
    for doc in _of_kind("Deployment"):
        container = doc["spec"]["template"]["spec"]["containers"][0]
        expected = _service_name(_k8s_args(container))
        for probe in ("readinessProbe", "livenessProbe"):
            assert _probed_name(_probe_script(container[probe])) == expected


def test_collections_wait_for_every_worker() -> None:
    # A row whose agent nobody serves yet becomes a failure row: collect must not start early.
    compose = _compose()["services"]["collect"]
    assert set(compose["depends_on"]) == set(_compose_workers())
    assert all(c["condition"] == "service_healthy" for c in compose["depends_on"].values())
    job = _of_kind("Job")[0]["spec"]["template"]["spec"]
    loop = re.search(r"for name in ([\w ]+); do", job["initContainers"][0]["args"][0])
    assert loop is not None
    assert set(loop[1].split()) == {_service_name(args) for args in _deployment_args().values()}


def test_collect_commands_read_an_example_and_write_the_results_volume() -> None:
    compose = _compose()["services"]["collect"]
    job = _of_kind("Job")[0]["spec"]["template"]["spec"]
    for args in (compose["command"], job["containers"][0]["args"]):
        params = _parse_cli(args)
        assert (ROOT / params["input"]).is_file() and params["agent"] in AGENTS
        assert Path(params["output"]).parent == Path("results")
    assert "../results:/app/results" in compose["volumes"]
    assert job["containers"][0]["volumeMounts"][0]["mountPath"] == "/app/results"


def test_scaler_reads_the_agent_consumer_on_the_task_stream() -> None:
    (scaler,) = _of_kind("ScaledObject")
    target = scaler["spec"]["scaleTargetRef"]["name"]
    params = _parse_cli(_deployment_args()[target])
    (agent,) = params["functions"]
    (trigger,) = scaler["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "nats-jetstream" and agent in AGENTS
    assert meta["stream"] == subjects.TASKS_STREAM and meta["consumer"] == agent_consumer(agent)
    assert meta["account"] == "$G"  # the default account of a server without accounts
    assert all(isinstance(value, str) for value in meta.values()), "KEDA metadata values are strings"
    assert int(meta["lagThreshold"]) == params["concurrency"]
    assert scaler["spec"]["minReplicaCount"] >= 1  # the agent's direct subject stays served


def test_addresses_agree_with_the_nats_server_config() -> None:
    values = _load(K8S / "nats-values.yaml")[0]["config"]
    url = urlsplit(_config_maps()["gymbus"]["NATS_URL"])
    release, namespace = url.hostname, _kustomization(K8S)["namespace"]
    assert _kustomization(K8S / "collect")["namespace"] == namespace
    assert url.port == values.get("nats", {}).get("port", 4222)
    (scaler,) = _of_kind("ScaledObject")
    endpoint = scaler["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"]
    assert endpoint == f"{release}-headless.{namespace}.svc.cluster.local:{values['monitor']['port']}"
    conf = (DEPLOY / "nats.conf").read_text()
    compose_url = urlsplit(_compose()["services"]["weather-env"]["environment"]["NATS_URL"])
    assert compose_url.hostname == "nats" and _conf_value(conf, "port") == str(compose_url.port)
    monitor = _conf_value(conf, "http_port")
    assert f"127.0.0.1:{monitor}:{monitor}" in _compose()["services"]["nats"]["ports"]
    assert f":{monitor}/healthz" in " ".join(_compose()["services"]["nats"]["healthcheck"]["test"])


def test_servers_allow_the_payload_the_embedded_server_allows() -> None:
    values = _load(K8S / "nats-values.yaml")[0]["config"]
    conf = (DEPLOY / "nats.conf").read_text()
    assert _size(_conf_value(conf, "max_payload")) == DEFAULT_LIMITS.max_payload
    assert _size(values["merge"]["max_payload"]) == DEFAULT_LIMITS.max_payload
    assert values["jetstream"]["enabled"] and values["jetstream"]["fileStore"]["pvc"]["enabled"]
    assert values["cluster"]["enabled"] and values["cluster"]["replicas"] == 3
    assert _conf_value(conf, "jetstream") == "enabled"
    nats = _compose()["services"]["nats"]
    store = nats["command"][nats["command"].index("--store_dir") + 1]
    assert f"nats-data:{store}" in nats["volumes"]  # JetStream keeps its data on the volume


def test_servers_drop_a_frozen_client_as_the_embedded_server_does() -> None:
    """A frozen worker keeps its place in every queue group until its server drops it: with
    nats-server's default pings (2 minutes) it takes its share of the calls for minutes."""
    values = _load(K8S / "nats-values.yaml")[0]["config"]["merge"]
    conf = (DEPLOY / "nats.conf").read_text()
    for interval, most in (
        (_conf_value(conf, "ping_interval"), _conf_value(conf, "ping_max")),
        (values["ping_interval"], str(values["ping_max"])),
    ):
        assert _seconds(interval.strip('"')) == DEFAULT_TIMEOUTS.server_ping
        assert int(most) == DEFAULT_LIMITS.server_pings_out


def test_containers_get_only_variables_the_code_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    read = _env_vars_the_code_reads(monkeypatch)
    assert {"NATS_URL", "POLICY_BASE_URL", "POLICY_MODEL", "POLICY_API_KEY"} <= read
    for name, svc in _compose()["services"].items():
        assert set(svc.get("environment", {})) <= read, name
    for workload, container in _pod_containers():
        used_in_args = set(re.findall(r"\$\((\w+)\)", " ".join(container.get("args", []))))
        assert set(_container_env(container)) <= read | used_in_args, workload
        assert "NATS_URL" in _container_env(container), workload


def test_env_example_names_only_what_the_code_or_compose_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    read = _env_vars_the_code_reads(monkeypatch)
    interpolated = {m[1] for m in INTERPOLATION.finditer((DEPLOY / "compose.yaml").read_text())}
    lines = (DEPLOY / ".env.example").read_text().splitlines()
    keys = {line.lstrip("# ").split("=")[0] for line in lines if re.match(r"#? ?[A-Z_]+=", line)}
    assert "POLICY_API_KEY" in keys and keys <= read | interpolated
    assert re.search(r"^POLICY_API_KEY=$", "\n".join(lines), re.MULTILINE), "no key in the example"
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()


def test_the_model_key_comes_from_a_secret() -> None:
    keys = [e for _, c in _pod_containers() for e in c.get("env", []) if e["name"] == "POLICY_API_KEY"]
    assert len(keys) == 1 and keys[0]["valueFrom"]["secretKeyRef"]["key"] == "POLICY_API_KEY"
    assert not any("POLICY_API_KEY" in data for data in _config_maps().values())
    assert _compose()["services"]["policy"]["environment"]["POLICY_API_KEY"] == ""  # only from .env


def test_grace_periods_cover_the_drain() -> None:
    # A stopping worker drains its task puller, its request handlers and its connection,
    # each for up to Timeouts.drain.
    drain = 3 * DEFAULT_TIMEOUTS.drain
    for svc in _compose_workers().values():
        assert _seconds(svc["stop_grace_period"]) > drain
    for doc in _of_kind("Deployment"):
        assert doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain


def test_workloads_have_limits_and_run_unprivileged() -> None:
    for workload, container in _pod_containers():
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) & set(resources["limits"]), workload
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, workload
    for doc in _of_kind("Deployment") + _of_kind("Job"):
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_both_kustomizations_run_the_same_image() -> None:
    images = [_kustomization(folder)["images"] for folder in (K8S, K8S / "collect")]
    assert images[0] == images[1]
    names_used = {container["image"] for _, container in _pod_containers()}
    assert names_used == {images[0][0]["name"]}


def test_named_subjects_streams_and_consumers_exist() -> None:
    served_agents = [a for args in _deployment_args().values() for a in _parse_cli(args)["functions"]]
    known = {subjects.TASKS_STREAM, subjects.RESULTS_STREAM, subjects.CLAIMS_STREAM}
    consumers = {agent_consumer(a) for a in AGENTS}
    for path in [*_yaml_files(), DEPLOY / "README.md", DEPLOY / "Dockerfile"]:
        text = path.read_text()
        assert set(re.findall(r"\bGYM_[A-Z]+\b", text)) <= known, path
        assert set(re.findall(r"\bgym-agent-[\w-]+", text)) <= consumers, path
        for subject in re.findall(r"\bgym\.(?:model|env|agent|tasks|results)\.[\w.*>-]+", text):
            _check_subject(subject.rstrip("."), served_agents, path)


def _check_subject(subject: str, served_agents: list[str], path: Path) -> None:
    kind, name, *rest = subject.split(".")[1:]
    if kind == "model":
        assert subject == subjects.model_responses(name), (path, subject)
    elif kind == "agent":
        assert subject == subjects.agent_run(name) and name in AGENTS, (path, subject)
    elif kind == "env":
        env = ENVIRONMENTS[name]
        built = {subjects.env_seed(name), subjects.env_verify(name)}
        built |= {subjects.env_tool(name, t.name) for t in env.tools}
        assert rest in (["*"], [">"]) or subject in built, (path, subject)
    else:
        assert kind == "tasks" and subject == subjects.tasks(name) and name in served_agents, (path, subject)


def test_dockerfile_installs_the_package_as_a_non_root_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = list(project["tool"]["setuptools"]["package-dir"].values())
    base = re.search(r"^FROM python:3\.(\d+)-slim", text, re.MULTILINE)
    assert base is not None and int(base[1]) >= 11  # requires-python >= 3.11
    copied = set(re.findall(r"^COPY (\S+)/? /src/", text, re.MULTILINE))
    assert {"pyproject.toml", *packages} <= {c.rstrip("/") for c in copied} | {"pyproject.toml"}
    assert re.search(r"^COPY pyproject\.toml README\.md /src/", text, re.MULTILINE)
    assert re.search(r"pip install /src\b", text)
    assert re.search(r"apt-get install .*\bbubblewrap\b", text)
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["gym-runner"\]', text, re.MULTILINE)
    assert not re.search(r"^(ENV|ARG) .*(KEY|TOKEN|SECRET|PASSWORD)", text, re.MULTILINE), (
        "no secrets baked in"
    )


# ---- the locked bus ------------------------------------------------------------------------


def _secret_mounts(pod: dict[str, Any]) -> dict[str, str]:
    """Mount path -> Secret name, for the Secret volumes of the pod's first container."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    mounts = pod["containers"][0].get("volumeMounts", [])
    return {m["mountPath"]: secrets[m["name"]] for m in mounts if m["name"] in secrets}


def test_every_process_mounts_only_its_own_roles_credentials() -> None:
    roles = {
        "weather-env": "gymbus-nats-weather-env",
        "weather-agent": "gymbus-nats-weather-agent",
        "policy": "gymbus-nats-policy",
        "collect-weather": "gymbus-nats-runner",
    }
    pods = {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]
        for doc in _of_kind("Deployment") + _of_kind("Job")
    }
    assert set(pods) == set(roles)
    for name, pod in pods.items():
        container = pod["containers"][0]
        auth = BusAuth.from_env({e["name"]: e["value"] for e in container["env"] if "value" in e})
        assert auth.nkey is not None and auth.ca is not None, name
        mounts = _secret_mounts(pod)
        assert mounts[str(auth.nkey.parent)] == roles[name], name
        assert mounts[str(auth.ca.parent)] == "nats-ca", name
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"], name
        for volume in pod["volumes"]:
            if "secret" in volume and volume["secret"]["secretName"].startswith("gymbus-nats-"):
                assert volume["secret"]["defaultMode"] & 0o007 == 0, "credentials unreadable by others"


def test_probes_read_the_bus_as_the_monitor_role() -> None:
    for doc in _of_kind("Deployment"):
        pod = doc["spec"]["template"]["spec"]
        mounts = _secret_mounts(pod)
        for probe in ("readinessProbe", "livenessProbe"):
            script = _probe_script(pod["containers"][0][probe])
            path = re.search(r"NATS_NKEY=(\S+)/nkey gym-runner status", script)
            assert path is not None and mounts[path[1]] == "gymbus-nats-monitor", script


def test_the_nats_chart_runs_three_servers_with_tls() -> None:
    values = _load(K8S / "nats-values.yaml")[0]
    config = values["config"]
    assert config["cluster"]["replicas"] == 3 and config["jetstream"]["enabled"]
    assert config["nats"]["tls"]["enabled"] and config["cluster"]["tls"]["enabled"]
    assert values["tlsCA"]["enabled"] and values["tlsCA"]["secretName"] == "nats-ca"


def test_manifests_validate_against_the_kubernetes_schemas() -> None:
    import kubernetes_validate

    checked = 0
    for doc in _all_resources():
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # a KEDA custom resource: its schema is KEDA's, not Kubernetes'
        kubernetes_validate.validate(doc, "1.35.0", strict=True)
        checked += 1
    assert checked == len(_all_resources()) - len(_of_kind("ScaledObject")) >= 6


def test_the_schema_validator_catches_a_broken_manifest() -> None:
    import kubernetes_validate

    broken = _of_kind("Deployment")[0]
    broken = {**broken, "spec": {**broken["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.35.0", strict=True)
