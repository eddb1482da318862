"""The official NATS Helm chart (vendored in deploy/kubernetes/charts/nats) renders with
GymBus's values and the users `gym-runner secure init` writes, as `helm template` renders it:
every manifest valid against the Kubernetes schemas, and the rendered nats.conf valid for
a real nats-server, carrying every role's permissions as written.

Rendered by Helm's own Go SDK (`helm-python-sdk`, a test dependency); without it the tests
are skipped, except in CI (`CI` set), where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from gymbus import bus
from gymbus.runner.security._secure import secure_init
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
CHART = K8S / "charts" / "nats"
KUBERNETES = "1.35.0"  # the version tests/test_deploy.py validates our own manifests against


def _merged(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """`helm -f base -f more`: maps merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in more.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


@pytest.fixture(scope="module")
def helm() -> Any:
    try:
        import helm_python
    except ImportError:
        message = "helm-python-sdk is not installed: pip install -e '.[test]'"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI a missing renderer is a failure, not a skip)")
        pytest.skip(message)
    return helm_python


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("helm")
    layout = secure_init(work / "secrets", ["example_single_tool_call"], [], ["policy"])
    assert layout.helm_values is not None
    return layout.helm_values


@pytest.fixture(scope="module")
def rendered(helm: Any, secured: Path) -> dict[str, str]:
    """`helm template nats charts/nats -n gymbus -f nats-values.yaml -f helm-auth-values.yaml`."""
    values = _merged(
        yaml.safe_load((K8S / "nats-values.yaml").read_text()), yaml.safe_load(secured.read_text())
    )
    chart = helm.Chart.load(str(CHART))
    files: dict[str, str] = chart.render(values, name="nats", namespace="gymbus", is_install=True)
    return files


def _manifests(rendered: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, text in sorted(rendered.items()):
        for doc in yaml.safe_load_all(text):
            if doc:
                yield path, doc


def _nats_conf(rendered: dict[str, str]) -> str:
    [config] = [doc for _, doc in _manifests(rendered) if doc["kind"] == "ConfigMap"]
    text: str = config["data"]["nats.conf"]
    return text


def test_the_vendored_chart_is_the_published_2_14_2(helm: Any) -> None:
    chart = helm.Chart.load(str(CHART))
    assert (chart.name, chart.version) == ("nats", "2.14.2")
    assert "Apache License" in (K8S / "charts" / "LICENSE").read_text().splitlines()[0]


def test_every_rendered_manifest_validates_against_the_kubernetes_schemas(rendered: dict[str, str]) -> None:
    import kubernetes_validate

    kinds = []
    for path, doc in _manifests(rendered):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        kinds.append(doc["kind"])
    assert {"StatefulSet", "ConfigMap", "Service", "PodDisruptionBudget"} <= set(kinds)
    [statefulset] = [doc for _, doc in _manifests(rendered) if doc["kind"] == "StatefulSet"]
    assert statefulset["spec"]["replicas"] == 3


def test_the_rendered_config_carries_every_role_as_secure_init_wrote_it(
    rendered: dict[str, str], secured: Path
) -> None:
    conf = _nats_conf(rendered)
    start = conf.index('"authorization"')
    authorization, _ = json.JSONDecoder().raw_decode(conf[conf.index("{", start) :])
    written = yaml.safe_load(secured.read_text())["config"]["merge"]["authorization"]
    assert authorization == written
    users = {user["nkey"]: user["permissions"] for user in authorization["users"]}
    server_conf = (secured.parent / "nats.conf").read_text()
    assert set(users) == set(_nkeys_in(server_conf)) and len(users) >= 7  # runner ... admin, model-policy
    answering = [user for user in users.values() if "allow_responses" in user]
    assert answering and all(user["allow_responses"]["max"] == -1 for user in answering)
    assert not [user for user in users.values() if "_INBOX.>" in user["publish"]["allow"]]
    pings = (
        f'"ping_interval": "{DEFAULT_TIMEOUTS.server_ping:g}s"',
        f'"ping_max": {DEFAULT_LIMITS.server_pings_out}',
    )
    for setting in ('"max_payload": 8MB', *pings):
        assert setting in conf


def _nkeys_in(conf: str) -> list[str]:
    return [part.split(",")[0].strip() for part in conf.split("{nkey: ")[1:]]


def test_nats_server_accepts_the_rendered_config(rendered: dict[str, str], tmp_path: Path) -> None:
    """`nats-server -t` on the rendered nats.conf, its pod's paths made real: the TLS files
    (a throwaway CA's), the JetStream volume, and the variables the pod sets."""
    ca = trustme.CA()
    cert = ca.issue_cert("nats", "nats.gymbus.svc", "*.nats-headless.gymbus.svc.cluster.local")
    files = {"ca.crt": ca.cert_pem, "tls.crt": cert.cert_chain_pems[0], "tls.key": cert.private_key_pem}
    for name, blob in files.items():
        blob.write_to_path(str(tmp_path / name))
    conf = _nats_conf(rendered)
    for pod_path, real in (
        ("/etc/nats-ca-cert/ca.crt", tmp_path / "ca.crt"),
        ("/etc/nats-certs/cluster/tls.crt", tmp_path / "tls.crt"),
        ("/etc/nats-certs/cluster/tls.key", tmp_path / "tls.key"),
        ("/etc/nats-certs/nats/tls.crt", tmp_path / "tls.crt"),
        ("/etc/nats-certs/nats/tls.key", tmp_path / "tls.key"),
        ('"/data"', json.dumps(str(tmp_path / "data"))),
    ):
        assert pod_path in conf, pod_path
        conf = conf.replace(pod_path, str(real))
    (tmp_path / "nats.conf").write_text(conf)
    env = {**os.environ, "SERVER_NAME": "nats-0", "POD_NAME": "nats-0"}
    checked = subprocess.run([bus.connection.find_server_binary(), "-t", "-c", str(tmp_path / "nats.conf")],
                             env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0 and "is valid" in checked.stdout + checked.stderr, checked.stderr
    broken = conf.replace('"ping_max": 2', '"ping_max": "two"')  # the check can fail
    (tmp_path / "broken.conf").write_text(broken)
    refused = subprocess.run([bus.connection.find_server_binary(), "-t", "-c", str(tmp_path / "broken.conf")],
                             env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0
