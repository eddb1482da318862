"""Escapes crafted submissions once made from the code sandbox, each attempted for real and
shown contained: reward 0, memory bounded, no key shared, no process left, honest rows
still verified in time.

Needs bubblewrap and libseccomp (`sh scripts/install-sandbox.sh`); the cgroup tests need a
writable cgroup filesystem (root), and are skipped, saying so, without one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import msgspec
import pytest

from gymbus.functions.environments._cgroups import CgroupHome, SandboxCgroup
from gymbus.functions.environments._sandbox import SandboxLimits, describe, open_sandbox
from gymbus.functions.environments._uids import LEASE_DIR
from gymbus.functions.environments._unit_tests import UnitTests, run_unit_tests
from gymbus.functions.environments.code_gen import CodeGenVerifyRequest, check
from gymbus.schemas import SANDBOX_LIMITS, DeadlineExceeded, Timeouts
from tests.functions.test_code_sandbox import all_gone, needs_sandbox, processes_with

pytestmark = needs_sandbox
needs_cgroup = pytest.mark.skipif(
    not CgroupHome.find().parents, reason=f"no cgroup can be made here: {CgroupHome.find().reason}"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="distinct uids per sandbox need root")
MiB = 1024**2


def request(code: str, inputs: list[str], outputs: list[str]) -> CodeGenVerifyRequest:
    text = f"```python\n{code}\n```"
    content = [{"type": "output_text", "text": text, "annotations": []}]
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "Solve it."}]},
        "response": {
            "id": "r",
            "created_at": 0,
            "model": "m",
            "output": [{"type": "message", "role": "assistant", "content": content}],
        },
        "verifier_metadata": {"unit_tests": {"inputs": inputs, "outputs": outputs}},
    }
    return msgspec.convert(row, CodeGenVerifyRequest)


def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this worker one that can make no cgroup (an unprivileged container, say)."""
    monkeypatch.setattr(CgroupHome, "find", staticmethod(lambda: CgroupHome(reason="none in this test")))


# Memory: RLIMIT_AS bounds one process; forked children and memory files add up past it.

HOG = """
import os
parts = int(input())
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        try:
            block = b"x" * (parts * 2**20)
            os.write(1, b"")
            os._exit(0)
        except BaseException:
            os._exit(1)
    children.append(pid)
held = []
for _ in range(parts // 16):
    fd = os.memfd_create("hog")
    os.write(fd, b"y" * (16 * 2**20))
    held.append(fd)
ok = all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children)
print("held" if ok else "a child failed")
"""
"""Three children of `parts` MiB each and `parts` MiB of memory files: each piece is far
below the address-space limit, the sum is not."""


async def test_memory_of_forked_children_and_memory_files_is_bounded_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not CgroupHome.find().parents:
        pytest.skip(f"no cgroup can be made here: {CgroupHome.find().reason}")
    peaks: list[int | None] = []
    remove = SandboxCgroup.remove

    async def measured(self: SandboxCgroup, timeout: float) -> bool:
        peaks.append(self.peak_memory())
        return await remove(self, timeout)

    monkeypatch.setattr(SandboxCgroup, "remove", measured)
    limits = SandboxLimits(test_timeout=10, memory_bytes=1024 * MiB, sandbox_memory_bytes=512 * MiB)
    result = await check(request(HOG, ["320"], ["held"]), limits)  # 4 x 320 MiB > 512 MiB
    assert result.reward == 0.0 and result.result in ([-2], [-4]), result.metadata
    assert peaks and all(peak is not None and peak <= limits.sandbox_memory_bytes for peak in peaks)


async def test_the_same_memory_fits_when_it_is_within_the_bound() -> None:
    """The attack above is real: given room, the same code holds it all and passes."""
    if not CgroupHome.find().parents:
        pytest.skip(f"no cgroup can be made here: {CgroupHome.find().reason}")
    limits = SandboxLimits(test_timeout=10, memory_bytes=1024 * MiB, sandbox_memory_bytes=512 * MiB)
    assert (await check(request(HOG, ["64"], ["held"]), limits)).reward == 1.0


async def test_without_a_cgroup_a_test_is_one_process_with_no_memory_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_cgroup(monkeypatch)
    complete, line = describe()
    assert not complete and "no cgroup can be made (none in this test)" in line
    limits = SandboxLimits(test_timeout=5, memory_bytes=1024 * MiB)
    result = await check(request(HOG, ["64"], ["held"]), limits)
    assert result.reward == 0.0 and result.metadata is not None
    assert result.metadata["error"] == "PermissionError(1, 'Operation not permitted')"  # fork refused
    code = """
import os, subprocess, threading
for name, attempt in [("memfd", lambda: os.memfd_create("x")), ("spawn", lambda: subprocess.run(["/bin/true"]))]:
    try:
        attempt()
        print(name, "allowed")
    except OSError as exc:
        print(name, exc.errno)
threading.Thread(target=print, args=("thread ran",)).start()
"""
    async with open_sandbox(code, None, limits) as sandbox:
        run = await sandbox.run("", limits.wall_timeout)
    assert run.output == "memfd 1\nspawn 1\nthread ran\n"  # EPERM; threads share the address space


