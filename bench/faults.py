"""Fault injection: collections that survive killed workers, a killed runner, a restarted
nats-server, a failing model endpoint and very long rollouts, with nothing lost or doubled.

    python -m bench.faults [--tasks 2000] [--only NAME ...]
    python -m bench.faults --soak MINUTES [--hog N]    (bench/soak.py: all of them at random, for
                                                       long, on CPU-heavy environments)

Each scenario runs on its own nats-server (file storage) with real worker and runner
processes, and prints one line: rollouts expected, written, failed, lost (in neither
output file), duplicated (more than one line per key), retried (model and call retries
plus extra task deliveries), seconds, and fault: whether the fault landed while the run
had work left ("no" fails the scenario, as a run that ends first proves nothing; "-"
for the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nats.aio.msg import Msg

from bench._cluster import WEATHER, WEATHER_AGENT, Cluster, Tally, Watch, count_lines, tally, wait_until
from bench.openai_stub import OpenAIStub, StubServer
from gymbus import bus

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / f"{WEATHER}.jsonl"
WORKER = (WEATHER, WEATHER_AGENT, "offline")
FINISH = 300.0  # seconds any one collection may take before the scenario counts as hung
FAULT = {True: "yes", False: "no", None: "-"}  # whether the fault landed mid-run
# Rollouts in flight while the runner is killed or the server restarts. At 256 the offline
# policy writes over 2,000 rollouts/s, in bursts of 256, so a short run could end before
# the fault; at 16 it writes about 1,000/s in small steps.
MID_RUN_CONCURRENCY = "16"
FROZEN_FOR = 30.0  # seconds a worker stays stopped (unless the run ends first)
FROZEN_BUDGET = 15.0  # seconds a frozen worker may cut throughput below half


def weather_tasks(directory: Path, tasks: int) -> tuple[Path, list[str], set[tuple[int, int]]]:
    """An input whose rows collect into `tasks` rollouts, and the keys they must produce."""
    rows = EXAMPLE.read_text().splitlines()
    repeats = tasks // len(rows)
    source = directory / "tasks.jsonl"
    source.write_text("\n".join(rows) + "\n")
    args = ["--num-repeats", str(repeats), "--agent", WEATHER_AGENT]
    return source, args, {(t, r) for t in range(len(rows)) for r in range(repeats)}


def finish(process, cluster: Cluster, expected: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Wait for a runner; it must exit `expected` (0: every rollout written)."""
    code = process.wait(timeout=FINISH)
    if code != expected:
        raise RuntimeError(f"runner exited {code}:\n{cluster.log('runner.log')[-3000:]}")


