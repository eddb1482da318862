"""A locked bus, enforced by a real nats-server with the configuration `gym-runner secure init`
writes: who may connect, who may serve and read what, and that no secret leaks."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from bench import faults
from bench._cluster import WEATHER, WEATHER_AGENT, NatsServers, count_lines, tally, wait_until
from gymbus import bus
from gymbus.runner.security._secure import SecureLayout, secure_init
from gymbus.schemas import NotAuthorized

pytestmark = pytest.mark.timeout(120)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
AGENT_ROLE = f"agent-{WEATHER_AGENT}"
ENV_ROLE = f"env-{WEATHER}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServers, SecureLayout]]:
    work = tmp_path_factory.mktemp("locked")
    layout = secure_init(work / "secrets", [WEATHER], [], ["policy"])
    authorization = layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(work, size=1, extra="authorization" + authorization) as servers:
        yield servers, layout


def _env(url: str, nkey: Path | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    return {**clean, "NATS_URL": url, **({"NATS_NKEY": str(nkey)} if nkey else {})}


def _run(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *args], check=False, env=env, capture_output=True, text=True, timeout=timeout
    )


def _seed(layout: SecureLayout, role: str) -> str:
    return layout.credentials[role].read_text().strip()


def test_secure_init_writes_private_credentials_and_refuses_to_overwrite(
    secured: tuple[NatsServers, SecureLayout],
) -> None:
    _, layout = secured
    assert {"runner", "producer", "monitor", AGENT_ROLE, ENV_ROLE, "model-policy"} <= set(layout.credentials)
    for path in layout.credentials.values():
        assert path.stat().st_mode & 0o777 == 0o600, path
    config = layout.config.read_text()
    assert all(_seed(layout, role) not in config for role in layout.credentials)  # public keys only
    with pytest.raises(FileExistsError):
        secure_init(layout.config.parent, [WEATHER], [], ["policy"])


def test_no_credentials_or_wrong_ones_are_refused_at_once_naming_server_and_role(
    secured: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, _ = secured
    started = time.monotonic()
    status = _run(["status"], _env(servers.url(0)))
    assert status.returncode == 1
    assert "not authorized" in status.stderr and servers.url(0) in status.stderr
    assert "monitor role" in status.stderr and "no credentials" in status.stderr
    stranger = tmp_path / "stranger.nk"
    bus.write_seed(stranger)  # a well-formed key the server does not know
    collect = _run(["collect", "-i", str(faults.EXAMPLE), "-o", str(tmp_path / "o.jsonl"),
                    "--agent", WEATHER_AGENT], _env(servers.url(0), stranger))  # fmt: skip
    assert collect.returncode == 1 and "not authorized" in collect.stderr and "runner role" in collect.stderr
    assert time.monotonic() - started < 15  # refused, not timed out


@pytest.fixture
def locked_alone(tmp_path: Path) -> Iterator[tuple[NatsServers, SecureLayout]]:
    """A locked bus of its own, for a test whose refusals the shared one's log must not hold."""
    layout = secure_init(tmp_path / "secrets", [WEATHER], [], ["policy"])
    authorization = layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(tmp_path, size=1, extra="authorization" + authorization) as servers:
        yield servers, layout