# Kernel keyrings and other state shared beyond the sandbox: refused by seccomp.


def syscall_number(name: str) -> int:
    import pyseccomp  # present wherever the sandbox is

    return int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))


def keyring_code(secret: str) -> tuple[str, str]:
    add, request_key, keyctl = (syscall_number(n) for n in ("add_key", "request_key", "keyctl"))
    preamble = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    adds = preamble + (
        f'r = libc.syscall({add}, b"user", b"{secret}", b"42", 2, -4)  # the user keyring\n'
        'print("added" if r > 0 else f"refused {ctypes.get_errno()}")\n'
    )
    reads = preamble + (
        f'key = libc.syscall({request_key}, b"user", b"{secret}", None, 0)\n'
        "buf = ctypes.create_string_buffer(16)\n"
        f"n = libc.syscall({keyctl}, 11, key, buf, 16)  # KEYCTL_READ\n"
        'print(buf.value.decode() if key > 0 and n > 0 else "none")\n'
    )
    return adds, reads


async def test_a_key_added_by_one_submission_is_not_readable_by_the_next() -> None:
    adds, reads = keyring_code(f"gymbus-{uuid.uuid4().hex[:8]}")
    limits = SandboxLimits(test_timeout=2, uid_count=1)  # every sandbox gets the same uid
    first = await check(request(adds, [""], ["added"]), limits)
    assert first.reward == 0.0 and first.metadata is not None and first.metadata["output"] == "refused 1\n"
    second = await check(request(reads, [""], ["42"]), limits)  # a test that needs the key
    assert second.reward == 0.0 and second.metadata is not None and second.metadata["output"] == "none\n"


REFUSED_CALLS = {
    "keyctl": "0, 0, 0, 0, 0",
    "ptrace": "0, 0, 0, 0",  # PTRACE_TRACEME
    "perf_event_open": "0, 0, -1, -1, 0",
    "bpf": "0, 0, 0",
    "userfaultfd": "0",
    "io_uring_setup": "1, 0",
    "unshare": "0x10000000",  # CLONE_NEWUSER
    "setns": "0, 0",
    "mount": "b'none', b'/tmp', b'tmpfs', 0, 0",
    "clone": "0x10000000 | 17, 0, 0, 0, 0",  # CLONE_NEWUSER | SIGCHLD
    "syslog": "3, 0, 0",
}


async def test_calls_into_shared_kernel_state_are_refused() -> None:
    lines = [
        f"r = libc.syscall({syscall_number(n)}, {args})\nprint({n!r}, r, ctypes.get_errno())"
        for n, args in REFUSED_CALLS.items()
    ]
    clone3 = f"r = libc.syscall({syscall_number('clone3')}, 0, 0)\nprint('clone3', r, ctypes.get_errno())"
    code = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n" + "\n".join([*lines, clone3])
    limits = SandboxLimits(test_timeout=2)
    async with open_sandbox(code, None, limits) as sandbox:
        run = await sandbox.run("", limits.wall_timeout)
    expected = [f"{name} -1 1" for name in REFUSED_CALLS] + ["clone3 -1 38"]  # EPERM; ENOSYS
    assert run.output.splitlines() == expected


async def test_ordinary_processes_and_threads_still_work() -> None:
    code = """
import subprocess, sys, threading
out = subprocess.run([sys.executable, "-S", "-c", "print(6 * 7)"], capture_output=True, text=True).stdout
threading.Thread(target=print, args=(out.strip(),)).start()
"""
    if not CgroupHome.find().parents:
        pytest.skip("without a cgroup a test may not start processes")
    assert (await check(request(code, [""], ["42"]), SandboxLimits(test_timeout=5))).reward == 1.0


async def sandbox_uid(hold: float = 0.0) -> tuple[int, int]:
    """The uid a sandbox was given and the uid its code runs as."""
    code = f"import os, time\ntime.sleep({hold})\nprint(os.getuid())"
    limits = SandboxLimits(test_timeout=5)
    async with open_sandbox(code, None, limits) as sandbox:
        run = await sandbox.run("", limits.wall_timeout)
        return sandbox.uid, int(run.output)


@needs_root
async def test_live_sandboxes_never_share_a_uid_even_across_worker_processes() -> None:
    script = f"import asyncio; from {__name__} import sandbox_uid; print(asyncio.run(sandbox_uid(2.0))[1])"
    other_worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).resolve().parents[2]
    )
    await asyncio.sleep(1.0)  # the other worker's sandbox is live now
    ours = await asyncio.gather(*(sandbox_uid(0.5) for _ in range(3)))
    theirs = int((await other_worker.communicate())[0])
    assert all(given == seen for given, seen in ours)  # the code runs as the uid it was given
    uids = [seen for _, seen in ours] + [theirs]
    assert len(set(uids)) == 4
    lo, hi = SANDBOX_LIMITS.uid_base, SANDBOX_LIMITS.uid_base + SANDBOX_LIMITS.uid_count
    assert all(lo <= uid < hi for uid in uids)
    assert not any((LEASE_DIR / str(uid)).exists() for uid in uids)  # all given back


