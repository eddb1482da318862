"""What a sandbox takes from its host: a uid of its own, and a cgroup. No bubblewrap needed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from gymbus.functions.environments._cgroups import CgroupHome, _Mount, _v2_home
from gymbus.functions.environments._uids import lease_uid

LEASE = (
    "import sys, time\n"
    "from functions.environments._uids import lease_uid\n"
    "lease = lease_uid(7000, 1, __import__('pathlib').Path(sys.argv[1]))\n"
    "print(lease.uid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_no_two_leases_hold_one_uid(tmp_path: Path) -> None:
    first, second = lease_uid(5000, 2, tmp_path), lease_uid(5000, 2, tmp_path)
    assert {first.uid, second.uid} == {5000, 5001}
    with pytest.raises(OSError, match="no free sandbox uid"):
        lease_uid(5000, 2, tmp_path)
    first.release()
    first.release()  # a second release does nothing
    assert not (tmp_path / str(first.uid)).exists() and (tmp_path / str(second.uid)).exists()
    assert lease_uid(5000, 2, tmp_path).uid == first.uid


async def test_a_uid_held_by_another_worker_is_not_leased_until_that_worker_dies(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LEASE, str(tmp_path), stdout=asyncio.subprocess.PIPE, cwd=repo
    )
    assert other.stdout is not None
    assert int(await other.stdout.readline()) == 7000
    with pytest.raises(OSError):
        lease_uid(7000, 1, tmp_path)
    other.send_signal(signal.SIGKILL)  # a crash: the kernel drops its lock
    await other.wait()
    lease = lease_uid(7000, 1, tmp_path)
    assert lease.uid == 7000
    lease.release()
    assert os.listdir(tmp_path) == []


def test_cgroup_v2_groups_get_memory_pids_and_no_swap(tmp_path: Path) -> None:
    """cgroup v2's files, on a directory shaped like one (this host may have no v2 memory
    controller): the worker's group delegates both controllers, each sandbox is bounded."""
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("\n")
    home = _v2_home(_Mount("/", tmp_path, "cgroup2", frozenset()), "/")
    assert home == CgroupHome(2, (tmp_path,))
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids"
    group = home.create(512 * 1024**2, 16)
    (path,) = group.dirs
    assert path.parent == tmp_path and path.name.startswith(f"gymbus-sandbox-{os.getpid()}-")
    assert (path / "memory.max").read_text() == str(512 * 1024**2)
    assert (path / "pids.max").read_text() == "16"
    assert group.procs_files() == (os.fsencode(path / "cgroup.procs"),)


def test_a_v2_group_without_the_controllers_says_why(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    home = _v2_home(_Mount("/", tmp_path, "cgroup2", frozenset()), "/")
    assert not home.parents and "lacks the memory or pids controller" in home.reason


@pytest.mark.skipif(not CgroupHome.find().parents, reason=f"no cgroup here: {CgroupHome.find().reason}")
async def test_removing_a_group_kills_what_is_left_in_it() -> None:
    group = CgroupHome.find().create(64 * 1024**2, 8)
    sleeper = await asyncio.create_subprocess_exec(
        "sleep", "60", preexec_fn=lambda: [Path(os.fsdecode(f)).write_text("0") for f in group.procs_files()]
    )
    assert group.pids() == {sleeper.pid}
    assert await group.remove(timeout=5)
    assert await sleeper.wait() == -signal.SIGKILL
    assert not any(path.exists() for path in group.dirs)


@pytest.mark.skipif(not CgroupHome.find().parents, reason=f"no cgroup here: {CgroupHome.find().reason}")
async def test_groups_left_by_a_worker_that_died_are_removed() -> None:
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    home = CgroupHome.find()
    left = [parent / f"gymbus-sandbox-{dead.pid}-left" for parent in home.parents]
    ours = home.create(64 * 1024**2, 8)  # a live worker's group stays
    for path in left:
        path.mkdir()
    home.remove_stale()
    assert not any(path.exists() for path in left)
    assert all(path.exists() for path in ours.dirs)
    assert await ours.remove(timeout=5)
