"""Every timeout and limit GymBus uses: finite, named, and defined here only.

Library defaults (nats-py's 0.5 s request timeout, unbounded agent loops) never apply:
every call site takes its bound from these objects.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

__all__ = [
    "CALL_RETRY",
    "CLAIM_STORE_RETRY",
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUTS",
    "MODEL_RETRY",
    "RESULTS_MAX_AGE",
    "RESULT_RETRY",
    "ROLLOUT_RESTART",
    "SANDBOX_LIMITS",
    "VIEW_LIMITS",
    "WEB_LIMITS",
    "Limits",
    "RetryPolicy",
    "SandboxLimits",
    "Timeouts",
    "ViewLimits",
    "WebLimits",
]


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `attempts` tries; before try `n+1`, wait `min(cap, base * 2**n)` seconds
    times a random factor in [0.5, 1.5) (so many callers do not retry in step)."""

    attempts: int
    base: float
    cap: float

    def delay(self, retry: int) -> float:
        return min(self.cap, self.base * 2**retry) * random.uniform(0.5, 1.5)


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for each kind of call."""

    connect: float = 5.0
    """Connecting to NATS (and waiting for the embedded server to listen)."""
    model: float = 600.0
    """One model generation; long reasoning at a busy endpoint takes minutes."""
    model_connect: float = 10.0
    """Opening a connection to a model server; one that takes longer counts as down."""
    model_server_down: float = 30.0
    """A model server that refused or dropped a connection gets no rollouts for this long
    (they go to the other servers of the list), then is tried again."""
    tool: float = 120.0
    """One tool call."""
    seed: float = 60.0
    """Setting up one session."""
    verify: float = 300.0
    """One verification (an LLM judge or a sandboxed test run may be slow)."""
    check: float = 60.0
    """One call `gym-runner check` makes (a seed, a tool, a verify): an author waiting at a
    terminal for a hung function should not wait as long as a rollout would."""
    agent_run: float = 3600.0
    """A whole rollout requested directly on `gym.agent.<agent>.run`."""
    rollout: float = 3600.0
    """Deadline of one rollout from the moment it is published; later work is dropped."""
    result_grace: float = 15.0
    """How long past a rollout's deadline its runner still waits for the agent's own report
    (a failure row that says why) before writing the rollout off as `deadline_exceeded`."""
    discovery: float = 0.5
    """How long `$SRV` discovery gathers replies."""
    cluster_forming: float = 30.0
    """How long JetStream set-up (a stream, a bucket, a consumer, a run's key) keeps asking a
    cluster that is forming or electing a stream's leader."""
    ping: float = 0.5
    """Whether a function is live: how long to wait for its `$SRV.PING` answer."""
    worker_start: float = 180.0
    """Workers a command starts for itself must answer within this (one that exits fails the
    command at once). A worker imports its functions' libraries before it answers
    (reasoning-gym, math-verify, NLTK: measured 29 s for six environments on a two-core
    machine under load), so a busy machine needs minutes."""
    unserved_grace: float = 30.0
    """A rollout already waiting for an agent that no live worker serves any more is answered
    "no worker" after this long without one (a worker being replaced, or restarted on
    another machine, comes back sooner); at once where the workers that served it were
    given up on."""
    worker_restart: float = 0.5
    """A worker process a command started that exits is replaced after this; the wait
    doubles with each failed start in a row (`worker_steady`), up to `worker_restart_most`."""
    worker_restart_most: float = 30.0
    """The longest wait before a worker process that exited is replaced."""
    worker_steady: float = 30.0
    """A worker process that exits sooner than this after its start failed to start (a
    function that crashes on import); one that ran longer started fine (it crashed on
    something it was doing, and its replacement starts with a clean slate)."""
    drain: float = 10.0
    """Graceful shutdown: how long in-flight requests may take to finish."""
    reconnect_window: float = 10.0
    """A process that is stopping and has lost its bus waits this long for it to come back
    (a server restart takes seconds) before it stops without it: then nothing in flight can
    finish, and a pod or compose shutdown stops the server with everything else."""
    kill_grace: float = 1.0
    """Stopping now (a second Ctrl-C): how long a worker gets after SIGTERM before SIGKILL."""
    repeat_signal: float = 0.5
    """A second SIGINT or SIGTERM within this long of the first is the same request to stop:
    `timeout` sends its signal to the command and again to its process group."""
    fetch: float = 0.5
    """One JetStream pull; short, so a worker notices free capacity quickly."""
    pull_expires: float = 10.0
    """A standing pull request lives this long on the server (a continuous puller renews it)."""
    pull_grace: float = 2.0
    """After a pull request expires, how long to wait for its status before forgetting it."""
    result_ack_wait: float = 10.0
    """A result the runner pulled but did not ack is sent again after this: writing a batch
    takes milliseconds, so this only redelivers what a reconnect lost."""
    ack_wait: float = 12.0
    """A task not acked or heartbeated for this long is redelivered to another worker."""
    duplicate_window: float = 120.0
    """A task or result published again within this long of the first (same message id) is
    dropped by the stream: a publish retried after a lost acknowledgement is stored once."""
    keepalive: float = 2.0
    """A worker tells a waiting requester it is still working this often."""
    late_reply: float = 300.0
    """How much longer than a call's own timeout its answer may still come (it queued at a
    busy worker, or a keep-alive kept it going): the window in which nats-server lets a
    serving role answer a request it received (`allow_responses`), and how long a claimed
    body waits for its reader beyond its call's timeout."""
    silence: float = 5.0
    """A requester that hears nothing (no reply, no keep-alive) this long gives up: the
    worker died, or a server restart lost the request or its reply. A call whose keep-alives
    came further apart (a busy worker) is allowed 2.5 times its longest gap, up to
    `silence_most`."""
    silence_most: float = 30.0
    """The longest silence a requester allows a call whose keep-alives came late."""
    silence_check: float = 0.5
    """How often a requester checks its requests for silence (and its connection for closing)."""
    server_ping: float = 1.0
    """The embedded nats-server pings a client that sent it nothing for this long; after
    `Limits.server_pings_out` pings without an answer (a frozen or vanished process) it
    closes the connection, which takes the client out of every queue group. So no process
    may hold its event loop for seconds: a `cpu_bound` function's calls run in threads, and
    start-up imports and waits for child processes run in threads too."""
    session_ttl: float = 7200.0
    """Session state expires this long after its last write (longer than any rollout)."""
    nemo_gym_install: float = 1800.0
    """Building one NeMo Gym server's virtual environment (seconds with uv, minutes with pip,
    longer for servers that compile their requirements)."""
    http_keepalive: float = 15.0
    """An idle pooled HTTP connection (to a hosted NeMo Gym server) is closed after this long."""
    adapter_load: float = 300.0
    """A new policy version (a LoRA adapter) reaching every inference server of the policy:
    the trainer's weight sync waits this long for their syncers to report it loaded."""
    adapter_report: float = 1.0
    """How often the `sync-adapters` process beside a server checks it and reports what it holds."""
    adapter_report_ttl: float = 10.0
    """A server whose syncer has not reported for this long counts as gone."""
    adapter_missing: float = 2.0
    """A server that answered that it lacks the adapter a call names gets no calls naming
    an adapter for this long (its syncer is catching up); the others get them."""
    adapter_http: float = 120.0
    """One call to an inference server's adapter endpoints (list, load, unload)."""
    nemo_gym_start: float = 600.0
    """A NeMo Gym server, from its process start to answering its liveness route: NeMo
    Gym's own default (`server_spinup_timeout_seconds`), as some servers load data or wait
    for a sandbox for minutes before they answer or fail."""
    nemo_gym_exit: float = 2.0
    """A hosted NeMo Gym agent that dropped a connection is looked at this long: if its
    process exits meanwhile, the rollout goes to another worker; if not, it failed."""


@dataclass(frozen=True)
class Limits:
    """Sizes and counts."""

    max_in_flight: int = 1024
    """Requests one endpoint handles at once in one process; more wait in the client queue."""
    agent_concurrency: int = 256
    """Rollouts one agent worker process runs at once."""
    worker_failed_starts: int = 5
    """Failed starts in a row (`Timeouts.worker_steady`) after which a command stops
    replacing a worker process and reports why (its log's last line)."""
    cpu_bound_calls: int = 4
    """Calls of `cpu_bound` environments a worker process runs at once, each in a thread
    (the others wait, their callers hearing keep-alives). Python runs one thread at a time:
    more threads compute no faster, and every computing thread delays the event loop's turn
    to answer the bus."""
    max_steps: int = 16
    """Model calls per rollout before the agent stops and verifies what it has (the
    multi-turn agent: per policy turn, between two user messages)."""
    max_user_turns: int = 5
    """Simulated user messages per multi-turn rollout; a row's `max_user_turns` overrides it."""
    fetch_batch: int = 64
    """Most tasks pulled in one JetStream fetch."""
    publish_window: int = 4096
    """Task publishes awaiting their acknowledgement at once."""
    result_window: int = 4096
    """Results the runner holds pulled but not yet written."""
    max_payload: int = 8 * 1024 * 1024
    """Max payload of the embedded server (NATS's recommended ceiling)."""
    max_depth: int = 128
    """Deepest nesting of arrays and objects in a message or an input row (serde_json's
    default too). Deeper JSON is refused as a bad request, bad task or bad row before it is
    decoded: decoders recurse once per level, and 100,000 levels crash a handler."""
    max_deliver: int = 5
    """Deliveries of one task before it is given up as failed."""
    server_pings_out: int = 2
    """Unanswered pings after which the embedded nats-server drops a client (see
    `Timeouts.server_ping`)."""
    max_ack_pending: int = 32768
    """Tasks of one agent in flight across all its workers (a cluster-wide cap)."""
    max_waiting: int = 4096
    """Pull requests (one per worker fetch) waiting at once on one agent's consumer."""
    collect_concurrency: int = 1024
    """Rollouts a collection keeps in flight (`collect --concurrency`)."""
    max_attempts: int = 3
    """Attempts per rollout across `collect --resume`s before its failure is final."""
    embedded_workers: int = 2
    """Worker processes a command starts on the embedded server (two use both cores of a
    small machine: measured 1,600-2,100 rollouts/s against 1,250-1,500 with one)."""
    verify_concurrency: int = 256
    """Rows `verify` keeps in flight (and held for writing in input order)."""
    write_batch_lines: int = 2048
    """Rows a writer holds before it writes them out (and its file is whole again)."""
    model_connections: int = 4096
    """HTTP connections a model adapter keeps open to its endpoint(s), per worker process."""
    metrics_reservoir: int = 65536
    """Values per field the aggregate metrics keep exactly; beyond, a uniform sample of this
    size estimates the median."""
    claim_store_bytes: int = 1024**3
    """Bound of the claim store (GYM_CLAIMS), which holds the bodies too big for one
    message until their readers take them. JetStream reserves it on disk when the stream is
    created, so it is modest; an operator wanting another bound creates the stream first."""
    claim_chunk_bytes: int = 128 * 1024
    """A claimed body is stored in chunks of this size, one message each (measured fastest)."""
    adapter_bytes: int = 4 * 1024**3
    """Largest LoRA adapter (its files together) a trainer publishes on the bus."""


@dataclass(frozen=True)
class WebLimits:
    """Bounds of every HTTP request the tool environments make."""

    connect: float = 5.0
    """Seconds to open a connection."""
    read: float = 20.0
    """Seconds to wait for each chunk of a response (and to write, and for a pooled connection)."""
    max_connections: int = 256
    """Connections open at once per worker process."""
    max_keepalive: int = 64
    """Idle connections kept for reuse per worker process."""
    max_redirects: int = 10
    """Redirects followed for one page (or one search)."""
    max_page_bytes: int = 10 * 1024 * 1024
    """A page larger than this is not read."""
    max_words: int = 10_000
    """A page text of more words is truncated (NeMo Gym's rule)."""
    keep_chars: int = 5_000
    """Characters kept from each end of a truncated text (NeMo Gym's rule)."""


def _sandbox_concurrency() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class SandboxLimits:
    """Bounds of the code sandbox (code_gen's), per worker process. All finite; where NeMo
    Gym's code_gen has the setting, the default is its value.

    Whole-sandbox bounds hold only where the worker can make a cgroup per sandbox; where it
    cannot, each test is one process with no memory files, so `memory_bytes` bounds it.
    """

    concurrency: int = _sandbox_concurrency()
    """Tests running at once (NeMo Gym's `num_processes` is 8; more than the CPUs only
    stretches wall-clock time). Submissions take turns for these slots, fairly."""
    test_timeout: float = 10.0
    """CPU seconds per test (NeMo Gym's `unit_test_timeout_secs`)."""
    memory_bytes: int = 2 * 1024**3
    """Address space of each process of a test (RLIMIT_AS), which also caps its stack."""
    sandbox_memory_bytes: int = 2 * 1024**3
    """Memory of one whole sandbox (a cgroup): every process, and what the kernel holds for
    them: files in its /tmp, memory files, pipes. Past it the kernel kills a test process."""
    max_processes: int = 32
    """Processes and threads of one sandbox together (the cgroup's `pids.max`, and
    RLIMIT_NPROC)."""
    max_output_bytes: int = 32 * 1024**2
    """Standard output of one test, and any file it writes (RLIMIT_FSIZE)."""
    scratch_bytes: int = 64 * 1024**2
    """Size of the sandbox's private /tmp."""
    max_open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    startup_timeout: float = 30.0
    """Seconds for a sandbox to start and compile the code."""
    total_timeout: float = 240.0
    """Seconds for one submission from the moment its verify starts, waiting for slots
    included; below the bus's verify timeout (300 s), so the caller always gets a verdict."""
    quantum: float = 10.0
    """Seconds a submission keeps a slot, test after test, before it yields the slot at the
    end of a test to a submission that has had less time so far."""
    cleanup_timeout: float = 5.0
    """Seconds to wait for a killed sandbox's processes to be gone."""
    uid_base: int = 2_000_000_000
    """Root mode: each sandbox runs as its own uid in `[uid_base, uid_base + uid_count)`, a
    range no account on the host uses."""
    uid_count: int = 1 << 24
    """How many uids the sandboxes pick from (at random, never two live ones alike)."""

    @property
    def wall_timeout(self) -> float:
        """Wall-clock seconds per test: the CPU limit with room for a busy machine."""
        return 3 * self.test_timeout + 2.0


@dataclass(frozen=True)
class ViewLimits:
    """Bounds of the rollout viewer (`gym-runner view`): what one answer of its server holds,
    and what a self-contained `--html` page may embed (a browser holds the whole page)."""

    page_rows: int = 100
    """List rows in one page, unless the page asks for another number."""
    max_page_rows: int = 1000
    """Most list rows one page may ask for."""
    skipped_listed: int = 200
    """Skipped (unreadable) lines named one by one; beyond this they are only counted."""
    html_rows: int = 200_000
    """Most list rows an `--html` page embeds; a larger file is refused (serve it instead)."""
    html_rollouts: int = 2_000
    """Most whole rollouts an `--html` page embeds, the first in file order; the list
    still shows every row, and a rollout past the bound says it is not embedded."""
    html_rollout_bytes: int = 32 * 1024 * 1024
    """Most bytes of whole rollouts an `--html` page embeds (a few long rollouts can weigh
    more than thousands of short ones)."""


DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_LIMITS = Limits()
WEB_LIMITS = WebLimits()
SANDBOX_LIMITS = SandboxLimits()
VIEW_LIMITS = ViewLimits()


RESULTS_MAX_AGE = 3 * 24 * 3600.0
"""Results (and claimed bodies) a runner never collected are dropped after three days."""

MODEL_RETRY = RetryPolicy(attempts=8, base=0.5, cap=20.0)
"""Model calls: rate limits and overloaded endpoints recover within tens of seconds."""
CALL_RETRY = RetryPolicy(attempts=5, base=0.2, cap=5.0)
"""Seed, verify and tool calls that never reached a worker, or may safely run twice."""
ROLLOUT_RESTART = RetryPolicy(attempts=3, base=0.5, cap=4.0)
"""A rollout whose tool call was lost (its worker died or froze mid-call), or whose session's
state was lost (`SessionLost`: the process holding it died), starts over from a fresh
session: a frozen worker is out of its queue groups within seconds."""
RESULT_RETRY = RetryPolicy(attempts=12, base=0.25, cap=8.0)
"""Storing a finished rollout's result while the bus restarts (about a minute in all)."""
CLAIM_STORE_RETRY = RetryPolicy(attempts=12, base=0.5, cap=15.0)
"""Storing a task or result body while the claim store is full (about two minutes in all):
bodies leave it as their readers take them."""
