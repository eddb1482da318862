"""A write the disk cannot hold names its file and leaves every output file whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A child process whose files may not grow past 4 KiB (RLIMIT_FSIZE): the kernel then
# writes what fits and fails the rest, as a full disk does (EFBIG instead of ENOSPC).
LIMITED_WRITER = """
import asyncio, resource, sys
from pathlib import Path
from gymbus.runner._output import JsonlWriter, WriteFailed

async def main() -> None:
    writer = JsonlWriter(Path(sys.argv[1]))
    writer.add(b'{"n": 0}')
    await writer.flush()
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    for n in range(1, 11):
        writer.add(b'{"n": %d, "pad": "%s"}' % (n, b"x" * 1000))
    try:
        await writer.flush()
    except WriteFailed as exc:
        print(exc)
    print(writer.path.stat().st_size)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    await writer.flush()  # room again: what was kept is written now

asyncio.run(main())
"""


def test_a_failed_append_names_the_file_is_cut_back_and_is_kept_for_later(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", LIMITED_WRITER, str(out)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    message, size = done.stdout.splitlines()
    assert message == f"cannot write {out}: File too large"
    assert int(size) == len(b'{"n": 0}\n')  # the part that fitted was cut back off
    lines = out.read_text().splitlines()
    assert [line[:9] for line in lines] == ['{"n": 0}'] + [f'{{"n": {n}, '[:9] for n in range(1, 11)]