# Processes outliving a test: a double-forked, new-session daemon.

DAEMON = """
import os, sys, time
if input() == "start":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(60)", "{marker}"])
        os._exit(0)
    time.sleep(0.2)
    print("started")
else:
    mine = {{1, os.getpid(), os.getppid()}}
    print("alive" if any(int(p) not in mine for p in os.listdir("/proc") if p.isdigit()) else "gone")
"""


async def test_a_daemon_started_by_one_test_is_gone_before_the_next() -> None:
    marker = f"daemon-{uuid.uuid4().hex}"
    code = DAEMON.format(marker=marker)
    result = await check(
        request(code, ["start", "check"], ["started", "alive"]), SandboxLimits(test_timeout=5)
    )
    assert result.reward == 0.0 and result.result == [True, -2]  # the second test needs the daemon
    assert result.metadata is not None and result.metadata["output"] == "gone\n"
    assert await all_gone(marker)


# Denial of service: slow submissions holding the slots, sandboxes outliving their callers.


async def test_slow_submissions_do_not_hold_up_a_quick_one() -> None:
    limits = SandboxLimits(test_timeout=2, concurrency=1, quantum=0.3)
    slow = "import time\ntime.sleep(0.6)\nprint(input())"
    finished: dict[str, float] = {}
    started = time.monotonic()

    async def submit(name: str, code: str, tests: int) -> float:
        if name == "quick":
            await asyncio.sleep(0.3)  # it asks last
        outcome = await run_unit_tests(code, UnitTests(inputs=["1"] * tests, outputs=["1"] * tests), limits)
        finished[name] = time.monotonic() - started
        return 1.0 if outcome.passed else 0.0

    names = ["slow1", "slow2", "slow3", "quick"]
    codes = [slow, slow, slow, "print(input())"]
    rewards = await asyncio.gather(*(submit(n, c, 2 if n == "quick" else 5) for n, c in zip(names, codes)))
    assert rewards == [1.0] * 4
    # Run to completion in arrival order, the quick one would finish last, after all 15 slow
    # tests; in fair turns it waits for one test of each slow one ahead of it, and is first.
    assert finished["quick"] < min(finished[n] for n in names[:3]), finished


async def test_past_the_callers_deadline_the_sandbox_is_killed_at_once() -> None:
    marker = f"late-{uuid.uuid4().hex}"
    code = f'import os, sys\nos.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(60)", "{marker}"])'
    deadline = time.time() + 1.5
    with pytest.raises(DeadlineExceeded, match="caller's deadline"):
        await check(request(code, ["1"], ["1"]), SandboxLimits(), deadline)
    assert time.time() - deadline < 0.5
    assert not processes_with(marker)  # gone when verify returns, not later
    home = CgroupHome.find()
    assert not [p for parent in home.parents for p in parent.glob(f"gymbus-sandbox-{os.getpid()}-*")]


async def test_a_submission_that_never_gets_a_slot_is_not_scored() -> None:
    limits = SandboxLimits(test_timeout=2, concurrency=1, total_timeout=1.0)
    patient = SandboxLimits(test_timeout=2, concurrency=1, total_timeout=10.0)  # the same slot
    holder = asyncio.create_task(
        run_unit_tests("import time\ntime.sleep(2)", UnitTests(inputs=["1"], outputs=[""]), patient)
    )
    await asyncio.sleep(0.2)
    with pytest.raises(DeadlineExceeded, match="no sandbox slot came free within 1 s"):
        await run_unit_tests("print(1)", UnitTests(inputs=["1"], outputs=["1"]), limits)
    assert (await holder).passed


async def test_time_taken_counts_running_the_tests_not_waiting_for_a_slot() -> None:
    """As NeMo Gym measures `unit_tests_time_taken`: inside the slot."""
    limits = SandboxLimits(test_timeout=2, concurrency=1)
    holder = asyncio.create_task(
        run_unit_tests("import time\ntime.sleep(1.5)", UnitTests(inputs=["1"], outputs=[""]), limits)
    )
    await asyncio.sleep(0.1)
    started = time.monotonic()
    result = await check(request("print(input())", ["1"], ["1"]), limits)
    waited = time.monotonic() - started
    assert result.reward == 1.0 and result.unit_tests_time_taken is not None
    assert 0 < result.unit_tests_time_taken < waited - 1.0
    assert (await holder).passed


def test_a_submissions_budget_ends_before_the_bus_stops_waiting() -> None:
    assert SANDBOX_LIMITS.total_timeout + 30 <= Timeouts().verify
    assert all(value > 0 for value in vars(SANDBOX_LIMITS).values() if isinstance(value, int | float))
