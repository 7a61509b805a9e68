"""Freed memory stays in the process on CPU (glibc), as a caching allocator keeps it."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_RSS_AFTER_FREE = """
import sys
from seqpart.solver.measure.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1])
before = rss()
block = bytearray(20 << 20)  # 20 MiB, touched (zeroed) by bytearray
del block
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_freed_memory_stays_in_the_process_as_a_caching_allocator_keeps_it() -> None:
    """By default glibc returns a freed 20 MiB block to the OS at once; with keep_freed_memory
    the pages stay mapped, so the next micro-batch does not fault them in again."""
    def kept_pages(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _RSS_AFTER_FREE, mode], capture_output=True, text=True,
                             check=True)
        return int(out.stdout.split()[-1])

    pages = (20 << 20) // 4096
    assert kept_pages("default") < pages // 4
    assert kept_pages("keep") > pages * 3 // 4
