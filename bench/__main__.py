"""Run the performance benchmarks and print one line per figure.

    python -m bench [--quick] [--only P0 P1 ...] [--rows N] [--runs N]

Everything (nats-server, workers, runner, a stub model endpoint) is started on loopback by
the benchmark itself. P1 and P2 print the median of `--runs` runs (3 by default) and their
range, since one run on a small, shared machine is noisy; P13 and P14 alternate their two
sides `--runs` times. `--quick` uses fewer rollouts, one run each and a 100k-row P4 for a fast look.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TypeVar

from bench import async_training, nemo_gym, nemo_gym_agents, nemo_gym_front, nemo_rl_front, perf
from gymbus.schemas import GymError

Run = TypeVar("Run", perf.Collection, nemo_gym_front.FrontCollection, nemo_rl_front.StartedRun)

TARGETS = {
    "P1": "target >= 1,000 rollouts/s and <= 3 CPU-s per 1,000",
    "P2": "target >= 90% of ideal at 4,096, >= 75% at 16,384",
    "P3": "target >= 90% of ideal at 1,024",
    "P4": "target runner RSS at N rows <= 1.2x at 10k; all processes <= 400 MB in P1",
    "P5": "target <= 3 s",
    "P6": "target <= 5 ms",
    "P7": "no target: how the rate grows with worker processes and servers",
    "P8": "target >= 85% of the bare aiohttp rate at 1,024",
    "P10": "no target: what the bridge adds to a NeMo Gym server's own cost",
    "P11": "target: asynchronous waits <= 10% of a step, where synchronous waits >= 50%",
    "P12": "no target: what hosting adds to a NeMo Gym agent's own rollout",
    "P13": "target: GymBus >= 3x the rate at <= 1/3 of the CPU",
    "P14": "target: GymBus >= 5x the rate at <= 1/5 of the CPU, and a start no slower than NeMo Gym's own",
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rollouts, 100k-row P4")
    parser.add_argument(
        "--only",
        nargs="*",
        default=[f"P{n}" for n in range(15)],
    )
    parser.add_argument("--rows", type=int, default=None, help="P4's large input (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=None, help="runs of P1 and each P2 (default 3)")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    work = perf.workdir()
    tasks = 4000 if args.quick else 10000
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    print(f"GymBus benchmarks ({time.strftime('%Y-%m-%d %H:%M')}); all on loopback", flush=True)

    p0 = perf.p0_round_trips()
    if "P0" in args.only:
        print(f"P0 raw nats-py request-reply: {p0:,.0f} round trips/s (the yardstick)", flush=True)
    p1_rate = None
    if {"P1", "P2", "P4"} & set(args.only):
        p1_runs = [perf.p1_rollouts(tasks, work) for _ in range(runs)]
        p1 = median(p1_runs)
        p1_rate = p1.rate
        print(
            f"P1 single-step tool rollouts: {p1.rate:,.0f} rollouts/s ({p1.rate / p0:.1%} of P0){spread(p1_runs)}, "
            f"{p1.cpu_per_thousand:.2f} CPU-s per 1,000 rollouts, {p1.rollouts:,} rollouts, 2 worker processes "
            f"[{TARGETS['P1']}]",
            flush=True,
        )
    if "P2" in args.only:
        for in_flight in (256, 1024, 4096, 16384):
            p2_runs = [perf.p2_slow_model(in_flight, work) for _ in range(runs)]
            run = median(p2_runs)
            ideal = min(in_flight / 0.4, p1_rate or run.rate)
            print(
                f"P2 200 ms model, {in_flight:>6,} in flight: {run.rate:,.0f} rollouts/s{spread(p2_runs)}, "
                f"ideal {ideal:,.0f} ({run.rate / ideal:.0%}) [{TARGETS['P2']}]",
                flush=True,
            )
    if "P3" in args.only:
        for concurrency in (1024, 4096):
            ideal = concurrency / 0.2
            for client, label in (("adapter", "openai adapter"), ("aiohttp", "bare aiohttp (ceiling)")):
                run = perf.p3_openai_adapter(concurrency, client)
                print(
                    f"P3 {label}, {concurrency:,} concurrent 200 ms calls: {run.calls_per_second:,.0f} calls/s, "
                    f"ideal {ideal:,.0f} ({run.calls_per_second / ideal:.0%}), "
                    f"{run.cpu_ms_per_call:.2f} CPU-ms per call [{TARGETS['P3']}]",
                    flush=True,
                )
    if "P4" in args.only:
        small, large = perf.p4_runner_rss(10_000, work), perf.p4_runner_rss(rows, work)
        print(
            f"P4 runner peak RSS: {small.runner_rss / 1e6:.0f} MB at 10k rows, {large.runner_rss / 1e6:.0f} MB at "
            f"{rows:,} rows ({large.runner_rss / small.runner_rss:.2f}x); all processes in P1: "
            f"{max(run.peak_rss for run in p1_runs) / 1e6:.0f} MB (highest run) [{TARGETS['P4']}]",
            flush=True,
        )
    if "P5" in args.only:
        first = min(perf.p5_first_rollout(work) for _ in range(3))
        print(
            f"P5 collect start to first rollout (embedded default): {first:.2f} s [{TARGETS['P5']}]",
            flush=True,
        )
    if "P6" in args.only:
        direct, queued = perf.p6_latency()
        print(
            f"P6 one rollout alone: {direct:.2f} ms direct, {queued:.2f} ms through the task queue "
            f"[{TARGETS['P6']}]",
            flush=True,
        )
    if "P7" in args.only:
        scaling(tasks, work)
    if "P8" in args.only:
        concurrency, ideal = 1024, 1024 / 0.2
        # Alternated, median of `runs` each: on a shared machine the load drifts between runs.
        pairs = [(perf.p8_vllm_function(concurrency, "aiohttp"), perf.p8_vllm_function(concurrency, "vllm"))
                 for _ in range(runs)]  # fmt: skip
        ceiling = sorted((pair[0] for pair in pairs), key=lambda rate: rate.calls_per_second)[(runs - 1) // 2]
        function = sorted((pair[1] for pair in pairs), key=lambda rate: rate.calls_per_second)[
            (runs - 1) // 2
        ]
        for label, rate in (("bare aiohttp (ceiling)", ceiling), ("vllm function, token capture", function)):
            print(
                f"P8 {label}, {concurrency:,} concurrent 200 ms chat calls: {rate.calls_per_second:,.0f} calls/s "
                f"({rate.calls_per_second / ideal:.0%} of ideal {ideal:,.0f}, "
                f"{rate.calls_per_second / ceiling.calls_per_second:.0%} of the ceiling), "
                f"{rate.cpu_ms_per_call:.2f} CPU-ms per call [{TARGETS['P8']}]",
                flush=True,
            )
    if "P9" in args.only:
        cost = perf.p9_http_model_cost(tasks // 2, work)
        http_ms = cost.http.cpu / cost.http.rollouts * 1000
        offline_ms = cost.offline.cpu / cost.offline.rollouts * 1000
        print(
            f"P9 weather rollouts, policy over HTTP (vllm function, token capture, local stub): "
            f"{http_ms:.2f} CPU-ms per rollout, {cost.ratio:.2f}x the offline policy's {offline_ms:.2f} "
            f"(same run, {cost.http.rollouts:,} rollouts each, stub not counted; "
            f"{cost.http.rate:,.0f} vs {cost.offline.rate:,.0f} rollouts/s)",
            flush=True,
        )

    if "P10" in args.only:
        bridge_cost()
    if "P11" in args.only:
        training(args.quick)
    if "P12" in args.only:
        hosted_agent_cost()
    if "P13" in args.only:
        front_rollouts(500 if args.quick else 2000, runs, work)
    if "P14" in args.only:
        started_rollouts(512 if args.quick else 2048, runs, work)


def training(quick: bool) -> None:
    """P11: synchronous against asynchronous training steps, rollouts of uneven length."""
    setting = async_training.Setting(steps=8 if quick else 20)
    for run in async_training.p11_training(setting):
        dropped = f", {run.dropped} stale samples dropped" if run.kind == "asynchronous" else ""
        print(
            f"P11 {run.kind} training, {setting.steps} steps of {setting.groups}x{setting.generations} rollouts "
            f"({setting.latency:.1f} s model, {setting.slow_share:.0%} of calls {setting.slow_factor:.0f}x slower; "
            f"{setting.train_seconds:.1f} s training step): {run.per_step:.2f} s per step, trainer waiting "
            f"{run.wait_share:.0%} of it (first step: {run.waits[0]:.2f} s waiting){dropped} [{TARGETS['P11']}]",
            flush=True,
        )


def bridge_cost() -> None:
    """P10: a `get_weather` call to NeMo Gym's own server, direct and through the bridge."""
    try:
        costs = nemo_gym.p10_bridge_cost()
    except (RuntimeError, OSError) as exc:  # no Python 3.13, or the server cannot start
        print(
            f"P10 skipped: NeMo Gym's server did not start ({exc}); see scripts/install-nemo-gym.sh",
            flush=True,
        )
        return
    direct, bridge, ported = costs["direct"], costs["bridge"], costs["ported"]
    print(
        f"P10 NeMo Gym tool call (example_single_tool_call get_weather): through the bridge {bridge.latency_ms:.2f} ms, "
        f"direct HTTP to the server {direct.latency_ms:.2f} ms: the bridge adds {bridge.latency_ms - direct.latency_ms:.2f} ms "
        f"and {bridge.worker_cpu_ms:.2f} CPU-ms per call (its worker), beside the server's own "
        f"{direct.server_cpu_ms:.2f} CPU-ms; 32 in flight: {bridge.calls_per_second:,.0f} vs "
        f"{direct.calls_per_second:,.0f} calls/s (one server process); GymBus's own port: {ported.latency_ms:.2f} ms, "
        f"{ported.calls_per_second:,.0f} calls/s [{TARGETS['P10']}]",
        flush=True,
    )