def baseline(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    source, args, keys = weather_tasks(work, tasks)
    cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    finish(cluster.collect(source, out, *args), cluster)
    return tally(out, keys)


def running_with_work_left(runner: subprocess.Popen[bytes], output: Path, expected: int) -> bool:
    """Whether `runner` still runs and has rollouts left to write: checked after a fault,
    it proves the fault landed mid-run (a run can finish before a fault lands)."""
    return runner.poll() is None and count_lines(output) < expected


def worker_kill(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """Two SIGKILLs of agent workers at random moments; replacements start after each."""
    source, args, keys = weather_tasks(work, tasks)
    workers = [cluster.start_worker(*WORKER), cluster.start_worker(*WORKER)]
    out = work / "out.jsonl"
    # 64 in flight: enough for both workers to hold tasks when one dies, few enough that
    # the run is still going at each kill (at 512 it could end before either).
    runner = cluster.collect(source, out, *args, "--concurrency", "64")
    landed = True
    for stage in (0.15, 0.45):
        at = int(tasks * rng.uniform(stage, stage + 0.25))
        wait_until(
            lambda at=at: count_lines(out) >= at or runner.poll() is not None, FINISH, f"{at} rollouts"
        )
        Cluster.kill(workers.pop(rng.randrange(len(workers))))
        landed = running_with_work_left(runner, out, len(keys)) and landed
        workers.append(cluster.start_worker(*WORKER))
    finish(runner, cluster)
    return replace(tally(out, keys), fault_injected=landed)


def runner_kill(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """SIGKILL the runner at a random moment, then `--resume` with the same arguments."""
    source, args, keys = weather_tasks(work, tasks)
    cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    runner = cluster.collect(source, out, *args, "--concurrency", MID_RUN_CONCURRENCY)
    at = int(tasks * rng.uniform(0.2, 0.7))
    wait_until(lambda: count_lines(out) >= at or runner.poll() is not None, FINISH, f"{at} rollouts")
    Cluster.kill(runner)
    # Killed by the signal (not exited on its own first) with rollouts left for --resume.
    landed = runner.returncode == -signal.SIGKILL and count_lines(out) < len(keys)
    finish(cluster.collect(source, out, *args, "--resume"), cluster)
    return replace(tally(out, keys), fault_injected=landed)


def server_restart(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """Stop nats-server at a random moment for a second; its data stays on disk."""
    source, args, keys = weather_tasks(work, tasks)
    cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    runner = cluster.collect(source, out, *args, "--concurrency", MID_RUN_CONCURRENCY)
    at = int(tasks * rng.uniform(0.2, 0.6))
    wait_until(lambda: count_lines(out) >= at or runner.poll() is not None, FINISH, f"{at} rollouts")
    cluster.restart_server(downtime=1.0)
    # Still running once the server is back: it ran through the whole downtime.
    landed = running_with_work_left(runner, out, len(keys))
    finish(runner, cluster)
    return replace(tally(out, keys), fault_injected=landed)


def flaky_model(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """An OpenAI-compatible endpoint answering 429 or 500 to 20% of calls."""
    source, args, keys = weather_tasks(work, tasks)
    model_stub = OpenAIStub(failure_rate=0.2, seed=rng.randrange(1 << 30))
    stub = StubServer(model_stub)
    url = stub.start()
    try:
        model = ("--model-url", url, "--model", "stub", "--model-api", "responses")
        cluster.start_worker(WEATHER, WEATHER_AGENT, "openai", model_args=model)
        out = work / "out.jsonl"
        finish(cluster.collect(source, out, *args), cluster)
    finally:
        stub.stop()
    return replace(tally(out, keys), fault_injected=model_stub.failed > 0)


def long_rollouts(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """Ten 5 MB rollouts (a long conversation in the prompt) among ordinary ones."""
    rows = EXAMPLE.read_text().splitlines()
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x" * 5000} for i in range(1000)]
    big = json.loads(rows[0])
    big["responses_create_params"]["input"] = history + big["responses_create_params"]["input"]
    lines = [json.dumps({**big, "_ng_task_index": 10_000 + i}) for i in range(10)]
    lines += [json.dumps({**json.loads(rows[i % len(rows)]), "_ng_task_index": i}) for i in range(tasks - 10)]
    source = work / "tasks.jsonl"
    source.write_text("\n".join(lines) + "\n")
    keys = {(10_000 + i, 0) for i in range(10)} | {(i, 0) for i in range(tasks - 10)}
    cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    finish(cluster.collect(source, out, "--agent", WEATHER_AGENT), cluster)
    sizes = [
        len(line) for line in out.read_text().splitlines() if json.loads(line)["_ng_task_index"] >= 10_000
    ]
    if len(sizes) != 10 or min(sizes) < 5_000_000:
        raise RuntimeError(f"expected rollouts of 5 MB or more, got sizes {sizes}")
    return replace(tally(out, keys), fault_injected=True)


def frozen_worker(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """SIGSTOP one of two workers (each serving the environment, the agent and the model)
    mid-run, for `FROZEN_FOR` seconds or until the run ends, then SIGCONT. Measures how
    long throughput stayed under half of what it was before the freeze."""
    source, args, keys = weather_tasks(work, tasks)
    workers = [cluster.start_worker(*WORKER), cluster.start_worker(*WORKER)]
    out = work / "out.jsonl"
    runner = cluster.collect(source, out, *args, "--concurrency", "256")
    watch = Watch(out)
    at = int(tasks * rng.uniform(0.15, 0.3))
    watch.until(lambda: watch.lines >= at or runner.poll() is not None, FINISH, f"{at} rollouts")
    frozen = workers[rng.randrange(len(workers))]
    os.kill(frozen.pid, signal.SIGSTOP)
    froze = time.monotonic()
    try:
        landed = running_with_work_left(runner, out, len(keys))
        watch.until(lambda: runner.poll() is not None or time.monotonic() > froze + FROZEN_FOR, FINISH, "")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    finish(runner, cluster)
    watch.sample()
    return replace(tally(out, keys), fault_injected=landed, slowed=watch.slowed(froze))


def two_runs(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """While a collection runs, a second `collect` and a `collect --resume` on its output: each
    must refuse at once, naming the run that holds it. Then the first is killed and two
    `--resume`s start together: one finishes the run; the other refuses, or (if it started
    after the first was done) finds nothing left to do."""
    source, args, keys = weather_tasks(work, tasks)
    worker = cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    first = cluster.collect(source, out, *args, "--concurrency", "4")
    at = int(tasks * rng.uniform(0.1, 0.3))
    wait_until(lambda: count_lines(out) >= at or first.poll() is not None, FINISH, f"{at} rollouts")
    # The worker is held still while the second runs start (seconds on a busy machine), so the
    # first run, waiting for its results, still has most of its work left when it is killed.
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        seconds = [
            cluster.collect(source, out, *args, *extra, log=f"second-{number}.log")
            for number, extra in enumerate(((), ("--resume",)))
        ]
        for number, second in enumerate(seconds):
            code = second.wait(timeout=30)
            said = cluster.log(f"second-{number}.log")
            if code != 1 or f"is being written by another run (pid {first.pid} " not in said:
                raise RuntimeError(f"a second run on the same output exited {code}:\n{said[-2000:]}")
        landed = running_with_work_left(first, out, len(keys))
        Cluster.kill(first)
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    # Slow as well, so the one that takes the run is still at it when the other starts.
    pair = [
        cluster.collect(source, out, *args, "--resume", "--concurrency", "4", log=f"resume-{n}.log")
        for n in range(2)
    ]
    codes = sorted(process.wait(timeout=FINISH) for process in pair)
    if codes not in ([0, 0], [0, 1]):
        logs = "\n".join(cluster.log(f"resume-{n}.log")[-1500:] for n in range(2))
        raise RuntimeError(f"two --resume runs exited {codes}:\n{logs}")
    return replace(tally(out, keys), fault_injected=landed and codes == [0, 1])


POISON_TASKS = (
    b'{"responses_create_params": {"input": "hi"}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"[" * 100_000,
    b"\xde\xad\xbe\xef",
    b"[1, 2, 3]",
    b'{"no_params": true}',
)


def poison(cluster: Cluster, work: Path, tasks: int, rng: random.Random) -> Tally:
    """Input rows nested 1,000 and 100,000 deep, and, mid-run, tasks on the agent's queue
    that are no tasks (nested 100,000 deep, not JSON, not an object, no prompt), four of
    each, under a run of their own: each bad row must become one failure line, each poison
    task one failure result, and the collection must lose nothing."""
    source, args, keys = weather_tasks(work, tasks)
    rows = source.read_text().splitlines()
    good = json.loads(rows[0])
    deep = [json.dumps(good)[:-1] + f', "x": {"[" * depth}{"]" * depth}}}' for depth in (1_000, 100_000)]
    source.write_text("\n".join(rows[:2] + deep[:1] + rows[2:] + deep[1:]) + "\n")
    bad_lines = {3, len(rows) + 2}
    cluster.start_worker(*WORKER)
    out = work / "out.jsonl"
    runner = cluster.collect(source, out, *args)
    wait_until(lambda: count_lines(out) >= tasks // 10 or runner.poll() is not None, FINISH, "rollouts")
    landed = runner.poll() is None
    sent, results = asyncio.run(
        _poison_queue(cluster.url, f"poison{rng.randrange(1 << 30)}", POISON_TASKS * 4)
    )
    finish(runner, cluster, expected=3)  # some rows failed: the bad input rows
    result = tally(out, keys, bad_lines)
    seqs = Counter(seq for seq, _ in results)
    return replace(
        result,
        expected=result.expected + sent,
        failed=result.failed + len(results),
        expected_failures=result.expected_failures + sent,
        lost=result.lost + sent - len(seqs),
        duplicated=result.duplicated + sum(count - 1 for count in seqs.values()),
        failure_classes=result.failure_classes + Counter(failure for _, failure in results),
        fault_injected=landed,
    )


async def _poison_queue(url: str, run: str, bodies: tuple[bytes, ...]) -> tuple[int, list[tuple[int, str]]]:
    """Publish `bodies` as tasks of `run`; the (seq, failure class) of each result that comes
    back within 30 s."""
    nc = await bus.connect(url, name="poison")
    results: list[tuple[int, str]] = []

    async def keep(msg: Msg) -> None:
        row = json.loads(msg.data)
        results.append((int((msg.headers or {})["Gym-Seq"]), str(row.get("_ng_failure_class"))))

    try:
        await nc.client.subscribe(bus.subjects.results(run), cb=keep)
        js = nc.js
        for seq, body in enumerate(bodies):
            headers = bus.run.task_headers(run, seq, 0, time.time() + 600)
            await js.publish(bus.subjects.tasks(WEATHER_AGENT), body, headers=headers)
        deadline = time.monotonic() + 30
        while len(results) < len(bodies) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # a duplicate would come now
    finally:
        await nc.close()
    return len(bodies), results


SCENARIOS: dict[str, Callable[[Cluster, Path, int, random.Random], Tally]] = {
    "baseline": baseline,
    "worker kill -9 (x2)": worker_kill,
    "runner kill -9 + --resume": runner_kill,
    "nats-server restart": server_restart,
    "model 429/500 on 20%": flaky_model,
    "5 MB rollouts": long_rollouts,
    "frozen worker (SIGSTOP)": frozen_worker,
    "poison rows and tasks": poison,
    "two runs on one output": two_runs,
}


def run(name: str, tasks: int, seed: int) -> Tally:
    with (
        tempfile.TemporaryDirectory(prefix="gymbus-faults-") as tmp,
        Cluster(Path(tmp), ack_wait=3.0) as cluster,
    ):
        return SCENARIOS[name](cluster, Path(tmp), tasks, random.Random(seed))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=2000, help="rollouts per scenario")
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS), help="scenarios to run (default: all)")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="for the random moments")
    parser.add_argument("--soak", type=float, metavar="MINUTES",
                        help="instead: one collection this long on a locked bus, a random fault every few seconds")  # fmt: skip
    parser.add_argument("--every", type=float, default=5.0, help="--soak: mean seconds between faults")
    parser.add_argument("--hog", type=int, default=0, metavar="N",
                        help="--soak: N processes spinning a core each beside it (a machine with no core to spare)")  # fmt: skip
    args = parser.parse_args()
    if args.soak is not None:
        from bench.soak import soak

        print(f"seed {args.seed}")
        return soak(args.soak, args.seed, args.every, args.hog)
    print(f"seed {args.seed}; {args.tasks} tasks per scenario")
    print(
        f"{'scenario':28} {'expected':>8} {'written':>8} {'failed':>7} {'lost':>5} {'duplicated':>10} {'retried':>8} {'seconds':>8} {'fault':>5}"
    )
    bad = 0
    for name in args.only or list(SCENARIOS):
        started = time.monotonic()
        result = run(name, args.tasks, args.seed)
        seconds = time.monotonic() - started
        print(
            f"{name:28} {result.expected:8} {result.written:8} {result.failed:7} {result.lost:5} "
            f"{result.duplicated:10} {result.retried:8} {seconds:8.1f} {FAULT[result.fault_injected]:>5}",
            flush=True,
        )
        if result.failure_classes:
            asked = (
                f" ({result.expected_failures} asked for by the scenario)" if result.expected_failures else ""
            )
            print(f"{'':28} failures: {dict(result.failure_classes)}{asked}")
        if result.slowed is not None:
            print(f"{'':28} throughput under half for {result.slowed:.1f} s (budget {FROZEN_BUDGET:.0f} s)")
        if result.tool_errors:
            print(f"{'':28} {result.tool_errors} rollouts showed the model a tool error")
        bad += result.lost + result.duplicated + result.failed - result.expected_failures
        bad += result.fault_injected is False
        bad += result.tool_errors + ((result.slowed or 0.0) > FROZEN_BUDGET)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
