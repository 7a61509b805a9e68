"""Keep freed memory in the process while timing on CPU, as torch's CUDA caching allocator does.

No torch here: a trainer calibrating with its own callable on CPU calls this first.
"""

from __future__ import annotations

#: glibc's mallopt parameters (malloc.h): the mmap threshold tops out at 32 MiB on 64-bit.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _MMAP_MAX_BYTES = -1, -3, 32 << 20


def keep_freed_memory() -> bool:
    """Keep freed memory in this process (glibc), as torch's CUDA caching allocator does.

    Why: on CUDA a micro-batch reuses the blocks the one before it freed, so its time does not
    depend on what ran before. On CPU, glibc hands large freed blocks back to the OS and the
    next micro-batch pays page faults to get them again: measured on this CPU, a 2,300-token
    micro-batch took 143 ms after a small one and 136 ms after another like it (131 ms either
    way with this setting). Calibration times micro-batches in random order and a step runs
    them back to back, so without it the fit charges large micro-batches for faults a step does
    not pay. Returns False where mallopt is not available (not glibc): nothing changes there."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