def hosted_agent_cost() -> None:
    """P12: a `gymnasium_agent` rollout of NeMo Gym's own, direct and hosted on the bus."""
    try:
        costs = nemo_gym_agents.p12_hosted_agent_cost()
    except (RuntimeError, OSError, GymError) as exc:  # no Python 3.13, or the agent cannot start
        print(
            f"P12 skipped: NeMo Gym's agent did not start ({exc}); see scripts/install-nemo-gym.sh",
            flush=True,
        )
        return
    direct, hosted = costs["direct"], costs["hosted"]
    print(
        f"P12 NeMo Gym agent rollout (gymnasium_agent, example_multi_turn_gymnasium, 2-3 model calls and steps): "
        f"hosted on the bus {hosted.latency_ms:.1f} ms, direct HTTP {direct.latency_ms:.1f} ms: hosting adds "
        f"{hosted.latency_ms - direct.latency_ms:.1f} ms and {hosted.worker_cpu_ms:.2f} CPU-ms per rollout (its worker), "
        f"beside NeMo Gym's own {direct.nemo_gym_cpu_ms:.2f} CPU-ms (agent and server: {hosted.nemo_gym_cpu_ms:.2f} "
        f"hosted); 16 in flight: {hosted.rollouts_per_second:,.0f} vs {direct.rollouts_per_second:,.0f} rollouts/s "
        f"[{TARGETS['P12']}]",
        flush=True,
    )