def test_another_roles_key_is_named_with_the_role_needed_not_a_timeout(
    locked_alone: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, layout = locked_alone
    collect = _run(["collect", "-i", str(faults.EXAMPLE), "-o", str(tmp_path / "o.jsonl"), "--agent", WEATHER_AGENT],
                   _env(servers.url(0), layout.credentials["producer"]))  # fmt: skip
    assert collect.returncode == 1, collect.stderr
    [error] = [line for line in collect.stderr.splitlines() if line.startswith("error:")]
    assert f"credentials (nkey seed file {layout.credentials['producer']}, the producer role's) use " in error
    assert error.endswith(
        f"this process needs the credentials of the runner role (NATS_NKEY={layout.credentials['runner']})"
    ), error
    status = _run(["status"], _env(servers.url(0), layout.credentials[ENV_ROLE]))
    assert status.returncode == 1 and "Traceback" not in status.stderr, status.stderr
    assert f"the {ENV_ROLE} role's) use $srv.stats" in status.stderr.lower()
    assert "this process needs the credentials of the monitor role" in status.stderr


async def test_a_producer_cannot_read_results(secured: tuple[NatsServers, SecureLayout]) -> None:
    servers, layout = secured
    auth = bus.BusAuth(nkey=layout.credentials["producer"])
    nc = await bus.connect(servers.url(0), name="producer", auth=auth, role="producer")
    try:
        await nc.client.subscribe("gym.results.>", cb=_ignore)
        await nc.client.flush()
        with pytest.raises(NotAuthorized, match=r"gym\.results\.>"):
            await bus.connection.check_permitted(nc, ["gym.results.>"], "runner")
        with pytest.raises(TimeoutError):  # the JetStream API request is dropped by the server
            await nc.client.jetstream(timeout=1).add_consumer("GYM_RESULTS", durable_name="peek")
        await nc.client.publish("gym.tasks.example_single_tool_call_simple_agent", b"{}")  # what it may do
        await nc.client.flush()
        await bus.connection.check_permitted(
            nc, ["gym.tasks.example_single_tool_call_simple_agent"], "producer"
        )
    finally:
        await nc.close()


def test_an_environment_worker_cannot_serve_another_environment(
    secured: tuple[NatsServers, SecureLayout],
) -> None:
    servers, layout = secured
    served = _run(["serve", "example_multi_step"], _env(servers.url(0), layout.credentials[ENV_ROLE]))
    assert served.returncode == 1
    assert "gym.env.example_multi_step" in served.stderr and "env-example_multi_step role" in served.stderr
    assert "ready:" not in served.stdout


async def test_only_agents_may_publish_results(secured: tuple[NatsServers, SecureLayout]) -> None:
    servers, layout = secured
    for role, allowed in ((ENV_ROLE, False), ("runner", False), ("producer", False), (AGENT_ROLE, True)):
        auth = bus.BusAuth(nkey=layout.credentials[role])
        nc = await bus.connect(servers.url(0), name=role, auth=auth, role=role)
        try:
            await nc.client.publish("gym.results.r0123456789abcdef", b'{"reward": 999.0}')
            await nc.client.flush()
            if allowed:
                await bus.connection.check_permitted(nc, None, role)
            else:
                with pytest.raises(NotAuthorized, match=r"gym\.results"):
                    await bus.connection.check_permitted(nc, None, role)
        finally:
            await nc.close()


def _worker(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([*RUNNER, "serve", *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_collection_on_a_locked_bus_with_a_role_per_process_leaks_no_secret(
    secured: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, layout = secured
    url = servers.url(0)
    creds = layout.credentials
    workers = [
        _worker([WEATHER], _env(url, creds[ENV_ROLE]), tmp_path / "env.log"),
        _worker([WEATHER_AGENT], _env(url, creds[AGENT_ROLE]), tmp_path / "agent.log"),
        _worker(["offline"], _env(url, creds["model-policy"]), tmp_path / "model.log"),
    ]
    secrets = [_seed(layout, role) for role in layout.credentials]
    try:
        for log in ("env.log", "agent.log", "model.log"):
            path = tmp_path / log
            wait_until(lambda path=path: "ready:" in path.read_text(errors="replace"), 60, log)
        source, args, keys = faults.weather_tasks(tmp_path, 200)
        out = tmp_path / "out.jsonl"
        with open(tmp_path / "runner.log", "wb") as log:
            runner = subprocess.Popen([*RUNNER, "collect", "-i", str(source), "-o", str(out), *args],
                                      env=_env(url, creds["runner"]), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        command_lines = _command_lines([*workers, runner])
        assert runner.wait(60) == 0, (tmp_path / "runner.log").read_text()
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
    result = tally(out, keys)
    assert (result.written, result.lost, result.duplicated) == (len(keys), 0, 0)
    names = ("gym-runner collect", f"gym-worker:{WEATHER}", "gym-worker:offline")
    refused = [
        line for line in servers.log(0).splitlines() if "Violation" in line and any(n in line for n in names)
    ]
    assert not refused  # every role had what it needed
    leaked = [
        path for path in tmp_path.iterdir() if any(s in path.read_text(errors="replace") for s in secrets)
    ]
    assert not leaked
    assert not [line for line in command_lines if any(secret in line for secret in secrets)]
    assert all(str(creds["runner"]) not in line for line in command_lines)  # paths go by environment too


def _command_lines(processes: list[subprocess.Popen[bytes]]) -> list[str]:
    lines = []
    for process in processes:
        try:
            lines.append(Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return lines


async def _ignore(msg: object) -> None:
    pass


def test_forged_results_with_copied_headers_are_not_written(tmp_path: Path) -> None:
    """On a bus open to anyone, a client copies a real result's headers (run, seq, attempt,
    message id, even its token) onto 20 fake rows with reward 999.0 for other rollouts:
    the runner writes none of them."""
    with NatsServers(tmp_path, size=1) as servers:
        env = _env(servers.url(0))
        worker = _worker([WEATHER, WEATHER_AGENT], env, tmp_path / "worker.log")
        model = subprocess.Popen([sys.executable, "-m", "bench.workers", "slow-model", "0.2"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_until(
                lambda: "ready:" in (tmp_path / "worker.log").read_text(errors="replace"), 60, "worker"
            )
            source, args, keys = faults.weather_tasks(tmp_path, 100)
            out = tmp_path / "out.jsonl"
            forged = asyncio.run(_collect_while_forging(servers.url(0), env, source, out, args))
        finally:
            for process in (worker, model):
                process.terminate()
                process.wait(30)
    assert forged == 20
    rows = out.read_text().splitlines()
    assert not [row for row in rows if '"forged"' in row or "999.0" in row]
    result = tally(out, keys)
    assert (result.written, result.lost, result.duplicated) == (len(keys), 0, 0)


async def _collect_while_forging(
    url: str, env: dict[str, str], source: Path, out: Path, args: list[str]
) -> int:
    nc = await bus.connect(url, name="forger", auth=bus.BusAuth())
    seen: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def copy(msg: object) -> None:
        seen.put_nowait(dict(getattr(msg, "headers", None) or {}))

    await nc.client.subscribe("gym.results.>", cb=copy)
    runner = await asyncio.create_subprocess_exec(
        *RUNNER, "collect", "-i", str(source), "-o", str(out), *args, "--concurrency", "4", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    real = await asyncio.wait_for(seen.get(), 30)
    run = real["Nats-Msg-Id"].split(".")[0]
    forged = 0
    for seq in range(50, 70):  # rollouts not run yet: 4 in flight, 0.4 s each
        headers = {**real, "Gym-Seq": str(seq), "Nats-Msg-Id": f"{run}.{seq}.0"}
        row = b'{"_ng_task_index": %d, "_ng_rollout_index": 0, "reward": 999.0, "forged": true}' % seq
        await nc.js.publish(f"gym.results.{run}", row, headers=headers)
        forged += 1
    assert count_lines(out) < 50  # the forgeries came before their rollouts' real results
    assert await asyncio.wait_for(runner.wait(), 90) == 0
    await nc.close()
    return forged


def test_tls_with_client_certificates_the_test_makes(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("gym-monitor@example.invalid")
    files = {
        name: tmp_path / f"{name}.pem" for name in ("ca", "server", "server-key", "client", "client-key")
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["server"]))
    server_cert.private_key_pem.write_to_path(str(files["server-key"]))
    client_cert.cert_chain_pems[0].write_to_path(str(files["client"]))
    client_cert.private_key_pem.write_to_path(str(files["client-key"]))
    layout = secure_init(tmp_path / "secrets", [WEATHER], [], ["policy"],
                         tls=(files["server"], files["server-key"], files["ca"]))  # fmt: skip
    conf = layout.config.read_text()
    extra = conf[conf.index("tls {") :]
    with NatsServers(tmp_path, size=1, extra=extra) as servers:
        env = {**_env(servers.url(0), layout.credentials["monitor"]), "NATS_CA": str(files["ca"])}
        with_cert = {**env, "NATS_CERT": str(files["client"]), "NATS_KEY": str(files["client-key"])}
        status = _run(["status", "--json"], with_cert)
        assert status.returncode == 0, status.stderr
        assert '"functions"' in status.stdout
        without_cert = _run(["status"], env, timeout=30)  # the server requires a client certificate
        assert without_cert.returncode == 1
        no_ca = _run(["status"], {**with_cert, "NATS_CA": ""}, timeout=30)  # cannot trust the server
        assert no_ca.returncode == 1


def test_the_embedded_default_admits_only_the_credentials_it_made(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    serving = subprocess.Popen([*RUNNER, "serve", WEATHER, "--replicas", "2"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert serving.stdout is not None
        line = serving.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        runner_key = Path(line.rsplit("NATS_NKEY=", 1)[1].strip(" )\n"))
        assert runner_key.stat().st_mode & 0o777 == 0o600
        assert url.startswith("nats://127.0.0.1:")  # loopback only

        async def attempts() -> None:
            with pytest.raises(NotAuthorized, match="not authorized"):
                await bus.connect(url, name="intruder", auth=bus.BusAuth())
            nc = await bus.connect(url, name="runner", auth=bus.BusAuth(nkey=runner_key))
            await nc.close()

        asyncio.run(attempts())
        seeds = [path.read_text().strip() for path in runner_key.parent.glob("*.nk")]
        children = _workers_of(serving.pid, count=2)
        assert len(seeds) == 2 and len(children) == 2
        assert not [c for c in children if any(s in c or str(runner_key.parent) in c for s in seeds)]
    finally:
        serving.terminate()
        serving.wait(30)


def _workers_of(pid: int, count: int, wait: float = 30.0) -> list[str]:
    """The command lines of `pid`'s worker processes, once `count` of them have started
    (the supervisor prints its server's address before it starts them)."""
    deadline = time.monotonic() + wait
    while True:
        workers = [line for line in _children(pid) if " serve " in line and "nats-server" not in line]
        if len(workers) >= count or time.monotonic() > deadline:
            return workers
        time.sleep(0.1)


def _children(pid: int) -> list[str]:
    import psutil

    return [" ".join(child.cmdline()) for child in psutil.Process(pid).children(recursive=True)]
