"""Falkenauer's bin-packing classes, generated from their published recipe (Falkenauer 1996).

The OR-Library files (binpack1-8) are not shipped with seqpart; `bench_binpack.py --orlib DIR`
reads them when you have them. This module builds instances of the same classes, seeded:

* uniform u120, u250, u500, u1000: item sizes drawn uniformly from the integers 20..100,
  capacity 150. Their optimum is not known in advance; the benchmark counts a call as optimal
  when its count meets the lower bound it proves.
* triplets t60, t120, t249, t501: capacity 1000, every bin of the optimum holds exactly three
  items filling it: the first drawn uniformly from 380..490, the second from 250 up to half of
  the room left, the third the rest. The optimum is n/3 by construction; the items are shuffled.
"""

from __future__ import annotations

import random

#: class -> (number of items, capacity)
CLASSES = {
    "u120": (120, 150), "u250": (250, 150), "u500": (500, 150), "u1000": (1000, 150),
    "t60": (60, 1000), "t120": (120, 1000), "t249": (249, 1000), "t501": (501, 1000),
}


def instance(cls: str, index: int) -> tuple[str, int, list[int], int]:
    """(name, capacity, sizes, optimum or 0 when unknown) of instance ``index`` of ``cls``."""
    n, cap = CLASSES[cls]
    rng = random.Random(f"{cls}_{index:02d}")  # the same instances on every run and machine
    if cls.startswith("u"):
        return f"{cls}_{index:02d}", cap, [rng.randint(20, 100) for _ in range(n)], 0
    sizes = []
    for _ in range(n // 3):
        first = rng.randint(380, 490)
        room = cap - first
        second = rng.randint(250, room // 2)
        sizes += [first, second, room - second]
    rng.shuffle(sizes)
    return f"{cls}_{index:02d}", cap, sizes, n // 3


def instances(classes: list[str], per_class: int = 20) -> list[tuple[str, int, list[int], int]]:
    return [instance(cls, i) for cls in classes for i in range(per_class)]