def front_rollouts(rollouts: int, rounds: int, work: Path) -> None:
    """P13: NeMo Gym's `ng_collect_rollouts` through GymBus's front and through `ng_run`'s
    servers, alternated `rounds` times; the median run of each side."""
    try:
        runs = nemo_gym_front.p13_front_rollouts(rollouts, rounds, work / "p13")
    except (
        RuntimeError,
        OSError,
        GymError,
    ) as exc:  # no Python 3.13, a stack that cannot start, a failed run
        print(f"P13 did not finish: {exc} (NeMo Gym's environments: scripts/install-nemo-gym.sh)", flush=True)
        return
    by_side = {side: [run for run in runs if run.side == side] for side in nemo_gym_front.SIDES}
    ours, theirs = median(by_side["gymbus"]), median(by_side["nemo_gym"])
    print(
        f"P13 ng_collect_rollouts, {rollouts:,} weather rollouts, 0 ms model, {rounds} alternated: "
        f"through GymBus's front {ours.rate:,.0f} rollouts/s{spread(by_side['gymbus'])}, "
        f"{ours.cpu_per_thousand:.2f} CPU-s per 1,000 (nats-server, worker, front); "
        f"through NeMo Gym's servers (ng_run) {theirs.rate:,.0f} rollouts/s{spread(by_side['nemo_gym'])}, "
        f"{theirs.cpu_per_thousand:.2f} CPU-s per 1,000 (its servers and Ray): GymBus "
        f"{ours.rate / theirs.rate:.1f}x the rate at {ours.cpu_per_thousand / theirs.cpu_per_thousand:.0%} "
        f"of the CPU; the client itself {ours.client_cpu_per_thousand:.2f} and "
        f"{theirs.client_cpu_per_thousand:.2f} CPU-s per 1,000, its start included [{TARGETS['P13']}]",
        flush=True,
    )


def started_rollouts(rollouts: int, rounds: int, work: Path) -> None:
    """P14: NeMo RL's call (`RunHelper().start` on `config_paths`, `run_examples`, `shutdown`)
    on GymBus's front and on NeMo Gym's own servers, alternated `rounds` times; the median
    run of each side, and the median start."""
    try:
        runs = nemo_rl_front.p14_started_rollouts(rollouts, rounds, work / "p14")
    except (RuntimeError, OSError, GymError) as exc:  # no Python 3.13, a side that cannot start, a failed run
        print(f"P14 did not finish: {exc} (NeMo Gym's environments: scripts/install-nemo-gym.sh)", flush=True)
        return
    by_side = {side: [run for run in runs if run.side == side] for side in nemo_rl_front.SIDES}
    ours, theirs = median(by_side["gymbus"]), median(by_side["nemo_gym"])
    starts = {side: sorted(run.start_seconds for run in by_side[side]) for side in by_side}
    start = {side: times[(len(times) - 1) // 2] for side, times in starts.items()}
    ours_cpu, theirs_cpu = ours.per_thousand(ours.side_cpu), theirs.per_thousand(theirs.side_cpu)
    print(
        f"P14 NeMo RL's call (RunHelper().start on config_paths, run_examples of {rollouts:,} weather rows at "
        f"once, shutdown), 0 ms model, {rounds} alternated: GymBus's front {ours.rate:,.0f} rows/s"
        f"{spread(by_side['gymbus'])}, {ours_cpu:.2f} CPU-s per 1,000 ({ours.per_thousand(ours.gymbus_cpu):.2f} "
        f"of it GymBus's front, worker and nats-server, the rest NeMo Gym's relay to the agent's /run), start "
        f"{start['gymbus']:.1f} s ({_range(starts['gymbus'])}); NeMo Gym's own servers {theirs.rate:,.0f} rows/s"
        f"{spread(by_side['nemo_gym'])}, {theirs_cpu:.2f} CPU-s per 1,000, start {start['nemo_gym']:.1f} s "
        f"({_range(starts['nemo_gym'])}): GymBus {ours.rate / theirs.rate:.1f}x the rate at "
        f"{ours_cpu / theirs_cpu:.0%} of the CPU, its start {start['gymbus'] / start['nemo_gym']:.2f}x NeMo Gym's; "
        f"the client itself {ours.per_thousand(ours.client_cpu):.2f} and {theirs.per_thousand(theirs.client_cpu):.2f} "
        f"CPU-s per 1,000 [{TARGETS['P14']}]",
        flush=True,
    )


def _range(seconds: list[float]) -> str:
    return f"{seconds[0]:.1f}-{seconds[-1]:.1f} s" if len(seconds) > 1 else "one run"


def scaling(tasks: int, work: Path) -> None:
    """P7: the rate with 1, 2 and 4 worker processes, and 2 on two cluster servers; then
    what limits it here and what N machines would give (from the CPU each part spent)."""
    runs = {}
    for workers, split in ((1, False), (2, False), (4, False), (2, True)):
        run = perf.p7_scaling(tasks, work, workers, split)
        where = "split over 2 of 3 cluster servers" if split else "one server"
        runs[(workers, split)] = run
        print(
            f"P7 {workers} worker process{'es' if workers > 1 else ''}, {where}: {run.rate:,.0f} rollouts/s, "
            f"{run.cpu_per_thousand:.2f} CPU-s per 1,000 (runner {run.runner_cpu / run.rollouts * 1000:.2f}) "
            f"[{TARGETS['P7']}]",
            flush=True,
        )
    base = runs[(2, False)]
    worker_cpu = (base.cpu - base.runner_cpu) / base.rollouts  # server + workers, per rollout
    runner_cpu = base.runner_cpu / base.rollouts
    cores = os.cpu_count() or 2
    print(
        f"P7 reading: {base.cpu / base.seconds:.1f} of {cores} cores busy at {base.rate:,.0f} rollouts/s, so more "
        f"processes on this machine only share the same cores; per rollout the servers and workers spend "
        f"{worker_cpu * 1000:.2f} ms of CPU and the runner {runner_cpu * 1000:.2f} ms. N machines of {cores} "
        f"cores running workers predict about N x {cores / worker_cpu:,.0f} rollouts/s, until one runner "
        f"process saturates at about {1 / runner_cpu:,.0f}/s (then split the input over several runners)",
        flush=True,
    )


def median(runs: list[Run]) -> Run:
    """The run with the median rate (the lower middle one of an even count)."""
    return sorted(runs, key=lambda run: run.rate)[(len(runs) - 1) // 2]


def spread(
    runs: list[perf.Collection] | list[nemo_gym_front.FrontCollection] | list[nemo_rl_front.StartedRun],
) -> str:
    if len(runs) == 1:
        return ""
    rates = sorted(run.rate for run in runs)
    return f" (median of {len(runs)}: {rates[0]:,.0f}-{rates[-1]:,.0f})"


if __name__ == "__main__":
    main()
